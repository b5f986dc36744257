"""lifecycle: declarative build-and-cache lifecycle manager for patched vLLM engines."""

from __future__ import annotations

__version__ = "0.1.0"
