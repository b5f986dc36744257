"""demoinfer: JIT-compiled kernels in a FlashInfer-style workspace."""

__version__ = "0.1.0"
