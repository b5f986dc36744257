"""`lifecycle verify CACHE[@TREE]|RESULT|IMAGE`: hash again what is needed of it; say what
differs. An IMAGE is a bake's or a build's, by id or tag: is it on dockerd, or how it went.

From the ledger: the live cache dirs (if still here) and the archived objects needed now,
where the ledger says each was archived. With `--from s3://…`: the archived objects alone.
What a gc removed by rule is reported as collected, what is no longer needed as history:
neither is a difference (`--all-versions` checks the history too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import BlobStore
from lifecycle.archive.verify import inspect_record
from lifecycle.audit.check import (
    VerifyReport,
    tree_in_ledger,
    verify_archived,
    verify_cache,
    verify_result,
)
from lifecycle.audit.verify import UNREAD, BlobChecker, Finding
from lifecycle.boot.baked import BakedUnreadable, baked_caches, check_layer, layer_dirs
from lifecycle.commands import verbs
from lifecycle.commands.audit import reading
from lifecycle.commands.context import Context
from lifecycle.errors import EXIT_NO, EXIT_OK, LifecycleError
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import cache_by_id
from lifecycle.ledger.builds import (
    IMAGE_MADE,
    BakeRecord,
    BuildRecord,
    all_bakes,
    all_builds,
    how_gone,
    image_removed_at,
)
from lifecycle.ledger.results import result_by_id
from lifecycle.report import Report
from lifecycle.table import lines_text


@dataclass(frozen=True)
class VerifyRunReport(Report):
    """Everything checked, and what differs."""

    FORMAT: ClassVar[str] = "lifecycle-verify/1"
    report: VerifyReport
    all_versions: bool = False
    # An image target (a build's, a bake's) not on dockerd: when a teardown (or apply)
    # removed it, as the ledger records; None when it is there, or went with no record.
    removed_at: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_NO if self.report.problems else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """Every check, and the problems on their own."""
        return {
            "format": self.FORMAT,
            "target": self.report.target,
            "kind": self.report.kind,
            "source": self.report.source,
            "all_versions": self.all_versions,
            "removed_at": self.removed_at,
            "ok": not self.report.problems,
            "problems": [f"{f.subject}: {f.problem}" for f in self.report.problems],
            "collected": [f"{f.subject}: {f.note}" for f in self.report.marked("collected")],
            "history": [f.subject for f in self.report.marked("history")],
            "checked": [
                {
                    "subject": f.subject,
                    "status": "differs" if f.problem and f.status != UNREAD else f.status,
                    "problem": f.problem,
                    "note": f.note,
                }
                for f in self.report.findings
            ],
        }

    def text(self) -> str:
        """What differs first, each naming the file or object; then what was found as recorded,
        what a gc collected, and what is history."""
        report = self.report
        unread = [f for f in report.problems if f.status == UNREAD]
        differ = [f for f in report.problems if f.status != UNREAD]
        verdicts = [f"{len(differ)} difference{'s' * (len(differ) != 1)}"] if differ else []
        verdicts += [f"{len(unread)} not read"] if unread else []
        verdict = "; ".join(verdicts) or "as recorded"
        collected, history = report.marked("collected"), report.marked("history")
        if collected:
            verdict += f"; {len(collected)} collected by gc"
        if history:
            verdict += f"; {len(history)} in history, not checked"
        lines = [f"verify {report.kind} {report.target} (from {report.source}): {verdict}"]
        lines += [f"  DIFFERS {f.subject}: {f.problem}" for f in differ]
        lines += [f"  UNREAD  {f.subject}: {f.problem}" for f in unread]
        lines += [
            f"  ok      {f.subject}" + (f": {f.note}" if f.note else "")
            for f in report.marked("ok")
        ]
        lines += [f"  {f.status} {f.subject}: {f.note}" for f in collected + history]
        return lines_text(lines)


def run(ctx: Context, request: verbs.Verify) -> VerifyRunReport:
    """Verify a cache, one version of it, a result, a baked image or a build's image from the
    ledger, or (with --from) from the archive alone; --all-versions: every version, not only
    those needed now."""
    target, source, every = request.target, request.source, request.every
    with reading(ctx, source) as read:
        bake = _bake_named(read.ledger, target) if read.ledger is not None else None
        if bake is not None:
            return _verify_bake(ctx.docker(), read.client, bake, target)
        build = _build_named(read.ledger, target) if read.ledger is not None else None
        if read.ledger is not None and build is not None:
            return _verify_build(ctx.docker(), read.ledger, build, target)
        found = verify(
            target, ledger=read.ledger, client=read.client, source=read.archive, every=every
        )
    return VerifyRunReport(found, every)


def _names(target: str, tag: str, image_id: str) -> bool:
    """Whether `target` names an image: its tag, or its id (with or without `sha256:`, or 12+
    digits of it)."""
    digits = target.removeprefix("sha256:")
    return target == tag or (len(digits) >= 12 and image_id[7:].startswith(digits))


def _bake_named(ledger: Ledger, target: str) -> BakeRecord | None:
    """The bake `target` names (every bake again moves its tag: the newest under it); None
    when it names none."""
    return next((b for b in reversed(all_bakes(ledger)) if _names(target, b.tag, b.image_id)), None)


def _build_named(ledger: Ledger, target: str) -> BuildRecord | None:
    """The newest build whose image `target` names; None when it names none."""
    builds = (b for b in reversed(all_builds(ledger)) if b.image_id and b.outcome in IMAGE_MADE)
    return next((b for b in builds if _names(target, b.tag, b.image_id or "")), None)


def _not_on_dockerd(
    target: str, kind: str, image_id: str, removed_at: str | None
) -> VerifyRunReport:
    """One line for an image no longer on dockerd, saying how it went as the ledger knows."""
    missing = Finding(image_id, f"is not on this Docker engine ({how_gone(removed_at)})")
    return VerifyRunReport(VerifyReport(target, kind, "dockerd", (missing,)), removed_at=removed_at)


def _verify_build(docker: Any, ledger: Ledger, build: BuildRecord, target: str) -> VerifyRunReport:
    """Whether a build's image is still on dockerd, and if not, how it went."""
    from docker.errors import ImageNotFound  # the SDK is loaded: docker is its client

    image_id = build.image_id or ""
    try:
        docker.images.get(image_id)  # by id: its content, labels and all, is what was built
    except ImageNotFound:
        return _not_on_dockerd(target, "engine image", image_id, image_removed_at(ledger, image_id))
    here = Finding(image_id, None, f"on this Docker engine, built {build.started_at}")
    return VerifyRunReport(VerifyReport(target, "engine image", "dockerd", (here,)))


