"""The end of a port: outcomes, the new manifest and series, the report, the branch commit.

The range-diff shows the old series against the new. A patch that came out empty (EMPTIED, or
resolved to no change) is an empty commit in the replay; given to range-diff as it is, it
shows as a new commit of the new series beside the old one shown as gone. So the new series is
given without its empty commits: when there are any, the commits after the first are re-made
(`commit-tree`, same trees and messages, the scratch repository's fixed identity) on a chain
without them. Every patch shown as gone (`<`) then gets its outcome after its name, e.g.
`(DROPPED_UPSTREAM)`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from lifecycle.errors import LifecycleError
from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.port import branch as port_branch
from lifecycle.port import manifest_out, upstream
from lifecycle.port.classify import Replayed, classify
from lifecycle.port.git import Git
from lifecycle.port.outcome import PatchResult, PortReport, PortStatus
from lifecycle.port.plan import PortPlan
from lifecycle.redact import without_userinfo

REPORT_FILE = "port-report.json"
RANGE_DIFF_FILE = "port-range-diff.txt"
EMPTY_SERIES = "(the new series is empty: every patch left it, for the reasons above)\n"
_GONE = re.compile(r"^(\s*\d+:\s+[0-9a-f]+ < -:\s+-+ )(.+)$", re.MULTILINE)


def finish(
    plan: PortPlan,
    git: Git,
    replayed: Replayed,
    base: str | None,
    scratch_done: Callable[[], object] = lambda: None,
) -> PortReport:
    """Classify, write the new manifest, series, report and range-diff; commit them on the port
    branch on top of `base` (unless a dry run). `scratch_done` is called once the scratch
    repository is no longer read, so it can be removed while the branch is written."""
    # Three independent readers of the scratch repository: they overlap their git processes.
    with ThreadPoolExecutor(max_workers=2) as pool:
        flashinfer = pool.submit(_flashinfer, plan, git)
        range_diff = pool.submit(_range_diff, plan, git, replayed)
        results, kept = classify(git, plan, replayed)
        fi, diff = flashinfer.result(), range_diff.result()
    missing = [r.file for r in results if r.outcome.needs_person]
    if missing:
        # Only when someone skipped or aborted the cherry-pick by hand in the worktree.
        raise LifecycleError(
            f"the worktree no longer holds {', '.join(missing)} (was the cherry-pick skipped "
            "or aborted by hand?): `lifecycle port --abort` and start again"
        )
    scratch_done()
    values = manifest_out.new_values(plan, fi)
    series = [plan.loaded.manifest.patches[r.index] for r in results if r.outcome.kept]
    data = manifest_out.manifest_data(
        plan.loaded, plan.new_dir, values.engine, series, values.tuned
    )
    header = _header(plan, values)
    files = {"manifest.yaml": manifest_out.render(data, header).encode()}
    for result in results:
        if result.outcome.kept:
            files[plan.patches[result.index].file] = kept[result.index]
    report = _report(
        plan, results, values, PortStatus.COMPLETE, digest=_validated_digest(plan, files, base)
    )
    files[REPORT_FILE] = (json.dumps(report.record(), indent=2) + "\n").encode()
    outcomes = {r.file: r.outcome.value for r in results}
    files[RANGE_DIFF_FILE] = (_reasons(plan, results) + _annotate(diff, outcomes)).encode()
    if plan.request.flags.dry_run or plan.repo is None:
        return replace(report, files=tuple(sorted(files)))
    directory = plan.new_dir.relative_to(plan.repo.root.resolve()).as_posix()
    in_repo = {f"{directory}/{name}": content for name, content in sorted(files.items())}
    message = _message(plan, results)
    commit = port_branch.commit_files(plan.repo, plan.branch, base, directory, in_repo, message)
    return replace(report, commit=commit, files=tuple(in_repo))


def stopped(plan: PortPlan, git: Git, replayed: Replayed) -> PortReport:
    """The report of a port stopped on conflicts: every patch's outcome so far, and the pins
    and tuned values the finished port would write."""
    results, _ = classify(git, plan, replayed)
    values = manifest_out.new_values(plan, _flashinfer(plan, git))
    return _report(plan, results, values, PortStatus.CONFLICTS_PENDING)


def _report(
    plan: PortPlan,
    results: list[PatchResult],
    values: manifest_out.NewValues,
    status: PortStatus,
    *,
    digest: str | None = None,
) -> PortReport:
    """The report of a port as far as it got."""
    return PortReport(
        old_ref=plan.old_label,
        new_ref=plan.new_label,
        old=plan.old,
        new=plan.new,
        upstream=without_userinfo(plan.loaded.manifest.upstream.repository),  # it is committed
        subdir=plan.subdir,
        results=tuple(results),
        pins=values.pins,
        tuned=values.fates,
        status=status,
        old_digest=plan.digest,
        uncommitted=plan.uncommitted,
        dry_run=plan.request.flags.dry_run,
        branch=plan.branch,
        digest=digest,
        warnings=_warnings(plan, results, values.pins),
    )


def _flashinfer(plan: PortPlan, git: Git) -> upstream.PinChange:
    engine = plan.loaded.manifest.engine
    return upstream.flashinfer_pin(git, plan.new, engine.flashinfer_dist, engine.flashinfer)


def _validated_digest(plan: PortPlan, files: dict[str, bytes], base: str | None) -> str:
    """Load the new manifest the way every verb will, from a copy laid out like manifests/,
    with the root it extends as the branch holds it (HEAD's, when only the working tree's
    copy was changed and ported with --allow-dirty)."""
    root = plan.loaded.chain[-1].resolve()
    common = Path(os.path.commonpath([root.parent, plan.new_dir]))
    with tempfile.TemporaryDirectory(prefix="lifecycle-port-check-") as temp:
        copy_root = Path(temp) / root.relative_to(common)
        copy_root.parent.mkdir(parents=True, exist_ok=True)
        copy_root.write_bytes(_as_on_branch(plan, root, base))
        new_dir = Path(temp) / plan.new_dir.relative_to(common)
        for name, content in files.items():
            (new_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (new_dir / name).write_bytes(content)
        return manifest_digest(load_manifest(new_dir / "manifest.yaml"))


def _as_on_branch(plan: PortPlan, file: Path, base: str | None) -> bytes:
    name = port_branch.in_repository(plan.repo, file) if plan.repo else None
    if plan.repo is None or base is None or name not in plan.uncommitted:
        return file.read_bytes()  # outside the repository, or the same bytes as HEAD's
    done = Git.user(plan.repo.root).run("cat-file", "blob", f"{base}:{name}", check=False)
    return done.out.encode("utf-8", "surrogateescape") if done.rc == 0 else file.read_bytes()


def _range_diff(plan: PortPlan, git: Git, replayed: Replayed) -> str:
    """`git range-diff` of the two series, the new one without its empty commits."""
    if not replayed.old:
        return ""
    tip = _without_empty(git, plan.new.commit, "HEAD") if replayed.new else plan.new.commit
    if tip == plan.new.commit:
        return EMPTY_SERIES
    old_range = f"{plan.old.commit}..{replayed.old[len(replayed.old) - 1]}"
    return git.out("range-diff", "--no-color", old_range, f"{plan.new.commit}..{tip}")


def _without_empty(git: Git, base: str, tip: str) -> str:
    """The tip of a chain on `base` holding `base..tip`'s non-empty commits, in order."""
    # One listing, `base` included as the boundary (`-`) for the tree the first commit follows.
    listed = git.out("log", "--boundary", "--reverse", "--format=%m %H %T", f"{base}..{tip}")
    rows = [line.split() for line in listed.splitlines()]
    previous = next((tree for mark, _, tree in rows if mark == "-"), None)
    if previous is None:
        return tip  # nothing between them
    parent, remade = base, False
    for _, commit, tree in (row for row in rows if row[0] != "-"):
        if tree == previous:
            remade = True  # empty: every commit after it needs a new parent
            continue
        if remade:
            message = git.out("log", "-1", "--format=%B", commit)
            parent = git.out("commit-tree", tree, "-p", parent, input=message).strip()
        else:
            parent = commit
        previous = tree
    return parent


