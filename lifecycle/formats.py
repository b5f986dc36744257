"""The names of the archive's record formats, and the kinds `lifecycle schema --record` takes.

Apart from their models (lifecycle.records), so that the command line can offer them without
loading pydantic.
"""

from __future__ import annotations

from typing import Final

CACHE_FORMAT: Final = "lifecycle-cache-record/1"  # the previous release's, read only
RESULT_FORMAT: Final = "lifecycle-result-record/1"  # the previous release's, read only
VERSION_FORMAT_1: Final = "lifecycle-cache-version/1"  # read only: no packs
VERSION_FORMAT: Final = "lifecycle-cache-version/2"
BOOT_FORMAT: Final = "lifecycle-boot-record/1"
RESULT_FORMAT_2: Final = "lifecycle-result-record/2"
IMAGE_FORMAT: Final = "lifecycle-image-record/1"
PIN_FORMAT: Final = "lifecycle-pin/1"
GC_FORMAT: Final = "lifecycle-gc-record/1"

# `--record KIND`: the format each kind is written in now.
CURRENT = {
    "cache": VERSION_FORMAT,
    "boot": BOOT_FORMAT,
    "result": RESULT_FORMAT_2,
    "image": IMAGE_FORMAT,
    "pin": PIN_FORMAT,
    "gc": GC_FORMAT,
}
EVERY_FORMAT = (*CURRENT.values(), VERSION_FORMAT_1, CACHE_FORMAT, RESULT_FORMAT)
RECORD_KINDS = (*CURRENT, *EVERY_FORMAT)  # a kind, or any format's full name
