"""demollm: a tiny engine that boots like vLLM (JIT caches, log lines) without a GPU."""

__version__ = "0.2.0"
