"""Stopping, resolving, --continue, --abort, --keep-going, --dry-run and usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.faults import CRASH_ENV, DELAY_ENV
from lifecycle.home import Home
from lifecycle.port import state
from tests.port_support import (
    GIT_ENV,
    PatchSpec,
    PortRun,
    Project,
    Upstream,
    change_mix,
    git,
    snapshot,
)


def _edit_other(old: str, new: str) -> Callable[[Upstream], None]:
    def change(u: Upstream) -> None:
        u.edit("pkg/other.py", lambda t: t.replace(f"{old}\n", f"{new}\n"))

    return change


def _conflicting_release(up: Upstream, project: Project, *, second: bool = False) -> None:
    """1.0 carries mix.patch (31 → 37), and optionally tail.patch (clean); v2.0.0 sets 41."""
    patches = [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))]
    if second:
        tail = up.patch("v1.0.0", _edit_other("OTHER_9 = 9", "OTHER_9 = 99"))
        patches.append(PatchSpec("tail.patch", tail))
    project.manifest("1.0", patches)
    change_mix("41")(up)
    up.commit("Upstream's own mix")
    up.tag("2.0.0")


def _home_state(home: Path) -> dict[str, bytes]:
    # The mirror is a cache of upstream (like git's object store): a port may fill it. A port's
    # lock file stays, like a cache's lease: unlinking one a port may be opening splits the lock.
    return {k: v for k, v in snapshot(home).items() if not k.startswith(("mirrors/", "locks/"))}


def test_conflict_stops_then_continue_finishes_with_the_resolution(
    up: Upstream, project: Project
) -> None:
    _conflicting_release(up, project, second=True)

    stopped = project.port("1.0", "2.0", "--json")

    assert stopped.exit_code == 1
    assert stopped.outcomes() == {"patches/mix.patch": "CONFLICT", "patches/tail.patch": "PENDING"}
    text = project.port("1.0", "2.0", "--dry-run").stdout
    assert "conflicts pending: patches/mix.patch\nnot tried yet: patches/tail.patch\n" in text
    worktree = Path(stopped.report["worktree"])
    conflicted = (worktree / "pkg/serve.py").read_text()
    assert "<<<<<<<" in conflicted and "MIX = 41" in conflicted and "MIX = 37" in conflicted
    assert git(project.path, "branch", "--list", "port/*") == ""  # nothing committed yet

    # Still conflicted: --continue refuses and keeps the state.
    refused = project.port("--continue", "--json")
    assert refused.exit_code == 1
    assert "conflict markers are still in the worktree" in refused.stderr

    markers = ("<<<<<<<", "=======", ">>>>>>>", "|||||||", "MIX = ")
    lines = [line for line in conflicted.splitlines(keepends=True) if not line.startswith(markers)]
    lines.insert(19, "MIX = 43  # ours, on top of upstream's 41\n")
    (worktree / "pkg/serve.py").write_text("".join(lines))

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/tail.patch": "CLEAN"}
    resolved = done.report["patches"][0]
    assert resolved["conflict"]["files"] == [{"path": "serve.py", "kind": "content"}]
    exported = project.shown("port/2.0", "manifests/2.0/patches/mix.patch").decode()
    assert "-MIX = 41\n" in exported and "+MIX = 43  # ours, on top of upstream's 41\n" in exported
    assert not worktree.exists()
    assert project.port("--continue").exit_code == 2  # nothing in progress any more


def test_resolving_to_upstreams_side_drops_the_patch(up: Upstream, project: Project) -> None:
    _conflicting_release(up, project)
    stopped = project.port("1.0", "2.0", "--json")
    worktree = Path(stopped.report["worktree"])
    git(worktree, "checkout", "HEAD", "--", "pkg/serve.py")  # keep upstream's side

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    (result,) = done.report["patches"]
    assert result["outcome"] == "EMPTIED"
    assert result["note"] == "resolved to no change"
    assert b"patches: []" in project.shown("port/2.0", "manifests/2.0/manifest.yaml")


def test_continue_keeps_the_options_the_port_started_with(up: Upstream, project: Project) -> None:
    _conflicting_release(up, project)
    project.manifest("2.0", [], vllm="2.0.0")  # NEW exists and validated its value
    (project.manifests / "1.0/patches/mix.patch").write_bytes(
        up.patch("v1.0.0", change_mix("38"))  # and OLD differs from HEAD
    )
    stopped = project.port("1.0", "2.0", "--force", "--allow-dirty", "--json")
    assert stopped.exit_code == 1, stopped.stderr
    git(Path(stopped.report["worktree"]), "checkout", "--theirs", "--", "pkg/serve.py")

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.report["from"]["uncommitted"] == ["manifests/1.0/patches/mix.patch"]
    assert done.report["tuned"] == {
        "gpu_memory_utilization": {"status": "validated", "kept_from": "2.0"}
    }
    assert b"+MIX = 38" in project.shown("port/2.0", "manifests/2.0/patches/mix.patch")


def test_abort_restores_everything_byte_for_byte(
    up: Upstream, project: Project, isolated_home: Path
) -> None:
    _conflicting_release(up, project)
    home = isolated_home / "lifecycle"
    project_before, home_before = snapshot(project.path), _home_state(home)

    project.port("1.0", "2.0", "--json")
    aborted = project.port("--abort", "--json")

    assert aborted.exit_code == 0, aborted.stderr
    assert "aborted the port" in aborted.report["message"]
    assert aborted.report["kept"] is None  # nothing but what the port itself left
    assert snapshot(project.path) == project_before
    assert _home_state(home) == home_before
    assert not (home / "port").exists()
    assert project.port("--abort").exit_code == 2


def test_abort_keeps_a_resolution_begun_by_hand(
    up: Upstream, project: Project, isolated_home: Path
) -> None:
    """An hour of conflict resolution was gone with one `--abort` (as with git's): the edits
    made in the worktree since the stop, new files too, are kept as a patch in the home first,
    and take up again on the same stop with `git apply`."""
    _conflicting_release(up, project)
    home = isolated_home / "lifecycle"
    project_before = snapshot(project.path)
    stopped = project.port("1.0", "2.0", "--json")
    worktree = Path(stopped.report["worktree"])
    (worktree / "pkg/serve.py").write_text("half way through a resolution\n")
    (worktree / "pkg/notes.txt").write_bytes(b"which side wins \xff\n")  # new, not UTF-8

    tried = project.port("--abort", "--dry-run", "--json")
    assert tried.exit_code == 0, tried.stderr
    assert tried.report["message"].startswith("would abort the port 1.0 -> 2.0; would remove ")
    assert "2 files: pkg/notes.txt, pkg/serve.py) would be kept in " in tried.report["message"]
    assert worktree.is_dir() and not (home / "port-aborted").exists()  # nothing done
    assert project.port("--continue", "--dry-run").exit_code == 2  # --continue: no dry run

    aborted = project.port("--abort", "--json")

    assert aborted.exit_code == 0, aborted.stderr
    kept = Path(aborted.report["kept"])
    assert kept.parent == home / "port-aborted" and kept.name.startswith("1.0-to-2.0-")
    assert "2 files: pkg/notes.txt, pkg/serve.py" in aborted.report["message"]
    assert snapshot(project.path) == project_before
    assert not (home / "port").exists()

    again = Path(project.port("1.0", "2.0", "--json").report["worktree"])
    git(again, "checkout", "HEAD", "--", ".")  # as the message says: the stop's HEAD, then
    git(again, "apply", str(kept))
    assert (again / "pkg/serve.py").read_text() == "half way through a resolution\n"
    assert (again / "pkg/notes.txt").read_bytes() == b"which side wins \xff\n"
    assert f"`git checkout HEAD -- . && git apply {kept}`" in aborted.report["message"]


def test_keep_going_reports_every_conflict_and_what_they_block(
    up: Upstream, project: Project
) -> None:
    def mix_38(u: Upstream) -> None:
        u.edit("pkg/serve.py", lambda t: t.replace("MIX = 37\n", "MIX = 38\n"))

    mix, builds_on_mix = up.series("v1.0.0", [change_mix("37"), mix_38])
    other = up.patch("v1.0.0", _edit_other("OTHER_5 = 5", "OTHER_5 = 55"))
    clean = up.patch("v1.0.0", _edit_other("OTHER_25 = 25", "OTHER_25 = 250"))
    project.manifest(
        "1.0",
        [
            PatchSpec("mix.patch", mix),
            PatchSpec("mix-38.patch", builds_on_mix),
            PatchSpec("other.patch", other),
            PatchSpec("clean.patch", clean),
        ],
    )
    change_mix("41")(up)
    _edit_other("OTHER_5 = 5", "OTHER_5 = 56")(up)
    up.commit("Upstream changes both lines")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--keep-going", "--json")

    assert run.exit_code == 1
    assert run.outcomes() == {
        "patches/mix.patch": "CONFLICT",
        "patches/mix-38.patch": "BLOCKED_BY",
        "patches/other.patch": "CONFLICT",
        "patches/clean.patch": "CLEAN",
    }
    assert run.report["patches"][1]["blocked_by"] == "patches/mix.patch"
    # A survey says what the finished port would write for pins and tuned values too.
    assert [(p["name"], p["new"]) for p in run.report["pins"]] == [
        ("vllm", "2.0.0"),
        ("flashinfer", "1.0.0"),
        ("base_image", "toy/engine:v2.0.0"),
    ]
    assert run.report["tuned"] == {
        "gpu_memory_utilization": {"status": "carried", "carried_from": "1.0"}
    }
    # Left stopped at the first conflict, ready for --continue.
    worktree = Path(run.report["worktree"])
    assert "<<<<<<<" in (worktree / "pkg/serve.py").read_text()
    assert "<<<<<<<" not in (worktree / "pkg/other.py").read_text()


def test_blocked_by_needs_proof_not_just_a_shared_file(up: Upstream, project: Project) -> None:
    def value(number: int, new: str) -> Callable[[Upstream], None]:
        def change(u: Upstream) -> None:
            u.edit(
                "pkg/serve.py",
                lambda t: t.replace(f"_{number:02d} = {number}\n", f"_{number:02d} = {new}\n"),
            )

        return change

    def mix_38(u: Upstream) -> None:
        u.edit("pkg/serve.py", lambda t: t.replace("MIX = 37\n", "MIX = 38\n"))

    mix, builds_on_mix, own = up.series("v1.0.0", [change_mix("37"), mix_38, value(5, "55")])
    project.manifest(
        "1.0",
        [
            PatchSpec("mix.patch", mix),
            PatchSpec("mix-38.patch", builds_on_mix),
            PatchSpec("five.patch", own),  # the same file as mix.patch, lines of its own
        ],
    )
    change_mix("41")(up)
    value(5, "56")(up)
    up.commit("Upstream changes the mix and VALUE_05")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--keep-going", "--json")

    assert run.outcomes() == {
        "patches/mix.patch": "CONFLICT",
        "patches/mix-38.patch": "BLOCKED_BY",  # applies once mix.patch is forced in
        "patches/five.patch": "CONFLICT",  # conflicts with upstream's 56 whatever mix.patch does
    }
    assert run.report["patches"][1]["blocked_by"] == "patches/mix.patch"
    assert "blocked_by" not in run.report["patches"][2]


def test_blocked_by_a_patch_whose_file_upstream_deleted(up: Upstream, project: Project) -> None:
    first, second = up.series(
        "v1.0.0",
        [_edit_other("OTHER_5 = 5", "OTHER_5 = 55"), _edit_other("OTHER_5 = 55", "OTHER_5 = 555")],
    )
    project.manifest("1.0", [PatchSpec("first.patch", first), PatchSpec("second.patch", second)])
    git(up.path, "rm", "-q", "pkg/other.py")
    up.commit("Remove other.py")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--keep-going", "--json")

    assert run.outcomes() == {
        "patches/first.patch": "CONFLICT",
        "patches/second.patch": "BLOCKED_BY",
    }
    assert run.report["patches"][0]["conflict"]["kind"] == "modify/delete"


def test_dry_run_writes_nothing(up: Upstream, project: Project, isolated_home: Path) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.edit("pkg/other.py", lambda t: t + "OTHER_31 = 31\n")
    up.commit("Upstream work")
    up.tag("2.0.0")
    home = isolated_home / "lifecycle"
    project_before, home_before = snapshot(project.path), _home_state(home)

    run = project.port("1.0", "2.0", "--dry-run", "--json")

    assert run.exit_code == 0, run.stderr
    assert run.outcomes() == {"patches/mix.patch": "CLEAN"}
    assert run.report["dry_run"] is True and run.report["commit"] is None
    assert snapshot(project.path) == project_before
    assert _home_state(home) == home_before


def test_dry_run_of_a_conflict_keeps_no_state(up: Upstream, project: Project) -> None:
    _conflicting_release(up, project)

    run = project.port("1.0", "2.0", "--dry-run")

    assert run.exit_code == 1
    assert "CONFLICT" in run.stdout and "dry run: nothing was written" in run.stdout
    assert project.port("--abort").exit_code == 2  # no port in progress


def test_usage_errors_exit_2(up: Upstream, project: Project) -> None:
    _conflicting_release(up, project)

    assert project.port().exit_code == 2
    assert project.port("1.0").exit_code == 2
    assert project.port("--continue", "1.0").exit_code == 2
    missing = project.port("1.0", "9.9")
    assert missing.exit_code == 2
    assert "no upstream tag v9.9, v9.9.0" in missing.stderr and "--release" in missing.stderr
    assert "cannot go to" in project.port("1.0", "1.0").stderr
    assert project.port("1.0", "2.0").exit_code == 1  # stopped on the conflict
    in_progress = project.port("1.0", "2.0")
    assert in_progress.exit_code == 2
    assert "1.0 -> 2.0 is in progress" in in_progress.stderr


def test_branch_that_exists_is_refused(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [])
    up.tag("2.0.0")
    git(project.path, "branch", "port/2.0")

    run = project.port("1.0", "2.0")

    assert run.exit_code == 2
    assert "branch port/2.0 already exists" in run.stderr
    assert project.port("1.0", "2.0", "--branch", "port/2.0-again").exit_code == 0


def test_a_series_broken_on_its_own_release_names_the_patch(up: Upstream, project: Project) -> None:
    good = up.patch("v1.0.0", change_mix("37"))
    broken = good.replace(b" VALUE_19 = 19\n", b" VALUE_19 = 1900\n")
    project.manifest("1.0", [PatchSpec("good.patch", good), PatchSpec("broken.patch", broken)])
    up.tag("2.0.0")

    run = project.port("1.0", "2.0")

    assert run.exit_code == 2
    assert "patches/broken.patch does not apply (fuzz 0) to the old release" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_patch_with_repository_paths_is_refused_naming_the_package_dir_rule(
    up: Upstream, project: Project
) -> None:
    # Written from the repository's top (`git diff` without --relative): a/pkg/serve.py.
    change_mix("37")(up)
    repository_relative = subprocess.run(
        ["git", "diff", "--", "pkg/serve.py"], cwd=up.path, capture_output=True, check=True
    ).stdout
    git(up.path, "checkout", "-q", "--", "pkg/serve.py")
    assert repository_relative.startswith(b"diff --git a/pkg/serve.py b/pkg/serve.py\n")
    project.manifest("1.0", [PatchSpec("mix.patch", repository_relative)])
    up.tag("2.0.0")

    run = project.port("1.0", "2.0")

    assert run.exit_code == 2
    (line,) = run.stderr.splitlines()
    assert line.startswith("patches/mix.patch does not apply to the old release")
    assert "relative to engine.package_dir" in line and "a/serve.py, not a/pkg/serve.py" in line
    assert "--relative=pkg/" in line


def test_text_report_names_the_conflict_and_where_to_resolve_it(
    up: Upstream, project: Project
) -> None:
    _conflicting_release(up, project)

    run = project.port("1.0", "2.0")

    assert run.exit_code == 1
    lines = run.stdout.splitlines()
    assert lines[0].startswith("port 1.0 -> 2.0 (v1.0.0 ")
    assert lines[2].split() == ["PATCH", "OUTCOME", "EVIDENCE"]
    assert lines[3].split()[:4] == ["patches/mix.patch", "CONFLICT", "content:", "serve.py"]
    assert "hint: upstream changed these files in" in run.stdout
    assert "resolve patches/mix.patch in " in run.stdout and ": pkg/serve.py (edit" in run.stdout
    assert "conflicts pending: patches/mix.patch\n" in run.stdout
    aborted = project.port("--abort", "--json")
    assert aborted.report["aborted"] is True


def test_abort_clears_the_leftovers_of_a_killed_port(
    up: Upstream, project: Project, isolated_home: Path
) -> None:
    _conflicting_release(up, project)
    leftovers = isolated_home / "lifecycle" / "port"
    stopped = project.port("1.0", "2.0", "--json")
    (Path(stopped.report["worktree"]).parent / "state.json").unlink()  # as if killed -9

    refused = project.port("1.0", "2.0")
    assert refused.exit_code == 2 and "an unfinished port is in progress" in refused.stderr
    cleared = project.port("--abort")

    assert cleared.exit_code == 0 and "leftovers of an interrupted port" in cleared.stdout
    assert not leftovers.exists()
    assert project.port("1.0", "2.0").exit_code == 1  # a new port can start


def _two_conflicts(up: Upstream, project: Project) -> None:
    """1.0 carries mix.patch (MIX 31 → 37) and other.patch (OTHER_5 5 → 55); v2.0.0 changes
    both lines too, so each patch stops the port in turn."""
    mix = up.patch("v1.0.0", change_mix("37"))
    other = up.patch("v1.0.0", _edit_other("OTHER_5 = 5", "OTHER_5 = 55"))
    project.manifest("1.0", [PatchSpec("mix.patch", mix), PatchSpec("other.patch", other)])
    change_mix("41")(up)
    _edit_other("OTHER_5 = 5", "OTHER_5 = 56")(up)
    up.commit("Upstream changes both lines")
    up.tag("2.0.0")


def test_continue_stops_again_at_the_next_conflict(up: Upstream, project: Project) -> None:
    _two_conflicts(up, project)

    first = project.port("1.0", "2.0", "--json")
    worktree = Path(first.report["worktree"])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")  # the patch's side: MIX = 37
    second = project.port("--continue", "--json")

    assert second.exit_code == 1
    assert second.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/other.patch": "CONFLICT"}
    git(worktree, "checkout", "--theirs", "--", "pkg/other.py")
    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/other.patch": "RESOLVED"}
    exported = project.shown("port/2.0", "manifests/2.0/patches/other.patch").decode()
    assert "-OTHER_5 = 56\n+OTHER_5 = 55\n" in exported


def test_a_cherry_pick_aborted_by_hand_is_refused_not_half_committed(
    up: Upstream, project: Project
) -> None:
    _conflicting_release(up, project, second=True)
    stopped = project.port("1.0", "2.0", "--json")
    git(Path(stopped.report["worktree"]), "cherry-pick", "--abort")

    run = project.port("--continue")

    assert run.exit_code == 2
    assert "no longer holds patches/mix.patch, patches/tail.patch" in run.stderr
    assert git(project.path, "branch", "--list", "port/*") == ""
    assert project.port("--abort").exit_code == 0


def _lifecycle_in(directory: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> PortRun:
    """`lifecycle ARGS` run from `directory`, with no --manifests: found from there, if at all."""
    monkeypatch.chdir(directory)
    result = CliRunner().invoke(cli, list(args))
    return PortRun(result.exit_code, result.stdout, result.stderr)


def test_continue_works_from_the_worktree_it_printed(
    up: Upstream, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    _conflicting_release(up, project)
    stopped = project.port("1.0", "2.0")
    worktree = Path(stopped.stdout.split("resolve patches/mix.patch in ", 1)[1].split(":", 1)[0])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")

    done = _lifecycle_in(worktree / "pkg", monkeypatch, "port", "--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.outcomes() == {"patches/mix.patch": "RESOLVED"}
    assert b"+MIX = 37" in project.shown("port/2.0", "manifests/2.0/patches/mix.patch")


def test_abort_works_from_a_directory_with_no_manifests_above(
    up: Upstream, project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _conflicting_release(up, project)
    assert project.port("1.0", "2.0").exit_code == 1
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    aborted = _lifecycle_in(elsewhere, monkeypatch, "port", "--abort")

    assert aborted.exit_code == 0, aborted.stderr
    assert "aborted the port 1.0 -> 2.0" in aborted.stdout
    nothing = _lifecycle_in(elsewhere, monkeypatch, "port", "--continue")
    assert nothing.exit_code == 2
    assert nothing.stderr.startswith("no port in progress") and "Traceback" not in nothing.stderr


def test_continue_from_elsewhere_with_two_ports_in_progress_names_them(
    up: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Project(tmp_path / "first", up), Project(tmp_path / "second", up)
    _conflicting_release(up, first)
    second.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    assert (first.port("1.0", "2.0").exit_code, second.port("1.0", "2.0").exit_code) == (1, 1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    ambiguous = _lifecycle_in(elsewhere, monkeypatch, "port", "--continue")

    assert ambiguous.exit_code == 2
    assert len(ambiguous.stderr.splitlines()) == 1
    assert str(first.path) in ambiguous.stderr and str(second.path) in ambiguous.stderr
    # From inside a repository, that repository's port is the one meant.
    aborted = _lifecycle_in(second.path, monkeypatch, "port", "--abort")
    assert aborted.exit_code == 0, aborted.stderr
    assert _lifecycle_in(first.manifests, monkeypatch, "port", "--abort").exit_code == 0


def _process(project: Project, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`lifecycle port ARGS` as its own process: a SIGKILL must hit it, not pytest."""
    return subprocess.Popen(
        [sys.executable, "-m", "lifecycle", "--manifests", str(project.manifests), "port", *args],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finished_at_the_next_conflict(project: Project, worktree: Path) -> None:
    """The port is stopped at other.patch, mix.patch resolved: it says so, and finishes once
    other.patch is resolved too, with no conflict marker committed."""
    again = project.port("--continue", "--json")
    assert again.exit_code == 1, again.stderr
    assert again.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/other.patch": "CONFLICT"}
    assert git(project.path, "branch", "--list", "port/*") == ""
    refused = project.port("--continue")
    assert refused.exit_code == 1 and "pkg/other.py:5: <<<<<<< HEAD" in refused.stderr
    git(worktree, "checkout", "--theirs", "--", "pkg/other.py")

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/other.patch": "RESOLVED"}
    exported = project.shown("port/2.0", "manifests/2.0/patches/other.patch").decode()
    assert "-OTHER_5 = 56\n+OTHER_5 = 55\n" in exported and "<<<<<<<" not in exported


def test_continue_after_a_cherry_pick_continued_by_hand_stops_where_git_did(
    up: Upstream, project: Project
) -> None:
    _two_conflicts(up, project)
    worktree = Path(project.port("1.0", "2.0", "--json").report["worktree"])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")
    _cherry_pick_continued_by_hand(worktree)

    _finished_at_the_next_conflict(project, worktree)


def _cherry_pick_continued_by_hand(worktree: Path) -> None:
    """What a git user does next: git concludes mix.patch and stops at the next conflict."""
    git(worktree, "add", "--all")
    by_hand = subprocess.run(
        ["git", "cherry-pick", "--continue"],
        cwd=worktree,
        env={**os.environ, **GIT_ENV, "GIT_EDITOR": "true"},
        capture_output=True,
        check=False,
    )
    assert by_hand.returncode == 1 and b"CONFLICT" in by_hand.stdout


def _write_data(content: bytes) -> Callable[[Upstream], None]:
    def change(u: Upstream) -> None:
        u.write("pkg/data.bin", content)

    return change


def _delete_other(u: Upstream) -> None:
    git(u.path, "rm", "-q", "pkg/other.py")


@pytest.mark.parametrize(
    ("kind", "ours", "upstreams"),
    [
        ("binary", _write_data(b"\0ours" * 64), _write_data(b"\0upstream's" * 64)),
        ("modify/delete", _edit_other("OTHER_5 = 5", "OTHER_5 = 55"), _delete_other),
    ],
)
def test_a_conflict_with_no_markers_that_git_went_on_to_is_the_ports_stop(
    up: Upstream,
    project: Project,
    kind: str,
    ours: Callable[[Upstream], None],
    upstreams: Callable[[Upstream], None],
) -> None:
    mix, second = up.patch("v1.0.0", change_mix("37")), up.patch("v1.0.0", ours)
    project.manifest("1.0", [PatchSpec("mix.patch", mix), PatchSpec("second.patch", second)])
    change_mix("41")(up)
    upstreams(up)
    up.commit("Upstream changes the mix and the second patch's file")
    up.tag("2.0.0")
    worktree = Path(project.port("1.0", "2.0", "--json").report["worktree"])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")
    _cherry_pick_continued_by_hand(worktree)  # stops at second.patch, leaving no marker

    again = project.port("--continue", "--json")

    # Reported, not committed with git's default side as if a person had resolved it.
    assert again.exit_code == 1, again.stderr
    assert again.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/second.patch": "CONFLICT"}
    assert again.report["patches"][1]["conflict"]["kind"] == kind
    assert git(project.path, "branch", "--list", "port/*") == ""
    git(
        worktree,
        "checkout",
        "--theirs",
        "--",
        f"pkg/{'data.bin' if kind == 'binary' else 'other.py'}",
    )

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.outcomes() == {"patches/mix.patch": "RESOLVED", "patches/second.patch": "RESOLVED"}
    assert done.report["patches"][1]["conflict"]["kind"] == kind


def test_a_continue_killed_after_git_went_on_is_completed_by_the_next(
    up: Upstream, project: Project
) -> None:
    _two_conflicts(up, project)
    worktree = Path(project.port("1.0", "2.0", "--json").report["worktree"])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")
    # Killed once git concluded mix.patch and stopped at other.patch, before that was saved.
    killed = _process(project, "--continue", env={CRASH_ENV: "port-continued"})
    _, err = killed.communicate(timeout=120)
    assert killed.returncode == -9, err

    _finished_at_the_next_conflict(project, worktree)


def test_continue_refuses_markers_in_any_file_it_would_commit(
    up: Upstream, project: Project
) -> None:
    _conflicting_release(up, project, second=True)
    worktree = Path(project.port("1.0", "2.0", "--json").report["worktree"])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")  # the stop's file: resolved
    (worktree / "pkg/other.py").write_text("<<<<<<< pasted from elsewhere\nOTHER_1 = 1\n")
    (worktree / "pkg/new.py").write_text("X = 1\n>>>>>>> theirs\n")

    refused = project.port("--continue")

    assert refused.exit_code == 1
    assert "conflict markers are still in the worktree" in refused.stderr
    assert "pkg/other.py:1: <<<<<<< pasted" in refused.stderr
    assert "pkg/new.py:2: >>>>>>> theirs" in refused.stderr
    assert git(project.path, "branch", "--list", "port/*") == ""


def test_abort_refuses_a_running_port_and_clears_a_killed_one(
    up: Upstream, project: Project, isolated_home: Path
) -> None:
    _conflicting_release(up, project)
    directory = state.state_dir(Home(isolated_home / "lifecycle"), project.path)
    running = _process(project, "1.0", "2.0", env={DELAY_ENV: "port-claimed=120"})
    try:
        deadline = time.monotonic() + 60
        while not directory.is_dir():  # made by the port, which then waits at port-claimed
            assert running.poll() is None, running.communicate()
            assert time.monotonic() < deadline, "the port made no state dir within 60 s"
            time.sleep(0.05)

        aborted = project.port("--abort")
        second = project.port("1.0", "2.1", "--release", "2.0.0")
        resumed = project.port("--continue")
    finally:
        running.kill()  # as a crash would: its lock goes with it, its state dir stays
        running.wait()

    assert aborted.exit_code == 1 and len(aborted.stderr.splitlines()) == 1
    assert f"the port 1.0 -> 2.0 (pid {running.pid}) is running in {directory}" in aborted.stderr
    assert directory.is_dir()
    assert second.exit_code == 1 and "is running" in second.stderr
    assert "--abort" not in second.stderr
    assert resumed.exit_code == 1 and "is running" in resumed.stderr
    cleared = project.port("--abort")
    assert cleared.exit_code == 0 and "leftovers of an interrupted port" in cleared.stdout
    assert not directory.exists()
    assert project.port("1.0", "2.0").exit_code == 1  # a new port starts (and stops)


def test_continue_stays_on_the_release_commit_it_replayed_on(
    up: Upstream, project: Project
) -> None:
    _conflicting_release(up, project)
    stopped = project.port("1.0", "2.0", "--json")
    replayed_on = stopped.report["to"]["commit"]
    # Upstream respins v2.0.0, and another port's fetch brings the moved tag into the mirror.
    up.edit("pkg/serve.py", lambda text: text.replace("VALUE_39 = 39\n", "VALUE_39 = 3900\n"))
    respin = up.commit("Respin")
    git(up.path, "tag", "-f", "-a", "v2.0.0", "-m", "release 2.0.0, again")
    assert project.port("1.0", "2.0", "--dry-run", "--json").report["to"]["commit"] == respin
    git(Path(stopped.report["worktree"]), "checkout", "--theirs", "--", "pkg/serve.py")

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    assert done.report["to"]["commit"] == replayed_on
    assert f"v2.0.0 moved since the port started (now at {respin[:12]})" in "".join(
        done.report["warnings"]
    )
    committed = json.loads(project.shown("port/2.0", "manifests/2.0/port-report.json"))
    assert committed["to"]["commit"] == replayed_on
