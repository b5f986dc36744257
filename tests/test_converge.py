"""`lifecycle plan` / `apply` on the demo engine, a real dockerd and the S3 server: the policy
in lifecycle.yaml decides, teardown's invariant removes, a saved plan is refused once the state
or the policy moved or once it would do more than it shows, a SIGKILLed apply converges when
run again, and after an apply the plan is empty."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle.commands import converge, verbs
from lifecycle.commands.context import Context
from lifecycle.errors import LifecycleError
from lifecycle.faults import APPLY_CRASH_POINTS, CRASH_ENV, CRASH_POINTS, DELAY_ENV
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.removal import unfinished_gc
from tests.night_support import finish, lifecycle, sigkill, wait_for
from tests.services import run_lifecycle
from tests.test_teardown import _boot, _caches, _cli, _gone, _process

# Keep each manifest+profile's newest cache; archive at once what is idle; remove the rest.
POLICY = """\
policy:
  caches:
    - match: "demo*"
      keep_last: 1
      keep_within: null
      archive_after: 0s
"""


def _policy(project: Path) -> None:
    (project / "lifecycle.yaml").write_text(POLICY)


def _plan(project: Path, *args: str) -> dict[str, object]:
    done = _cli(project, "plan", "--json", *args)
    assert done.exit_code == 0, done.output
    plan: dict[str, object] = json.loads(done.stdout)
    return plan


@pytest.mark.docker
@pytest.mark.s3
def test_plan_apply_converges_and_a_second_plan_is_empty(project: Path, tmp_path: Path) -> None:
    _policy(project)
    _, old = _boot(project)
    _, new = _boot(project)
    plan = _plan(project, "-o", str(tmp_path / "plan.json"))
    actions = {c["id"]: c["action"] for c in plan["caches"]["caches"]}  # type: ignore[index]
    assert {actions[i] for i in old} == {"archive, then remove"}, actions
    assert {actions[i] for i in new} == {"keep"}, actions
    assert sorted(plan["archive"]) == new  # type: ignore[arg-type]
    status = _status(project)
    assert status["caches"] == [
        {
            "manifest": "demo", "caches": 8, "bytes": status["caches"][0]["bytes"],
            "warm_ready": 8, "image_gone": 0,
        }
    ]  # fmt: skip
    assert status["policy"]["caches to archive"] == 4, status
    assert status["policy"]["caches to remove"] == 4, status
    assert status["production"] == "up" and status["night"] is None, status

    done = _cli(project, "apply", str(tmp_path / "plan.json"), "--yes", "--json")
    assert done.exit_code == 0, done.output
    caches = _caches()
    assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in old)
    assert all(caches[i].state == "archived" and not _gone(caches[i]) for i in new)
    assert _plan(project)["empty"] is True
    status = _status(project)
    assert status["caches"][0]["caches"] == 4 and not any(status["policy"].values()), status

    # Without dockerd, nothing it guards goes, and neither verb calls that "as the policy says".
    nowhere = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    blind = run_lifecycle(project, "plan", env=nowhere)
    assert blind.exit_code == 3, blind.output
    assert "incomplete: not asked: cannot reach the Docker engine" in blind.output
    assert "nothing to do" not in blind.output
    blind = run_lifecycle(project, "status", env=nowhere)
    assert "policy: incomplete: not asked: cannot reach the Docker" in blind.output
    # apply ended 0 here, its plan empty only because nothing was asked: a cron saw success.
    blind = run_lifecycle(project, "apply", "--yes", env=nowhere)
    assert blind.exit_code == 3, blind.output
    assert "nothing to do" not in blind.output
    # With --json the plan is on stdout; what was not asked is said on stderr all the same.
    for verb in (["plan"], ["apply", "--yes"]):
        blind = run_lifecycle(project, *verb, "--json", env=nowhere)
        assert blind.exit_code == 3 and json.loads(blind.stdout), blind.output
        assert "cannot reach the Docker engine" in blind.stderr, (verb, blind.stderr)


@pytest.mark.docker
@pytest.mark.s3
def test_content_true_archives_the_files_of_the_caches_apply_removes(project: Path) -> None:
    # The caches the policy removed were archived as evidence only, then deleted: under
    # `content: true` their files were lost, and restore had nothing to bring back.
    (project / "lifecycle.yaml").write_text(POLICY + "      content: true\n")
    _, old = _boot(project)
    _boot(project)
    trees = {i: c.tree_digest for i, c in _caches().items()}
    done = _process(project, "apply", "--yes")
    assert done.returncode == 0, done.stderr
    caches = _caches()
    assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in old)
    for cache_id in old:
        restored = run_lifecycle(project, "restore", cache_id, "--json")
        assert restored.exit_code == 0, restored.output
        assert json.loads(restored.stdout)["tree_digest"] == trees[cache_id]


@contextmanager
def _running_boot(project: Path) -> Iterator[tuple[str, list[str]]]:
    """A warm boot held running (its caches' leases taken, in the ledger as in use): its id
    and the caches it holds."""
    booting = lifecycle(project, "boot", "demo/0.2", "--json", env={DELAY_ENV: "boot-recorded=300"})
    try:
        wait_for(
            "the boot to hold its caches", lambda: any(c.in_use_by for c in _caches().values())
        )
        held = sorted(c.id for c in _caches().values() if c.in_use_by)
        boot_id = _caches()[held[0]].in_use_by
        assert boot_id is not None
        yield boot_id, held
    finally:
        sigkill(booting)


@pytest.mark.docker
@pytest.mark.s3
def test_apply_while_a_boot_runs_keeps_its_caches_and_carries_out_the_rest(
    project: Path,
) -> None:
    # The plan listed the running boot's caches under "archive (and keep)"; archiving refused
    # them, and the whole apply stopped (exit 1): a nightly apply failed while an engine ran.
    _policy(project)
    _, old = _boot(project)
    _, new = _boot(project)
    with _running_boot(project) as (boot_id, held):
        assert held == new  # a warm boot takes the newest
        plan = _plan(project)
        assert plan["archive"] == [] and plan["archive_later"] == dict.fromkeys(new, boot_id)
        done = _process(project, "apply", "--yes")
        assert done.returncode == 0, done.stderr
        for cache_id in new:
            assert f"archive later: {cache_id}: in use by boot {boot_id}" in done.stdout
        caches = _caches()
        assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in old)
        assert all(caches[i].state == "live" and not _gone(caches[i]) for i in new)


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_a_boot_takes_after_the_plan_is_skipped_not_the_apply(project: Path) -> None:
    _policy(project)
    _, old = _boot(project)
    _, new = _boot(project)
    # Held after its plan is shown, long enough for a boot to take the caches it archives.
    applying = lifecycle(project, "apply", "--yes", env={DELAY_ENV: "apply-planned=30"})
    assert applying.stdout is not None
    shown: set[str] = set()
    while not set(new) <= shown:  # the plan is on stdout: apply is past it, at its delay
        line = applying.stdout.readline()
        assert line, f"apply ended before it showed its plan: {finish(applying)}"
        if line.startswith("archive (and keep): "):
            shown.add(line.removeprefix("archive (and keep): ").strip())
    with _running_boot(project) as (boot_id, held):
        assert held == new
        code, out, err = finish(applying)
        assert code == 0, err
        for cache_id in new:
            assert f"not archived: cache {cache_id} is in use by boot {boot_id}" in out, out
        caches = _caches()
        assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in old)
        assert all(caches[i].state == "live" and not _gone(caches[i]) for i in new)


def _status(project: Path) -> Any:
    done = _cli(project, "status", "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


@pytest.mark.docker
@pytest.mark.s3
def test_a_saved_plan_is_refused_once_the_ledger_the_archive_or_the_policy_moved(
    project: Path, tmp_path: Path, s3_bucket: str, s3_client: Any
) -> None:
    client = s3_client
    _policy(project)
    _boot(project)
    _, newer = _boot(project)
    saved = tmp_path / "plan.json"
    _plan(project, "-o", str(saved))
    pinned = _cli(project, "pin", newer[0], "--reason", "moved the state")
    assert pinned.exit_code == 0, pinned.output
    done = _process(project, "apply", str(saved), "--yes")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"plan is stale: this host's ledger changed since {saved} was made; plan again"
    ], done.stderr
    assert all(c.state == "live" for c in _caches().values())

    # The archive moved (another host archived): refused too, though with no `remote:` rule
    # the plan reads the archive's listing, not its records.
    _plan(project, "-o", str(saved))
    client.put_object(Bucket=s3_bucket, Key="test/blobs/sha256/00/" + "0" * 64, Body=b"x")
    done = _process(project, "apply", str(saved), "--yes")
    assert done.stderr.strip().splitlines() == [
        f"plan is stale: the archive's listing changed since {saved} was made; plan again"
    ], done.stderr
    assert all(c.state == "live" for c in _caches().values())

    # The policy was edited: the saved plan kept what the new one removes, and applying it
    # removed all 8 caches where the reviewed plan removed 4.
    _plan(project, "-o", str(saved))
    (project / "lifecycle.yaml").write_text(POLICY.replace("keep_last: 1", "keep_last: 0"))
    done = _process(project, "apply", str(saved), "--yes")
    assert done.stderr.strip().splitlines() == [
        f"plan is stale: the policy in lifecycle.yaml changed since {saved} was made; plan again"
    ], done.stderr
    assert all(c.state == "live" for c in _caches().values())
    # Bound to the rules, not the text: a comment added since changes nothing.
    (project / "lifecycle.yaml").write_text("# reviewed\n" + POLICY)
    done = _process(project, "apply", str(saved), "--yes")
    assert done.returncode == 0, done.stderr
    assert sorted(c.state for c in _caches().values()) == ["archived"] * 4 + ["torn-down"] * 4


def _apply_at(project: Path, saved: Path, later: timedelta) -> converge.ApplyReport:
    """`apply SAVED --yes` on the real services, its clock `later` ahead of this one."""
    ctx = Context(
        os.environ,
        project / "manifests",
        Home(Path(os.environ["LIFECYCLE_HOME"])),
        now=lambda: datetime.now(UTC) + later,
    )
    return converge.apply(ctx, verbs.Apply(file=saved, yes=True))


@pytest.mark.docker
@pytest.mark.s3
def test_a_saved_plan_is_refused_once_time_makes_it_do_more_and_applies_while_it_does_not(
    project: Path, tmp_path: Path
) -> None:
    # Only the state was bound: the plan kept every cache `keep_within 1h`, and the same file
    # applied two hours later removed half of them.
    (project / "lifecycle.yaml").write_text(POLICY.replace("keep_within: null", "keep_within: 1h"))
    _, old = _boot(project)
    _, new = _boot(project)
    saved = tmp_path / "plan.json"
    plan = _plan(project, "-o", str(saved))
    assert {c["action"] for c in plan["caches"]["caches"]} == {"keep"}  # type: ignore[index]
    assert sorted(plan["archive"]) == sorted(old + new)  # type: ignore[arg-type]
    with pytest.raises(LifecycleError) as refused:
        _apply_at(project, saved, timedelta(hours=2))
    said = str(refused.value)
    assert said.startswith("plan is stale: applied now it would also archive, then remove "), said
    assert said.endswith(f", which {saved} does not show; plan again"), said
    assert sorted(old)[0] in said and sorted(new)[0] not in said, said
    assert {c.state for c in _caches().values()} == {"live"}
    # Ten minutes on, the plan of now is the saved one: it is carried out.
    done = _apply_at(project, saved, timedelta(minutes=10))
    assert sorted(done.archived) == sorted(old + new) and done.teardown is None
    assert {c.state for c in _caches().values()} == {"archived"}


def _planned(
    caches: tuple[tuple[str, str], ...] = (),
    archive: tuple[str, ...] = (),
    remote: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A plan as `plan -o` saves it: (cache, action) each, caches archived, objects collected."""
    rows = [{"id": cache, "action": action, "resumes": None} for cache, action in caches]
    images = [{"id": "sha256:1", "tags": ["demo:1"], "removes": False}]
    teardown = {"caches": rows, "containers": [], "images": images}
    collect = {"remove": list(remote)} if remote else None
    return {"caches": teardown, "archive": list(archive), "remote": collect}


def test_the_plan_of_now_is_stale_only_when_it_does_more_than_the_saved_one() -> None:
    plan = _planned
    saved = plan((("a", "archive, then remove"), ("b", "keep")), ("b",), ("blobs/x",))
    assert converge.unshown_work(saved, saved) == ""
    assert converge.unshown_work(saved, plan()) == ""  # less: what was reviewed, or less
    assert converge.unshown_work(saved, plan((("a", "remove"), ("b", "keep")))) == "remove a"
    more = plan((("a", "archive, then remove"), ("b", "archive, then remove")), (), ("blobs/y",))
    assert converge.unshown_work(saved, more) == (
        "archive, then remove b; remove from the archive blobs/y"
    )
    assert converge.unshown_work(saved, plan(archive=("b", "c"))) == "archive (and keep) c"
    gone = plan()
    gone["caches"]["containers"] = [{"name": "boot-1"}]
    gone["caches"]["images"][0]["removes"] = True
    assert converge.unshown_work(saved, gone) == (
        "remove image demo:1; remove stopped boot container boot-1"
    )
    # A file edited by hand shows no work where it does not parse: never less refused.
    for damaged in ({}, {"caches": [], "archive": "b", "remote": 3}, {"caches": {"caches": [1]}}):
        assert converge.unshown_work(damaged, saved) != ""


def test_a_saved_plan_removing_a_tagged_image_is_not_stale_against_the_same_plan_of_now(
    tmp_path: Path,
) -> None:
    """The plan of now is made in memory (an image's tags a tuple, as dataclasses.asdict leaves
    them); the saved one was read from JSON (a list). The same plan must compare equal."""

    class Now:
        def __init__(self, plan: dict[str, Any]) -> None:
            self.plan, self.location = plan, None
            self.state = dict.fromkeys(("ledger", "archive", "policy"), "same")

        def to_json(self) -> dict[str, Any]:
            return self.plan

    made = _planned((("a", "archive, then remove"),))
    made["caches"]["images"][0] |= {"removes": True, "tags": ("demo:1",)}
    state = dict.fromkeys(("ledger", "archive", "policy"), "same")
    saved = json.loads(json.dumps({**made, "state": state, "location": None}))
    converge._check_fresh((tmp_path / "plan.json", saved), Now(made))  # type: ignore[arg-type]


@pytest.mark.docker
@pytest.mark.s3
def test_a_sigkilled_apply_run_again_converges_with_nothing_lost(
    project: Path, tmp_path: Path
) -> None:
    _policy(project)
    _, old = _boot(project)
    _, new = _boot(project)
    kills = 0
    for crash in (*APPLY_CRASH_POINTS, *CRASH_POINTS):  # each cache's removal has them all
        killed = _process(project, "apply", "--yes", env={CRASH_ENV: crash})
        if killed.returncode == 0:  # the point is past: an earlier round did the work
            continue
        kills += 1
        assert killed.returncode == -signal.SIGKILL, (crash, killed.stderr)
        for cache in _caches().values():  # nothing gone that is not archived
            if _gone(cache):
                assert cache.id in old and cache.state in ("archived", "torn-down"), crash
    assert kills == 1 + len(CRASH_POINTS)
    rerun = _process(project, "apply", "--yes")
    assert rerun.returncode == 0, rerun.stderr
    caches = _caches()
    assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in old)
    assert all(not _gone(caches[i]) for i in new)
    assert _plan(project)["empty"] is True


