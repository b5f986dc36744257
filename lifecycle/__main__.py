"""`python -m lifecycle` runs the CLI."""

from __future__ import annotations

from lifecycle.cli import main

main()
