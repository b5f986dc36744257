"""How warm a boot was, judged from what it wrote as well as from what it logged.

Hit counters and log lines are not proof of warm: with Inductor's `.so` files deleted, its
graph cache still reported every lookup a hit while 17 kernels recompiled. So each cache is
judged first from its files (what the boot created in it), then from the log:

- `empty`: the cache holds no file after the boot;
- `cold-compiled`: it started empty (a cold boot) and the engine filled it;
- `mounted-but-missed`: mounted warm, and the boot still compiled into it (new artefacts);
- `warm-hit`: mounted warm, nothing compiled into it, and the log names a path inside it;
- `unused`: mounted warm, nothing compiled into it, and nothing in the log shows it was
  read (an engine that reads a cache silently — Triton does — reads as unused: at least it
  did not miss).

The boot's own verdict is the same words, plus `partial`: warm where it was mounted, but JIT
output went outside the tracked caches (lost with the container, rebuilt by every boot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from lifecycle.evidence.untracked import UntrackedSummary, summarize
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
    mode: str, files_after: int, compiled_files: int, named_in_log: bool
) -> CacheVerdict:
    """One cache's verdict: `mode` cold|warm, the files it holds after the boot, how many
    compiled artefacts the boot created or changed in it, whether the log names a path in it."""
    if files_after == 0:
        return "empty"
    if mode == "cold":
        return "cold-compiled"
    if compiled_files:
        return "mounted-but-missed"
    return "warm-hit" if named_in_log else "unused"


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
        )
        for u in uses
    ]