@pytest.mark.docker
@pytest.mark.s3
def test_an_apply_killed_in_its_gc_step_is_completed_by_the_next_apply(
    project: Path, s3_bucket: str
) -> None:
    # The next gc at a location completes a stopped one first; when that gc was apply's, the
    # stopped run stayed unfinished for good (only `gc --remote` completed it).
    _boot(project)
    _boot(project)
    archived = _cli(project, "archive", "--all")
    assert archived.exit_code == 0, archived.output
    remote = "  remote: {keep_within: 0s, grace: 0s}\n"  # every version not pinned goes
    (project / "lifecycle.yaml").write_text(POLICY + remote)
    killed = _process(project, "apply", "--yes", env={CRASH_ENV: "gc-planned"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    url = f"s3://{s3_bucket}/test"
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        [stopped] = unfinished_gc(ledger, url)
    finally:
        ledger.close()
    done = _process(project, "apply", "--yes")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]  # said before the plan
    assert first.startswith(f"completed stopped gc run {stopped.run_id}: removed "), first
    assert not first.startswith(f"completed stopped gc run {stopped.run_id}: removed 0 "), first
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        assert unfinished_gc(ledger, url) == []
    finally:
        ledger.close()


@pytest.mark.docker
@pytest.mark.s3
def test_keep_releases_names_a_release_as_build_does_and_a_typo_is_said(project: Path) -> None:
    # A release was named by its manifest's last two dirs: `manifests/0.31/manifest.yaml` was
    # "manifests/0.31", so `keep_releases: ["0.31"]` kept nothing; and a typo kept nothing
    # silently. The newest good cache of each name of the release stays, whatever else goes.
    (project / "lifecycle.yaml").write_text(
        "policy:\n  caches:\n    - keep_last: 0\n      keep_within: null\n"
        "      archive_after: 0s\n      keep_releases: [demo/0.2, demo/0.9]\n"
    )
    _, old = _boot(project)
    _, new = _boot(project)
    done = _cli(project, "plan", "--json")
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)
    why = {c["id"]: c for c in plan["caches"]["caches"]}
    assert {why[i]["action"] for i in old} == {"archive, then remove"}, why
    assert {why[i]["action"] for i in new} == {"keep"}, why
    assert all("keep_releases" in " ".join(why[i]["why"]) for i in new), why
    assert plan["unknown_releases"] == ["demo/0.9"]
    assert "keep_releases: 'demo/0.9' names no manifest of this project" in done.stderr


