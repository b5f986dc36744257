"""A progress line that the next one replaces, in a module of its own: the CLI asks of every
line it prints whether it is one, and must not import the archive's upload code to ask."""

from __future__ import annotations


class Ticker(str):
    """A progress line that the next one replaces: a terminal shows it in place, and a pipe
    or a log, which would keep every one, is spared it."""
