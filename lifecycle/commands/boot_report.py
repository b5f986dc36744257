"""A boot as `lifecycle boot` reports it and `lifecycle boots` lists it: its record, its
caches, its hooks. Apart from the boot verb, which imports the boot's machinery and the manifest
models, so that a listing of the ledger imports only what its rows are made of."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.errors import EXIT_NO, EXIT_OK
from lifecycle.evidence.verdict import recorded_uses, recorded_warmth
from lifecycle.ledger.boots import (
    BakedUse,
    BootRecord,
    CacheDamage,
    CacheUse,
    UntrackedWrite,
    scan_failure,
)
from lifecycle.report import Report, plain
from lifecycle.table import visible


@dataclass(frozen=True)
class HookEntry:
    """A hook attached to a boot, and whether it declared it observes the engine."""

    name: str
    observing: bool  # it declared that it changes what it watches


def hooks_of(hooks: str) -> tuple[HookEntry, ...]:
    """The hooks a boot ran with, from the JSON text the ledger keeps them as."""
    return tuple(HookEntry(**hook) for hook in json.loads(hooks))


@dataclass(frozen=True)
class BootReport(Report):
    """One finished boot: its record and how it used each cache."""

    FORMAT: ClassVar[str] = "lifecycle-boot/1"
    boot: BootRecord
    caches: tuple[CacheUse, ...]
    untracked: tuple[UntrackedWrite, ...] = ()  # JIT output written outside the caches
    passed_over: tuple[CacheDamage, ...] = ()  # caches it found changed behind our back
    baked: tuple[BakedUse, ...] = ()  # the caches in its image's layers (lifecycle bake)

    @property
    def warmth(self) -> tuple[str, str]:
        """(verdict, phrase): `warm-hit`, `warm`; `partial`, `warm (partial: 155.0 MiB
        written outside tracked caches)`; … (lifecycle.evidence.verdict)."""
        writes = [(w.path, w.bytes) for w in self.untracked]
        uses = [*self.caches, *(use.as_use() for use in self.baked)]
        return recorded_warmth(recorded_uses(uses), writes)

    @property
    def unscanned(self) -> list[str]:
        """A line for each cache its end-of-boot scan could not read: not judged, not reusable
        (the engine may have ended well; what failed was lifecycle's scan)."""
        said = {u.cache_id: scan_failure(self.boot.error, u.cache_id) for u in self.caches}
        return [
            f"not scanned {cache_id}: {visible(why)}; not judged, and no boot mounts it warm"
            " (what it holds is unknown)"
            for cache_id, why in said.items()
            if why is not None
        ]

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.boot.outcome == "ok" else EXIT_NO

    @property
    def hooks(self) -> tuple[HookEntry, ...]:
        """The hooks it ran with."""
        return hooks_of(self.boot.hooks)

    def to_json(self) -> dict[str, Any]:
        """The boot's row, with its hooks and secret names as lists, then its caches."""
        row = plain(self.boot)
        row["hooks"] = plain(self.hooks)
        row["secret_names"] = json.loads(self.boot.secret_names)
        verdict, warmth = self.warmth
        return {
            "format": self.FORMAT,
            **row,
            "caches": plain(self.caches),
            "baked": plain(self.baked),
            "verdict": verdict,
            "warmth": warmth,
            "untracked": [
                {"path": w.path, "change": w.change, "bytes": w.bytes} for w in self.untracked
            ],
            "passed_over": [
                {"cache_id": d.cache_id, "tree_digest": d.tree_digest, **json.loads(d.paths)}
                for d in self.passed_over
            ],
        }

    def text(self) -> str:
        """`boot ID: OUTCOME (exit N)`, its caches cold or warm, where its evidence is."""
        boot = self.boot
        caches = ", ".join(
            [f"{u.cache_id} {u.mode}" for u in self.caches]
            + [f"{u.cache_name} baked {u.verdict}" for u in self.baked]
        )
        flag = " [instrumented]" if boot.instrumented else ""
        # A timeout, or a boot failed though its engine exited 0 (its log or a scan not kept
        # on a full disk): the exit code does not say why.
        told = boot.outcome == "timeout" or (boot.outcome == "failed" and boot.exit_code == 0)
        # The error and the damage name files the engine made: a field each (table.visible).
        why = f" ({visible(boot.error)})" if told and boot.error else ""
        passed = [
            f"  passed over {d.cache_id}: changed behind lifecycle's back since its last scan"
            f" ({visible(d.described)}); marked, not mounted\n"
            for d in self.passed_over
        ]
        return (
            f"boot {boot.id}: {boot.outcome} (exit {boot.exit_code}){why}{flag}\n"
            + "".join(passed)
            + "".join(f"  {line}\n" for line in self.unscanned)
            + f"  caches: {caches}\n  jit: {self.warmth[1]}\n  evidence: {boot.evidence_path}\n"
        )