def test_a_release_is_its_manifests_dir_under_the_projects_manifests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.policy.facts import release_of

    manifests = tmp_path / "manifests"
    assert release_of(str(manifests / "0.31/manifest.yaml"), manifests) == "0.31"
    assert release_of(str(manifests / "demo/0.2/manifest.yaml"), manifests) == "demo/0.2"
    assert release_of("/elsewhere/vllm/0.31/manifest.yaml", manifests) == "0.31"
    assert release_of(None, manifests) is None
    monkeypatch.chdir(tmp_path)  # `--manifests manifests`: the ledger keeps absolute paths
    assert release_of(str(manifests / "0.31/manifest.yaml"), Path("manifests")) == "0.31"


def test_images_are_kept_by_release_not_by_build() -> None:
    # Counted by digest, two builds of 0.31 (a tuned value moved) were "the newest 2 releases"
    # and 0.30, production's way back, went. Each release keeps its newest build's images.
    from lifecycle.policy.facts import releases_kept
    from lifecycle.policy.model import Policy

    built = [  # newest first: (manifest, release, digest, image id)
        ("vllm-prod", "0.31", "d3", "i3"),
        ("vllm-prod", "0.31", "d2", "i2"),
        ("vllm-prod", "0.30", "d1", "i1b"),  # rebuilt with --force: another image, same digest
        ("vllm-prod", "0.30", "d1", "i1"),
        ("vllm-prod", "0.29", "d0", "i0"),
    ]
    policy = Policy.model_validate({"images": [{"match": "vllm-*", "keep_last": 2}]})
    assert releases_kept(built, policy) == {
        "i3": "keep_last 2: its newest build of 0.31",
        "i1b": "keep_last 2: its newest build of 0.30",
        "i1": "keep_last 2: an older image of its newest build of 0.30 (built again since as i1b)",
    }
    unruled = Policy.model_validate({"images": [{"match": "demo*"}]})
    assert set(releases_kept(built, unruled).values()) == {"no policy rule names its manifest"}