def _annotate(text: str, outcomes: dict[str, str]) -> str:
    """Each patch shown as gone gets its outcome after its name (the commit's subject)."""

    def named(match: re.Match[str]) -> str:
        outcome = outcomes.get(match.group(2))
        return f"{match.group(0)} ({outcome})" if outcome else match.group(0)

    return _GONE.sub(named, text)


def _reasons(plan: PortPlan, results: list[PatchResult]) -> str:
    lines = [
        f"# lifecycle port {plan.old_label} -> {plan.new_label} "
        f"({plan.old.tag} {plan.old.commit[:12]} -> {plan.new.tag} {plan.new.commit[:12]})",
        "# old series (left) against new series (right), paths as in the upstream repository",
    ]
    for result in results:
        why = result.detail()
        lines.append(f"# {result.file}: {result.outcome.value}{f' ({why})' if why else ''}")
        if result.drop:
            lines.append(f"#   Applied-Upstream: {result.drop.commit} ({result.drop.method.value})")
        if result.conflict and result.conflict.hint:
            lines.append(f"#   hint: {result.conflict.hint}")
        if result.note:
            lines.append(f"#   note: {result.note}")
    return "\n".join(lines) + "\n\n"


def _header(plan: PortPlan, values: manifest_out.NewValues) -> list[str]:
    _, fi, image = values.pins
    header = [
        f"Ported from {plan.old_label} by `lifecycle port` ({plan.old.tag} -> {plan.new.tag});"
        f" see {REPORT_FILE}.",
        f"flashinfer {fi.new}: {fi.source}.",
    ]
    if image.flagged:
        header.append(f"base_image: {image.source}.")
    carried = [name for name, fate in values.fates.items() if fate.status == "carried"]
    if carried:
        header.append(
            f"Tuned values carried ({', '.join(carried)}) are NOT re-validated on "
            f"{plan.new.version}."
        )
    if len(carried) < len(values.fates):
        header.append(f"Tuned values {plan.new_label} had validated are kept as they were.")
    return header


