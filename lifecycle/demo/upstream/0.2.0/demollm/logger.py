"""vLLM-style log lines: `INFO 10-10 12:00:00 [serve.py:42] message`."""

from __future__ import annotations

import logging
import sys

_FORMAT = "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
_DATE_FORMAT = "%m-%d %H:%M:%S"


def init_logger(name: str) -> logging.Logger:
    """A logger under `demollm` that writes vLLM's format to stdout."""
    root = logging.getLogger("demollm")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(_FORMAT, _DATE_FORMAT))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    # `python -m demollm.serve` names its module `__main__`: keep it under our handler.
    return logging.getLogger(name if name.startswith("demollm") else f"demollm.{name}")