def test_two_manifests_sharing_a_release_name_keep_their_own_images() -> None:
    # A release's newest build was keyed by the release's name alone: vllm-b's build of 0.31
    # took the place of vllm-a's, and vllm-a's older image of its newest build (built again
    # since, the base moved) was found of another build, and went.
    from lifecycle.policy.facts import releases_kept
    from lifecycle.policy.model import Policy

    built = [  # newest first
        ("vllm-a", "0.31", "da", "ia2"),
        ("vllm-b", "0.31", "db", "ib"),
        ("vllm-a", "0.31", "da", "ia1"),  # the same build, before the base moved
    ]
    policy = Policy.model_validate({"images": [{"keep_last": 1}]})
    assert releases_kept(built, policy) == {
        "ia2": "keep_last 1: its newest build of 0.31",
        "ib": "keep_last 1: its newest build of 0.31",
        "ia1": "keep_last 1: an older image of its newest build of 0.31 (built again since as ia2)",
    }
    # So were keep_releases' caches: the newest good one of a name, of either manifest.
    from lifecycle.policy.keep import Live, evaluate

    at = datetime(2026, 12, 1, tzinfo=UTC)
    caches = [
        Live(f"vllm-{m}", f"vllm-{m}", "0.31", "vllm", "serve", at + timedelta(hours=h), True, True)
        for h, m in enumerate("ab")
    ]
    rules = {"caches": [{"keep_last": 0, "keep_within": None, "keep_releases": ["0.31"]}]}
    verdicts = evaluate(Policy.model_validate(rules), caches, at + timedelta(days=9))
    assert {c: v.keep for c, v in verdicts.items()} == {
        c.id: ("keep_releases: the newest good vllm cache of 0.31",) for c in caches
    }


