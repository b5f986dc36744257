"""The archive's record formats, one row each: what the models (lifecycle.records), the archive,
gc and `lifecycle schema --record` read.

Apart from the models, so that the command line can offer the kinds without loading pydantic.
Each model names the formats it reads in its `format` field; lifecycle.records checks that they
are these.
"""

from __future__ import annotations

from typing import Final

VERSION_FORMAT: Final = "lifecycle-cache-version/2"
BOOT_FORMAT: Final = "lifecycle-boot-record/1"
RESULT_FORMAT_2: Final = "lifecycle-result-record/2"
IMAGE_FORMAT: Final = "lifecycle-image-record/1"
PIN_FORMAT: Final = "lifecycle-pin/1"
GC_FORMAT: Final = "lifecycle-gc-record/1"
VERSION_FORMAT_1: Final = "lifecycle-cache-version/1"  # read only: no packs
CACHE_FORMAT: Final = "lifecycle-cache-record/1"  # the previous release's, read only
RESULT_FORMAT: Final = "lifecycle-result-record/1"  # the previous release's, read only

# format -> (the `--record KIND` it is written as now, None when only read; the kind of key, in
# lifecycle.archive.layout, it is stored under).
FORMATS: Final[dict[str, tuple[str | None, str]]] = {
    VERSION_FORMAT: ("cache", "version"),
    BOOT_FORMAT: ("boot", "boot"),
    RESULT_FORMAT_2: ("result", "result"),
    IMAGE_FORMAT: ("image", "image"),
    PIN_FORMAT: ("pin", "pin"),
    GC_FORMAT: ("gc", "gc"),
    VERSION_FORMAT_1: (None, "version"),
    CACHE_FORMAT: (None, "legacy-cache"),
    RESULT_FORMAT: (None, "legacy-result"),
}
CURRENT = {kind: name for name, (kind, _) in FORMATS.items() if kind is not None}
RECORD_KINDS = (*CURRENT, *FORMATS)  # a kind, or any format's full name
STORED_UNDER = frozenset(stored for _, stored in FORMATS.values())  # the keys records live at
