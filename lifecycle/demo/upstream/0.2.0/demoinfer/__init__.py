"""demoinfer: JIT-compiled kernels in a FlashInfer-style workspace."""

__version__ = "0.2.0"
