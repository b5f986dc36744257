"""Team pins (`lifecycle-pin/1`): results kept, with everything behind them, by `gc --remote`.

A pin is an object of its own at `pins/<result>/<sha256>.json`, written once; unpinning
deletes it. A pin in one host's ledger keeps that host's cache dirs; a pin in the archive keeps
the archive's records, whichever host runs the collection.
"""

from __future__ import annotations

from lifecycle.archive.layout import parse_key, records_of
from lifecycle.archive.record import create_record, read_as
from lifecycle.archive.store import BlobStore
from lifecycle.records import PinV1


def write_pin(store: BlobStore, pin: PinV1) -> str:
    """Write the pin (once); its key under the prefix."""
    return create_record(store, "pins", pin.target, pin)


def pins_at(store: BlobStore, target: str | None = None) -> dict[str, PinV1]:
    """key -> pin, of one target or of all."""
    prefix = records_of("pins", target) if target else "pins/"
    keys = [k.key for item in store.list(prefix) if (k := parse_key(item.key)) and k.kind == "pin"]
    return {key: read_as(store, PinV1, key) for key in keys}


def remove_pins(store: BlobStore, target: str, reason: str | None) -> list[str]:
    """Delete the target's pins with that reason (every one when None); the reasons removed."""
    gone = {key: pin for key, pin in pins_at(store, target).items() if reason in (None, pin.reason)}
    store.delete(sorted(gone))
    return sorted(pin.reason for pin in gone.values())
