"""`lifecycle archive` and `lifecycle restore`: caches to and from the S3 archive."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.restore import restore_cache
from lifecycle.archive.run import ArchiveReport
from lifecycle.errors import LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import all_caches
from lifecycle.results.publish import archive_with_results
from lifecycle.table import human_bytes


def check_selection(names: Sequence[str], every: bool) -> None:
    """Cache ids or --all, one of the two."""
    if bool(names) == every:
        raise LifecycleError("name the caches to archive, or pass --all (not both)")


def select_caches(ledger: Ledger, names: Sequence[str], every: bool) -> tuple[list[str], list[str]]:
    """(cache ids to archive, why others were skipped): the named ones, or with --all every
    live cache and every archived one (re-verified), less those a running boot holds."""
    check_selection(names, every)
    if names:
        return list(dict.fromkeys(names)), []
    chosen, skipped = [], []
    for cache in reversed(all_caches(ledger)):  # oldest first
        if cache.state not in ("live", "archived"):
            continue
        if cache.in_use_by:
            skipped.append(f"{cache.id}: in use by boot {cache.in_use_by}")
        elif not Path(cache.host_path).is_dir():
            skipped.append(f"{cache.id}: missing (its dir {cache.host_path} is gone)")
        else:
            chosen.append(cache.id)
    return chosen, skipped


def archive(
    ledger: Ledger,
    client: Any,
    location: ArchiveLocation,
    names: Sequence[str],
    *,
    every: bool,
    with_content: bool,
    dry_run: bool,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Archive the selected caches; the report the CLI prints (as text or JSON)."""
    cache_ids, skipped = select_caches(ledger, names, every)
    reports = archive_with_results(
        ledger,
        client,
        location,
        cache_ids,
        with_content=with_content,
        dry_run=dry_run,
        progress=progress,
    )
    return {
        "location": location.url(),
        "dry_run": dry_run,
        "caches": [asdict(report) for report in reports],
        "skipped": skipped,
        "totals": _totals(reports),
    }


def _totals(reports: list[ArchiveReport]) -> dict[str, int]:
    return {
        "caches": len(reports),
        "blobs": sum(r.blobs for r in reports),
        "blobs_uploaded": sum(r.blobs_uploaded for r in reports),
        "bytes_uploaded": sum(r.bytes_uploaded for r in reports),
        "blobs_present": sum(r.blobs_present for r in reports),
    }


def archive_text(report: dict[str, Any]) -> str:
    """The human form: a line per cache, then the summary line."""
    lines = [f"skipped {why}" for why in report["skipped"]]
    verb = "would upload" if report["dry_run"] else "uploaded"
    for cache in report["caches"]:
        state = "verified" if cache["verified"] else "not verified (dry run)"
        lines.append(
            f"{cache['cache_id']}: {cache['blobs']} blobs, {verb} {cache['blobs_uploaded']}"
            f" ({human_bytes(cache['bytes_uploaded'])}); {state}"
        )
    totals = report["totals"]
    plural = "" if totals["caches"] == 1 else "s"
    if report["dry_run"]:
        lines.append(
            f"dry run, nothing written: {totals['caches']} cache{plural}, {totals['blobs']} blobs,"
            f" {totals['blobs_uploaded']} to upload ({human_bytes(totals['bytes_uploaded'])}),"
            f" {totals['blobs_present']} already there; {report['location']}"
        )
    else:
        lines.append(
            f"archived {totals['caches']} cache{plural}: {totals['blobs']} blobs,"
            f" {totals['blobs_uploaded']} new ({human_bytes(totals['bytes_uploaded'])} sent);"
            f" verified; {report['location']}"
        )
    return "\n".join(lines) + "\n"


def restore(
    ledger: Ledger,
    client: Any,
    location: ArchiveLocation,
    cache_id: str,
    *,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Restore one cache's files from the archive; the report the CLI prints."""
    return asdict(restore_cache(ledger, client, location, cache_id, progress=progress))


def restore_text(report: dict[str, Any]) -> str:
    """The human form of a restore."""
    how = "already in place" if report["already_present"] else "restored"
    origin = "" if report["known"] else " (new to this host: its row was made from the record)"
    text = (
        f"{report['cache_id']}: {how} at {report['host_path']}{origin}\n"
        f"  {report['files']} files, {human_bytes(report['bytes'])},"
        f" tree digest {report['tree_digest']}; live; from {report['location']}\n"
    )
    if report["withheld"]:
        text += (
            f"  not restored: {', '.join(report['withheld'])} (the archive withheld them: they"
            " held a secret's value; the engine writes them again)\n"
        )
    if report["modes_masked"]:
        text += (
            f"  modes masked (no setuid, setgid, sticky or world-writable):"
            f" {', '.join(report['modes_masked'])}\n"
        )
    return text