@pytest.mark.docker
@pytest.mark.s3
def test_plan_o_replaces_a_saved_plan_never_another_file(project: Path, tmp_path: Path) -> None:
    """`plan -o lifecycle.yaml`, a slip of the keyboard, wrote the plan over the policy."""
    _policy(project)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (project / "lifecycle.yaml", fifo):  # (a dir: click refuses it)
        done = _process(project, "plan", "-o", str(target))
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            f"{target} exists and is not a plan `lifecycle plan -o` saved: not replaced (remove"
            " it, or name another file)"
        )
    assert (project / "lifecycle.yaml").read_text() == POLICY
    saved = tmp_path / "plan.json"
    _plan(project, "-o", str(saved))
    _plan(project, "-o", str(saved))  # planning again replaces the plan saved before
    assert json.loads(saved.read_text())["format"] == "lifecycle-plan/1"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # Through a link: the file it names is the plan, and the link stays one.
    link = project / "plan.json"
    link.symlink_to(saved)
    saved.write_text(saved.read_text().replace('"format"', '"old": 1, "format"', 1))
    _plan(project, "-o", str(link))
    assert link.is_symlink() and link.resolve() == saved
    assert "old" not in json.loads(saved.read_text())


def _two_releases(docker_client: Any) -> tuple[str, list[str]]:
    """A manifest of its own with two releases, 0.1 then 0.2, each an engine image (the demo
    engine, relabelled) recorded as built here: its name and the two tags, oldest first."""
    name = f"planstale-{secrets.token_hex(4)}"
    tags = []
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        for hour, release in enumerate(("0.1", "0.2")):
            tag = f"lifecycle-test/{name}:{release}"
            digest = secrets.token_hex(32)
            _built_here(docker_client, ledger, name, release, digest, tag, hour, f"tag={tag}")
            tags.append(tag)
    finally:
        ledger.close()
    return name, tags


def _built_here(
    client: Any, ledger: Ledger, name: str, release: str, digest: str, tag: str, hour: int,
    label: str,
) -> str:  # fmt: skip
    """The demo engine with one more label (`label`, so each build is its own image), tagged
    `tag`, labelled as `name`'s build of `digest`, recorded in `ledger` as built at `hour`
    o'clock: its image id."""
    import io

    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.demo.images import engine_image
    from lifecycle.ledger import BuildRecord
    from lifecycle.ledger.builds import record_build
    from lifecycle.teardown.containers import NAME_LABEL
    from tests.services import TEST_LABEL

    labels = {DIGEST_LABEL: digest, NAME_LABEL: name, TEST_LABEL: "plan"}
    dockerfile = f"FROM {engine_image('0.2.0')}\nLABEL {label}\n"
    image, _ = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=labels, rm=True
    )
    built = BuildRecord(
        started_at=f"2026-10-10T0{hour}:00:00+00:00", duration_s=1.0,
        manifest_name=name, manifest_file=f"/elsewhere/{name}/{release}/manifest.yaml",
        manifest_digest=digest, tag=tag, image_id=image.id,
        outcome="built", error=None, log_path=None,
    )  # fmt: skip
    record_build(ledger, built)
    return str(image.id)


