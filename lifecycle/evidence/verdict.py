"""How warm a boot was, judged per cache from what the engine did to the cache's files.

Hit counters and log lines are not proof of warm (docs/warm.md, "What a verdict rests on"): a
cache is judged from the files the engine opened and wrote while it ran and from its scans
before and after; a log line naming the cache stands in for opens only where none were observed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from lifecycle.evidence.layout import UntrackedSummary, summarize
from lifecycle.ledger.boots import CacheUse
from lifecycle.table import human_bytes

CacheVerdict = Literal["cold-compiled", "warm-hit", "mounted-but-missed", "unused", "empty"]
BootVerdict = Literal[
    "cold-compiled", "warm-hit", "mounted-but-missed", "partial", "unused", "empty"
]


def as_verdict(text: str) -> CacheVerdict:
    """A cache verdict as read back from the ledger."""
    if text in get_args(CacheVerdict):
        return cast(CacheVerdict, text)
    raise ValueError(f"not a cache verdict: {text!r}")


# Files an engine rewrites on every boot without compiling anything.
NOT_COMPILED = frozenset({"jit-log"})


def judge_cache(
    files_before: int, files_after: int, compiled_files: int, read: bool
) -> CacheVerdict:
    """One cache's verdict: the files it held before and after the boot, how many compiled
    artefacts the boot created or changed in it, and whether the engine read any of its files
    (opened without writing them; from the log only where opens were not observed)."""
    if files_after == 0:
        return "empty"
    if files_before == 0:
        return "cold-compiled"
    if compiled_files:
        return "mounted-but-missed"
    return "warm-hit" if read else "unused"


def log_names(log_lines: Sequence[str], container_path: str) -> bool:
    """Whether a log line names `container_path` or a path inside it."""
    root = container_path.rstrip("/") + "/"
    return any(root in line or line.rstrip().endswith(root[:-1]) for line in log_lines)


@dataclass(frozen=True)
class CacheJudged:
    """One cache of a boot as judged."""

    name: str
    verdict: CacheVerdict
    compiled_files: int  # artefacts the boot created or changed in it


def judge_boot(caches: Sequence[CacheJudged], untracked: UntrackedSummary | None) -> BootVerdict:
    """The boot's verdict from its caches' and its untracked writes."""
    verdicts = {c.verdict for c in caches}
    if "mounted-but-missed" in verdicts:
        return "mounted-but-missed"
    if "cold-compiled" in verdicts:
        return "cold-compiled"
    if "warm-hit" in verdicts:
        return "partial" if untracked and untracked.files else "warm-hit"
    return "unused" if "unused" in verdicts else "empty"


def describe_boot(
    caches: Sequence[CacheJudged], untracked: UntrackedSummary | None, modes: Mapping[str, str]
) -> str:
    """One phrase for listings: `cold`, `warm`, `warm (partial: 155.0 MiB written outside
    tracked caches)`, `missed (vllm: +19 files while warm)`, `unused`, `no JIT output`."""
    verdict = judge_boot(caches, untracked)
    outside = (
        f"{human_bytes(untracked.bytes)} written outside tracked caches"
        if untracked and untracked.files
        else ""
    )
    plus = f" (+{outside})" if outside else ""
    if verdict == "mounted-but-missed":
        missed = ", ".join(
            f"{c.name}: +{c.compiled_files} files while warm"
            for c in caches
            if c.verdict == "mounted-but-missed"
        )
        return f"missed ({missed}{'; ' + outside if outside else ''})"
    if verdict == "cold-compiled":
        warm = [c.name for c in caches if modes.get(c.name) == "warm" and c.verdict == "warm-hit"]
        return (f"partly warm ({', '.join(warm)} warm)" if warm else "cold") + plus
    if verdict in ("partial", "warm-hit"):
        return f"warm (partial: {outside})" if outside else "warm"
    return ("unused" if verdict == "unused" else "no JIT output") + plus


@dataclass(frozen=True)
class RecordedUse:
    """A cache use as the ledger keeps it, for judging a finished boot again."""

    name: str
    mode: str
    verdict: str | None  # None: recorded before verdicts were
    written: int  # files added or changed
    read: int | None = None  # files the engine opened and left as they were; None: not seen


def recorded_warmth(
    uses: Sequence[RecordedUse], untracked: Sequence[tuple[str, int | None]]
) -> tuple[str, str]:
    """(the boot's verdict, its phrase) from what the ledger recorded; `unknown` for a boot
    recorded before verdicts were."""
    judged = [
        CacheJudged(u.name, as_verdict(u.verdict), u.written) for u in uses if u.verdict is not None
    ]
    if not judged:
        return "unknown", "-"
    summary = summarize(untracked) if untracked else None
    modes = {u.name: u.mode for u in uses}
    return judge_boot(judged, summary), describe_boot(judged, summary, modes)


def recorded_uses(uses: Sequence[CacheUse]) -> list[RecordedUse]:
    """Cache uses as `recorded_warmth` takes them; a cache's name is its id less the
    `-<12 hex>` tail."""
    return [
        RecordedUse(
            u.cache_id.rsplit("-", 1)[0],
            u.mode,
            u.verdict,
            (u.files_added or 0) + (u.files_changed or 0),
            u.files_read,
        )
        for u in uses
    ]
