"""The end of a boot judged: each cache's verdict from what the engine opened and wrote in it
(observed) and what its scans found, the JIT output written outside the caches, and what of
both goes into the evidence bundle.

Runs after the container stopped (its changes are read before it is removed) and after every
cache was scanned; `lifecycle.evidence.verdict` says what each verdict means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lifecycle.boot.observe import CacheAccess
from lifecycle.boot.spec import CacheMount
from lifecycle.evidence.layout import CacheFile, artefact_kind, inventory, summarize
from lifecycle.evidence.verdict import (
    NOT_COMPILED,
    CacheJudged,
    describe_boot,
    judge_boot,
    judge_cache,
    log_names,
)
from lifecycle.fingerprint import Fingerprint
from lifecycle.ledger.boots import CacheUse, UntrackedWrite


def judge(
    mounts: Sequence[CacheMount],
    uses: Sequence[CacheUse],
    scans: Mapping[str, tuple[Fingerprint, frozenset[str]]],
    log_lines: Sequence[str],
    untracked: Sequence[UntrackedWrite],
    access: Mapping[str, CacheAccess] | None,
) -> tuple[list[CacheUse], dict[str, dict[str, Any]], dict[str, Any]]:
    """Every cache use with its verdict, and what the bundle says of each cache and of the
    boot (`scans`: name → fingerprint after, paths written; `access`: name → what the engine
    opened and wrote, None where it was not observed)."""
    judged, judged_uses, per_cache = [], [], {}
    by_id = {m.cache_id: m for m in mounts}
    for use in uses:
        mount = by_id[use.cache_id]
        after, written = scans[mount.name]
        seen = access.get(mount.name) if access is not None else None
        files = [e for e in after.entries if e.kind != "dir"]
        # Written paths are those of `after` for a mounted cache; for a baked one, the files
        # the container's own layer holds under its path, which its layer's tree does not.
        dirs = {e.path for e in after.entries if e.kind == "dir"}
        compiled = sum(
            1 for path in written if path not in dirs and artefact_kind(path) not in NOT_COMPILED
        )
        in_log = log_names(log_lines, mount.container_path)
        # Read: opened, and found unchanged by the scan after the boot (a file opened to be
        # written, a log appended to, is not a file the engine reused).
        # Where opens were not observed (or not all of them), a log line naming the cache
        # stands in for them.
        read = sorted(seen.opened - written) if seen is not None else None
        reused = bool(read) or ((seen is None or not seen.complete) and in_log)
        verdict = judge_cache(mount.files_before, len(files), compiled, reused)
        judged.append(CacheJudged(mount.name, verdict, compiled))
        files_read = len(read) if read is not None else None
        judged_uses.append(replace(use, verdict=verdict, files_read=files_read))
        per_cache[mount.name] = {
            "mode": use.mode,
            "verdict": verdict,
            "compiled_files": compiled,
            "observed": _observed(seen, read),
            "log_names_cache": in_log,
            **inventory(CacheFile(e.path, e.size, e.path in written) for e in files),
        }
    summary = summarize([(w.path, w.bytes) for w in untracked]) if untracked else None
    modes = {by_id[u.cache_id].name: u.mode for u in uses}
    boot = {
        "verdict": judge_boot(judged, summary),
        "warmth": describe_boot(judged, summary, modes),
        "untracked": [{"path": w.path, "change": w.change, "bytes": w.bytes} for w in untracked],
        "untracked_roots": [
            {"dir": d, "files": n, "bytes": b} for d, n, b in (summary.roots if summary else ())
        ],
    }
    return judged_uses, per_cache, boot


_SAMPLE = 20  # paths shown of each kind: enough to see what was read, not a second listing


def _observed(seen: CacheAccess | None, read: list[str] | None) -> dict[str, Any] | bool:
    """What the bundle says of the engine's file access: counts and a sample of paths."""
    if seen is None or read is None:
        return False
    written = sorted(seen.written)
    return {
        "complete": seen.complete,
        "files_read": len(read),
        "files_written": len(written),
        "read": read[:_SAMPLE],
        "written": written[:_SAMPLE],
    }
