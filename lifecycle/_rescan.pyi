# The C extension built from _rescan.c (see lifecycle/rescan.py, which uses it).
from collections.abc import Mapping, Sequence

from lifecycle.fingerprint import Entry

def differing(
    top: str, entries: Sequence[Entry], threads: int, suffixes: tuple[str, ...]
) -> list[tuple[str, Mapping[str, Entry]]] | None: ...