@pytest.mark.docker
@pytest.mark.s3
def test_a_saved_plan_is_refused_once_an_image_it_removes_was_removed(
    project: Path, tmp_path: Path, docker_client: Any
) -> None:
    # The ledger's state left out that a teardown removed an image (builds.removed_at): the
    # saved plan, removing an image gone since, was carried out as if nothing had moved.
    from docker.errors import ImageNotFound

    images = "  images:\n    - match: planstale-*\n      keep_last: 1\n"
    (project / "lifecycle.yaml").write_text(POLICY + images)
    name, tags = _two_releases(docker_client)
    try:
        saved = tmp_path / "plan.json"
        plan = _plan(project, "-o", str(saved))
        going = [i["tags"] for i in plan["caches"]["images"] if i["removes"]]  # type: ignore[index]
        assert going == [[tags[0]]], plan["caches"]
        torn = _cli(project, "teardown", "--images", "--manifest", name, "--yes")
        assert torn.exit_code == 0 and f"removed image {tags[0]}" in torn.stdout, torn.output
        done = _process(project, "apply", str(saved), "--yes")
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert done.stderr.strip().splitlines() == [
            f"plan is stale: this host's ledger changed since {saved} was made; plan again"
        ], done.stderr
    finally:
        for tag in tags:
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag, force=True)


@pytest.mark.docker
@pytest.mark.s3
def test_an_image_whose_tag_moved_to_a_rebuild_is_not_said_its_releases_newest_build(
    project: Path, docker_client: Any
) -> None:
    # Built again (the same manifest, the base moved): the tag, named by the manifest's
    # digest, moves to the new image and the old one stays, untagged. The policy keeps both
    # (every image of the release's newest build), but said the old one was "its newest
    # build", the reason of the image that took its tag.
    from docker.errors import ImageNotFound

    name = f"rebuilt-{secrets.token_hex(4)}"
    tag = f"lifecycle-test/{name}:0.2"
    digest = secrets.token_hex(32)
    images = []
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        for hour in (1, 2):  # the second build takes the first one's tag
            images.append(
                _built_here(docker_client, ledger, name, "0.2", digest, tag, hour, f"build={hour}")
            )
    finally:
        ledger.close()
    old, new = images
    images_rule = f"  images:\n    - match: {name}\n      keep_last: 1\n"
    (project / "lifecycle.yaml").write_text(POLICY + images_rule)
    try:
        assert docker_client.images.get(old).tags == []  # untagged: its tag moved
        planned = _plan(project)["caches"]["images"]  # type: ignore[index]
        why = {i["id"]: (i["tags"], i["removes"], i["why"]) for i in planned if i["id"] in images}
        assert why == {
            new: ([tag], False, "keep_last 1: its newest build of 0.2"),
            old: (
                [], False,
                f"keep_last 1: an older image of its newest build of 0.2 (built again since"
                f" as {new[:19]})",
            ),
        }, why  # fmt: skip
        shown = _cli(project, "plan").stdout
        assert f"image {old[:19]}: keep (keep_last 1: an older image of its newest" in shown
    finally:
        for reference in images:
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(reference, force=True)