def _warnings(
    plan: PortPlan, results: list[PatchResult], changes: tuple[upstream.PinChange, ...]
) -> tuple[str, ...]:
    found = [w for w in (plan.mirror.warning, plan.dirty_warning, plan.existing_warning) if w]
    found += plan.moved
    found += [f"{c.name} {c.new}: {c.source}" for c in changes if c.flagged]
    found += [f"{r.file}: {r.note}" for r in results if r.note and r.outcome.kept]
    return tuple(found)


def _message(plan: PortPlan, results: list[PatchResult]) -> str:
    old_file = port_branch.in_repository(plan.repo, plan.loaded.file) if plan.repo else None
    lines = [
        f"Port {plan.loaded.manifest.name} {plan.old_label} -> {plan.new_label} "
        f"({plan.old.tag} -> {plan.new.tag})",
        "",
        *(f"{r.file}: {r.outcome.value} {r.detail()}".rstrip() for r in results),
        "",
        f"Old manifest: {old_file or plan.loaded.file.resolve()} sha256:{plan.digest}",
        *(
            [f"Ported from the working tree (--allow-dirty): {', '.join(plan.uncommitted)}."]
            if plan.uncommitted
            else []
        ),
        f"Written by `lifecycle port`; see {REPORT_FILE} and {RANGE_DIFF_FILE}.",
    ]
    # Trailers, so `git log --format=%(trailers:key=Applied-Upstream)` finds why patches went.
    applied = [
        f"Applied-Upstream: {r.drop.commit} ({r.file}, {r.drop.method.value})"
        for r in results
        if r.drop
    ]
    return "\n".join(lines + (["", *applied] if applied else [])) + "\n"
