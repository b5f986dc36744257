"""`why`: why a boot was cold or only partly warm, against the boot it should have matched.

`explain` picks the other boot (the one given, or the best candidate: the newest warm boot of
the same manifest and profile, else the newest that ended ok), gathers both boots' facts and
names every factor that changed (`compare`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    SCAN_FAILED,
    BootRecord,
    all_boots,
    boot_by_id,
    cache_by_id,
    scan_failure,
)
from lifecycle.ledger.results import result_by_id
from lifecycle.report import Report, plain
from lifecycle.table import human_bytes, lines_text
from lifecycle.why.compare import BootFacts, Change, boot_facts, boot_verdict, compare, missed

__all__ = ["BootFacts", "Change", "Explanation", "explain"]

# A boot that could serve as what a cold one should have matched: it reused warm caches.
_WARM = ("warm-hit", "partial")


@dataclass(frozen=True)
class Explanation(Report):
    """A boot, the boot it is compared with and why that one, what changed, what did not."""

    now: BootFacts
    then: BootFacts
    chosen: str  # why `then` was compared with
    changes: list[Change]
    same: list[str]
    summary: str  # what the boot was, from what lifecycle observed of it

    FORMAT: ClassVar[str] = "lifecycle-why/1"

    def to_json(self) -> dict[str, Any]:
        found = self
        return {
            "format": self.FORMAT,
            "boot": _boot_json(found.now),
            "against": {**_boot_json(found.then), "chosen": found.chosen},
            "summary": found.summary,
            "changed": plain(found.changes),
            "same": found.same,
        }

    def text(self) -> str:
        """The boot's warmth, the other boot and why it was chosen, then each change."""
        found = self
        now, then = found.now, found.then
        lines = [
            f"boot {now.boot.id}: {now.warmth}",
            f"  {found.summary}",
            *(
                f"  passed over {d.cache_id}: changed behind lifecycle's back since its last"
                f" scan ({d.described}); not mounted"
                for d in now.passed_over.values()
            ),
            *(
                f"  {r.name}: {r.mode}, {r.verdict or _unjudged(now.boot, r.name)}"
                for r in now.recorded
            ),
            f"compared with {then.boot.id}: {then.warmth} ({found.chosen})",
        ]
        if found.changes:
            lines.append("what changed:")
            lines += [f"  {change.line()}" for change in found.changes]
        else:
            lines.append("nothing that decides a cache's reuse changed")
        lines.append("the same: " + ", ".join(found.same))
        if now.untracked and now.untracked.files:
            lines.append(
                f"outside tracked caches: {human_bytes(now.untracked.bytes)} in "
                f"{now.untracked.files} files, lost with the container and rebuilt by every boot:"
            )
            lines += [f"  {d}: {human_bytes(b)} in {n} files" for d, n, b in now.untracked.roots]
        return lines_text(lines)


def _unjudged(boot: BootRecord, name: str) -> str:
    """Why a cache of the boot has no verdict: its end-of-boot scan failed (the file and why),
    else `-` (a boot recorded before verdicts were)."""
    for cache_id in re.findall(SCAN_FAILED.format(r"(\S+)"), boot.error or ""):
        if cache_id.rsplit("-", 1)[0] == name:
            return f"not judged: its scan failed ({scan_failure(boot.error, cache_id)})"
    return "-"


def explain(ledger: Ledger, boot_id: str, against: str | None = None) -> Explanation:
    """Compare boot `boot_id` with `against`, or with the best candidate warm boot."""
    now = boot_facts(ledger, _ran(_boot(ledger, boot_id)))
    if against is not None:
        then, chosen = boot_facts(ledger, _ran(_boot(ledger, against))), "as asked (--against)"
    else:
        then, chosen = _candidate(ledger, now)
    changes, same = compare(now, then)
    return Explanation(now, then, chosen, changes, same, summarize(now))