def test_each_ledger_row_a_plan_reads_moves_the_state_a_saved_plan_is_bound_to(
    tmp_path: Path,
) -> None:
    # A teardown's removal of an image, a bake, a result recorded or archived, a secret found
    # in a cache: each moves what the plan of now does, and a plan saved before was not stale.
    from lifecycle.ledger import BuildRecord
    from lifecycle.ledger.archives import BootArchiveRow, record_boot_archive
    from lifecycle.ledger.boots import BootRecord, CacheUse, TaintedFile, start_boot
    from lifecycle.ledger.builds import (
        BakeRecord,
        McvRecord,
        image_removed,
        record_bake,
        record_build,
        record_mcv_image,
    )
    from lifecycle.ledger.core import insert
    from lifecycle.ledger.removal import TeardownStep, pin, record_step, unpin
    from lifecycle.ledger.results import (
        ResultArchiveRecord,
        ResultRecord,
        insert_result,
        record_result_archive,
    )
    from lifecycle.ledger.retention import state_digest
    from tests.test_teardown import _tracked

    at, engine, baked = "2026-10-10T09:00:00+00:00", "sha256:" + "e" * 64, "sha256:" + "b" * 64
    ledger = Ledger.open(tmp_path)
    cache, archive = _tracked(ledger, tmp_path)
    boot = BootRecord(
        "b-1", at, at, 0, "ok", None, "host", "serve", "demo", "d" * 64, engine, "demo:0.2",
        None, "[]", False, "[]", None, None,
    )  # fmt: skip
    start_boot(ledger, boot, [], [CacheUse("b-1", cache.id, "cold")])
    build = ("demo", "manifest.yaml", "d" * 64, "demo:0.2", engine, "built", None, None)
    record_build(ledger, BuildRecord(at, 1.0, *build))
    result = ResultRecord(
        "r-1", "b-1", "smoke", "pass", "{}", None, "manual", False, None, None, None, at, "0" * 64
    )
    bake = BakeRecord(baked, "demo:baked", "demo", "d" * 64, engine, "serve", "x", "[]", at)
    secret = TaintedFile(cache.id, "flashinfer_jit.log", "1" * 64, "HF_TOKEN", None)

    def tainted() -> None:
        with ledger.transaction() as conn:
            insert(conn, "tainted_files", secret)

    location, step = archive.location, TeardownStep("t-1", cache.id, "refused", "held", None, at)
    moves = {
        "a build's image removed": lambda: image_removed(ledger, engine, at),
        "a bake recorded": lambda: record_bake(ledger, bake),
        "an MCV image recorded": lambda: record_mcv_image(
            ledger, McvRecord("sha256:" + "c" * 64, baked, "vllm", "demo:mcv")
        ),
        "a bake's images removed": lambda: image_removed(ledger, baked, at),
        "a result recorded": lambda: insert_result(ledger, result),
        "the result archived": lambda: record_result_archive(
            ledger, ResultArchiveRecord("r-1", location, "test/results/r-1.json", "2" * 64, at)
        ),
        "the boot archived": lambda: record_boot_archive(
            ledger, BootArchiveRow("b-1", location, "test/boots/b-1/x.json", "3" * 64, at)
        ),
        "a file holding a secret found": tainted,
        "a teardown refused": lambda: record_step(ledger, step),
        "a pin": lambda: pin(ledger, cache.id, "production", at),
        "an unpin": lambda: unpin(ledger, cache.id),
    }
    try:
        unmoved = []
        for what, move in moves.items():
            before = state_digest(ledger)
            move()
            if state_digest(ledger) == before:
                unmoved.append(what)
        assert unmoved == []
    finally:
        ledger.close()


def _edited(saved: Path, change: Any) -> str:
    """The text of the plan saved at `saved`, `change` made to it as data."""
    plan = json.loads(saved.read_text())
    change(plan)
    return json.dumps(plan, indent=2)


def _action(cache_id: str, action: str) -> Any:
    def change(plan: dict[str, Any]) -> None:
        for cache in plan["caches"]["caches"]:
            if cache["id"] == cache_id:
                cache["action"] = action

    return change