def _verify_bake(docker: Any, s3: Any, bake: BakeRecord, target: str) -> VerifyRunReport:
    """Each cache layer of a baked image hashed again against the tree its label names, and
    each cache's version record and every object it names checked in the archive."""
    from docker.errors import ImageNotFound  # the SDK is loaded: docker is its client

    findings = []
    try:
        attrs = docker.images.get(bake.image_id).attrs
        caches, layers = baked_caches(attrs["Config"]["Labels"] or {}), layer_dirs(attrs)
    except ImageNotFound:
        return _not_on_dockerd(target, "baked image", bake.image_id, bake.removed_at)
    except BakedUnreadable as exc:
        unreadable = Finding(bake.image_id, str(exc))
        return VerifyRunReport(VerifyReport(target, "baked image", "dockerd", (unreadable,)))
    for cache in caches:
        subject = f"layer of baked cache {cache.name} at {cache.path}"
        try:
            _, tree = check_layer(layers, cache)
            findings.append(Finding(subject, None, f"holds tree {tree.tree_digest}"))
        except BakedUnreadable as exc:
            findings.append(Finding(subject, str(exc)))
        store = BlobStore(s3, ArchiveLocation.parse(cache.record["location"]))
        found = inspect_record(store, store.relative(cache.record["key"]), cache.record["sha256"])
        problems = "; ".join(found.lines()) or None
        findings.append(Finding(store.url(cache.record["key"]), problems, "its version record"))
    report = VerifyReport(target, "baked image", "dockerd and the archive", tuple(findings))
    return VerifyRunReport(report)


def verify(
    target: str,
    *,
    ledger: Ledger | None,
    client: Any,
    source: ArchiveLocation | None,
    every: bool = False,
) -> VerifyReport:
    """Verify a cache, one version of it, or a result from the ledger, or (with `source`)
    from the archive alone."""
    checker = BlobChecker()
    if source is not None:
        return verify_archived(BlobStore(client, source), target, checker, every=every)
    assert ledger is not None, "verify reads the ledger or the archive"

    def store_for(url: str) -> BlobStore:
        return BlobStore(client, ArchiveLocation.parse(url))

    cache_id, at, tree = target.partition("@")
    cache = cache_by_id(ledger, cache_id)
    if cache is not None:
        full = tree_in_ledger(ledger, cache, tree) if at else None
        findings = verify_cache(ledger, cache, store_for, checker, tree=full, every=every)
        return VerifyReport(target, "cache", "ledger", tuple(findings))
    result = result_by_id(ledger, target)
    if result is not None:
        findings = verify_result(ledger, result, store_for, checker, every=every)
        return VerifyReport(target, "result", "ledger", tuple(findings))
    what = "cache" if at else "cache or result"
    raise LifecycleError(
        f"no {what} {cache_id!r} in {ledger}"
        " (archived elsewhere? add --from s3://BUCKET/PREFIX to verify its archive alone)"
    )