def summarize(now: BootFacts) -> str:
    """The boot's verdict in a sentence, with the facts it rests on."""
    verdict, recorded = now.verdict, now.recorded
    reads = [r for r in recorded if r.read]
    read = ", ".join(f"{r.name} {r.read}" for r in reads)
    if verdict in _WARM:
        how = (
            f"the engine read files of its caches ({read}) and compiled nothing into them"
            if reads
            else "nothing was compiled into its caches, and the log names them (reads not seen)"
        )
        if verdict == "warm-hit":
            return f"warm: {how}"
        return f"partly warm: {how}, but it wrote JIT output outside the tracked caches"
    if verdict == "mounted-but-missed":
        where = ", ".join(f"{r.name} +{r.written} files" for r in missed(now))
        return f"missed: mounted warm, the engine still compiled into its caches ({where})"
    if verdict == "cold-compiled":
        return "cold: the engine compiled into caches that started empty"
    if verdict == "unused":
        return "unused: the engine opened none of its caches' files"
    return "no JIT output: its caches hold no file" if verdict == "empty" else verdict


def _boot(ledger: Ledger, boot_id: str) -> BootRecord:
    found = boot_by_id(ledger, boot_id)
    if found is not None:
        return found
    if cache_by_id(ledger, boot_id) is not None:  # the id a teardown plan or `caches` shows
        raise LifecycleError(
            f"{boot_id} is a cache, not a boot: `lifecycle audit cache {boot_id}` lists its boots"
        )
    result = result_by_id(ledger, boot_id)
    if result is not None:
        raise LifecycleError(f"{boot_id} is a result: `lifecycle why {result.boot_id}` (its boot)")
    raise LifecycleError(f"no boot {boot_id!r} in this host's ledger (see `lifecycle boots`)")


def _ran(boot: BootRecord) -> BootRecord:
    """A boot whose engine ran: one that ended before dockerd made its container (a pre-boot
    hook refused it, dockerd did) has no caches' use, log or hashes to explain or compare."""
    if boot.container_id is None and boot.outcome != "running":
        why = f": {boot.error}" if boot.error else ""
        raise LifecycleError(
            f"boot {boot.id} ended {boot.outcome} before its engine ran{why}; nothing of it was"
            " warm or cold (`lifecycle boots` lists it)"
        )
    return boot


def _candidate(ledger: Ledger, now: BootFacts) -> tuple[BootFacts, str]:
    """The newest warm boot of the same manifest and profile; else the newest that ended ok."""
    same = [
        b
        for b in all_boots(ledger)  # newest first
        if b.id != now.boot.id
        and b.manifest_name == now.boot.manifest_name
        and b.profile == now.boot.profile
        and b.outcome == "ok"
    ]
    # Judged from the ledger, newest first, until one is warm: a GPU host's ledger holds
    # thousands of boots, and only the one chosen has its evidence read.
    warm = next((b for b in same if boot_verdict(ledger, b.id) in _WARM), None)
    if warm is not None:
        what = f"the newest warm boot of {now.boot.manifest_name} / {now.boot.profile}"
        return boot_facts(ledger, warm), what
    if same:
        what = f"the newest boot of {now.boot.manifest_name} / {now.boot.profile} that ended ok"
        return boot_facts(ledger, same[0]), what + " (none was warm)"
    raise LifecycleError(
        f"no other boot of {now.boot.manifest_name} / {now.boot.profile} ended ok to compare "
        f"{now.boot.id} with; name one with --against BOOT"
    )


def _boot_json(facts: BootFacts) -> dict[str, Any]:
    return {
        "id": facts.boot.id,
        "started_at": facts.boot.started_at,
        "outcome": facts.boot.outcome,
        "verdict": facts.verdict,
        "warmth": facts.warmth,
        "caches": {
            r.name: {"mode": r.mode, "verdict": r.verdict, "files_read": r.read}
            for r in facts.recorded
        },
        "untracked": [{"path": path, "bytes": size} for path, size in facts.writes],
        "passed_over": [
            {"cache_id": d.cache_id, "cache_name": name, **json.loads(d.paths)}
            for name, d in facts.passed_over.items()
        ],
    }