@pytest.mark.docker
@pytest.mark.s3
def test_a_saved_plan_edited_since_is_refused_and_nothing_of_it_done(
    project: Path, tmp_path: Path
) -> None:
    # apply FILE carries out the plan of now, never the file's; but a file edited to show a
    # cache the policy keeps going (or an unarchived one removed outright, a cache of another
    # host) was carried out as the reviewed plan, doing what it did not show.
    _policy(project)
    _, old = _boot(project)
    _, new = _boot(project)
    saved = tmp_path / "plan.json"
    _plan(project, "-o", str(saved))
    text = saved.read_text()
    other = {"id": "c-elsewhere", "action": "remove", "resumes": None}
    edited = (
        "not as `lifecycle plan` saved it (edited since: its digest does not match what it"
        " holds); plan again"
    )
    not_a_plan = "not a plan `lifecycle plan -o FILE` saved"
    edits = {
        "a cache the policy keeps, going": (_edited(saved, _action(new[0], "remove")), edited),
        "an unarchived one removed outright": (_edited(saved, _action(old[0], "remove")), edited),
        "a cache added": (
            _edited(saved, lambda plan: plan["caches"]["caches"].append(other)),
            edited,
        ),
        "an id changed": (text.replace(old[0], "c-0000"), edited),
        "its digest changed": (_edited(saved, lambda plan: plan.update(digest="0" * 64)), edited),
        "its digest dropped": (
            _edited(saved, lambda plan: plan.pop("digest", None)),
            "a plan with no digest (an older lifecycle's, or edited); plan again",
        ),
        "its format changed": (text.replace("lifecycle-plan/1", "lifecycle-plan/2"), not_a_plan),
        "cut short": (text[: len(text) // 2], not_a_plan),
        "not JSON": ("archive everything\n", not_a_plan),
        "a JSON list": ("[" + text + "]", not_a_plan),
    }
    for what, (body, said) in edits.items():
        changed = tmp_path / "changed.json"
        changed.write_text(body)
        done = _process(project, "apply", str(changed), "--yes")
        assert done.returncode == 2, (what, done.stdout, done.stderr)
        assert done.stderr.strip().splitlines() == [f"{changed}: {said}"], (what, done.stderr)
        assert {c.state for c in _caches().values()} == {"live"}, what
    # Bound to what it holds, not to its bytes: indented and ordered otherwise, it applies.
    plan = json.loads(text)
    saved.write_text(json.dumps(dict(reversed(plan.items())), indent=None))
    done = _process(project, "apply", str(saved), "--yes")
    assert done.returncode == 0, done.stderr
    caches = _caches()
    assert all(caches[i].state == "torn-down" and _gone(caches[i]) for i in old)
    assert all(caches[i].state == "archived" for i in new)


def test_an_outside_field_forges_no_line_of_the_plan_apply_shows_or_of_its_report() -> None:
    # What apply shows before --yes is what is agreed to: an S3 server's error (why it was
    # not asked) forged a line saying there was nothing to do, under a plan that removes.
    from lifecycle.table import visible_lines
    from lifecycle.teardown.containers import ImageDecision
    from lifecycle.teardown.plan import TeardownPlan
    from lifecycle.teardown.survey import TeardownRequest

    forged = "SlowDown\nnothing to do: this host and the archive are as the policy says"
    image = ImageDecision("sha256:" + "a" * 64, ("lifecycle/demo:0.1",), "demo", True, "unused")
    caches = TeardownPlan((), (), (image,), unreachable=(f"s3://team: {forged}",))
    made = converge.Converge(caches, TeardownRequest(), {}, (), None, None, {})
    shown = visible_lines(made.text()).splitlines()  # as the CLI prints it
    assert not any(line.startswith("nothing to do") for line in shown), shown
    assert shown[-1] == (
        "incomplete: not asked: s3://team: SlowDown\\nnothing to do: this host and the archive"
        " are as the policy says"
    )
    done = converge.ApplyReport(made, busy=(f"c-1: {forged}",))
    assert visible_lines(done.text()).splitlines() == [
        "not archived: c-1: SlowDown\\nnothing to do: this host and the archive are as the"
        " policy says"
    ]


@pytest.mark.docker
@pytest.mark.s3
def test_a_cache_whose_dir_vanished_is_counted_as_recorded_gone_not_as_kept(
    project: Path,
) -> None:
    # The plan's summary said "kept: 5" of a plan that records one of them as gone, and
    # status said "policy: nothing to do" of a plan whose only work was that record.
    import shutil

    _policy(project)
    _, old = _boot(project)
    _boot(project)  # the policy lets the first boot's caches go
    shutil.rmtree(_caches()[old[0]].host_path)
    plan = _plan(project)
    actions = {c["id"]: c["action"] for c in plan["caches"]["caches"]}  # type: ignore[index]
    assert actions[old[0]] == "record as gone", actions
    assert plan["caches"]["caches_to_record_gone"] == 1, plan["caches"]  # type: ignore[index]
    shown = _cli(project, "plan").stdout
    assert "to remove: 3 caches" in shown and "to record as gone: 1; kept: 4" in shown, shown
    assert _status(project)["policy"]["caches to record as gone"] == 1


@pytest.mark.docker
@pytest.mark.s3
def test_a_bake_pulled_from_a_registry_is_another_homes_and_stays(
    project: Path, docker_client: Any
) -> None:
    # `boot --baked --pull` records the bake it pulled as this host's bake: apply removed it
    # ("no remaining cache refers to it"), though another home baked and pushed it, as a
    # pulled engine image is never removed here.
    import io

    from docker.errors import ImageNotFound

    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.demo.images import engine_image
    from lifecycle.ledger.builds import (
        BakeRecord,
        RegistryImage,
        record_bake,
        record_registry_image,
    )
    from lifecycle.teardown.containers import NAME_LABEL, PULLED
    from tests.services import TEST_LABEL

    name, digest = f"pulledbake-{secrets.token_hex(4)}", secrets.token_hex(32)
    labels = {DIGEST_LABEL: digest, NAME_LABEL: name, TEST_LABEL: "plan"}
    dockerfile = f"FROM {engine_image('0.2.0')}\nLABEL baked={name}\n"
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), labels=labels, rm=True
    )
    reference = f"registry.test/{name}@sha256:{secrets.token_hex(32)}"
    at = "2026-10-10T01:00:00+00:00"
    ledger = Ledger.open(Path(os.environ["LIFECYCLE_HOME"]))
    try:
        record_registry_image(ledger, RegistryImage(image.id, digest, reference, "pulled", at))
        record_bake(
            ledger,
            BakeRecord(image.id, reference, name, digest, "sha256:" + "0" * 64, "serve",
                       "none", "[]", at),
        )  # fmt: skip
    finally:
        ledger.close()
    _policy(project)
    try:
        planned = _plan(project)["caches"]["images"]  # type: ignore[index]
        mine = [(i["removes"], i["why"]) for i in planned if i["id"] == image.id]
        assert mine == [(False, PULLED.format(reference))], planned
        assert _cli(project, "apply", "--yes").exit_code == 0
        docker_client.images.get(image.id)
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image.id, force=True)
