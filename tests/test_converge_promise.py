"""The promise of `lifecycle plan`: it shows exactly what `lifecycle apply` then does.

One home on the real dockerd and S3 server, in a state with a bit of everything (caches
archived, pinned, not archived, their dirs gone behind the ledger's back, kept by a rule;
engine images of two releases, one rebuilt, one pulled, a bake), is planned with `--json`,
applied, and each action of the plan is compared with what apply journalled and with what is
left on disk, on dockerd and in the bucket. Then the plan is empty.
"""

from __future__ import annotations

import io
import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest

from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import archive_of
from lifecycle.ledger.builds import BakeRecord, RegistryImage, record_bake, record_registry_image
from lifecycle.ledger.removal import steps_of
from tests.test_converge import POLICY, _built_here, _plan, _status
from tests.test_teardown import _archive, _boot, _caches, _cli, _gone, _home, _removed_quietly

REMOVES = ("remove", "archive, then remove")
GONE = "record as gone"


def _images(name: str) -> str:
    return f"  images:\n    - match: {name}\n      keep_last: 1\n"


def _ledger() -> Ledger:
    return Ledger.open(_home())


def _engine_images(docker_client: Any) -> tuple[str, dict[str, str]]:
    """A manifest of its own: release 0.1 (a bake of this home on it), release 0.2 built
    twice (the second took the tag: the first is untagged), and an image pulled by digest.
    Its name, and each image's id by what it is."""
    from lifecycle.build.plan import DIGEST_LABEL
    from lifecycle.teardown.containers import NAME_LABEL
    from tests.services import TEST_LABEL

    name = f"promise-{secrets.token_hex(4)}"
    ids: dict[str, str] = {}
    ledger = _ledger()
    try:
        old, new = secrets.token_hex(32), secrets.token_hex(32)
        ids["0.1"] = _built_here(
            docker_client, ledger, name, "0.1", old, f"lifecycle-test/{name}:0.1", 1, "b=1"
        )
        tag = f"lifecycle-test/{name}:0.2"
        ids["0.2 untagged"] = _built_here(docker_client, ledger, name, "0.2", new, tag, 2, "b=2")
        ids["0.2"] = _built_here(docker_client, ledger, name, "0.2", new, tag, 3, "b=3")
        labels = {DIGEST_LABEL: old, NAME_LABEL: name, TEST_LABEL: "promise"}
        dockerfile = f"FROM {ids['0.1']}\nLABEL baked={name}\n"
        bake, _ = docker_client.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=f"lifecycle-test/{name}:baked",
            labels=labels, rm=True,
        )  # fmt: skip
        ids["bake"] = bake.id
        at = "2026-10-10T04:00:00+00:00"
        record_bake(
            ledger,
            BakeRecord(bake.id, f"lifecycle-test/{name}:baked", name, old, ids["0.1"], "serve",
                       "x", "[]", at),
        )  # fmt: skip
        pulled, _ = docker_client.images.build(
            fileobj=io.BytesIO(f"FROM {ids['0.2']}\nLABEL pulled={name}\n".encode()),
            labels={DIGEST_LABEL: new, NAME_LABEL: name, TEST_LABEL: "promise"}, rm=True,
        )  # fmt: skip
        ids["pulled"] = pulled.id
        reference = f"registry.test/{name}@sha256:{secrets.token_hex(32)}"
        record_registry_image(ledger, RegistryImage(pulled.id, new, reference, "pulled", at))
    finally:
        ledger.close()
    return name, ids


def _on_dockerd(docker_client: Any, image_id: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        docker_client.images.get(image_id)
    except ImageNotFound:
        return False
    return True


def _in_bucket(s3_client: Any, cache_id: str) -> bool:
    """Whether the cache's archive record, as the ledger names it, is in the bucket."""
    from botocore.exceptions import ClientError

    ledger = _ledger()
    try:
        archive = archive_of(ledger, cache_id)
    finally:
        ledger.close()
    if archive is None:
        return False
    bucket = archive.location.removeprefix("s3://").split("/", 1)[0]
    try:
        s3_client.head_object(Bucket=bucket, Key=archive.record_key)
    except ClientError:
        return False
    return True


def _boot_containers(docker_client: Any) -> set[str]:
    """The names of this home's boots' containers on dockerd (other tests share it)."""
    from lifecycle.boot.engine import BOOT_LABEL, container_name
    from lifecycle.ledger.boots import boot_ids

    ledger = _ledger()
    try:
        ours = set(boot_ids(ledger))
    finally:
        ledger.close()
    listed = docker_client.containers.list(all=True, sparse=True)
    labels = [(c, c.attrs.get("Labels") or {}) for c in listed]
    return {container_name(c) for c, label in labels if label.get(BOOT_LABEL) in ours}


def _done_as_planned(plan: dict[str, Any], done: dict[str, Any]) -> None:
    """What apply reports it did is what the plan showed, action by action."""
    planned = {c["id"]: c["action"] for c in plan["caches"]["caches"]}
    assert sorted(done["archived"]) == sorted(plan["archive"])
    teardown = done["teardown"]
    outcomes = {o["cache_id"]: o for o in teardown["caches"]}
    assert not [o for o in outcomes.values() if o["problem"]], outcomes
    removed = {i for i, o in outcomes.items() if o["removed"]}
    assert removed == {i for i, action in planned.items() if action in REMOVES}
    settled = {i for i, o in outcomes.items() if o["settled"]}
    assert settled == {i for i, action in planned.items() if action == GONE}
    planned_containers = {c["name"] for c in plan["caches"]["containers"]}
    assert {c["name"] for c in teardown["containers_removed"]} == planned_containers
    planned_images = {i["id"] for i in plan["caches"]["images"] if i["removes"]}
    assert {i["id"] for i in teardown["images"] if i["removes"]} == planned_images


def _left_as_planned(
    plan: dict[str, Any], run_id: str, docker_client: Any, s3_client: Any, before: set[str]
) -> None:
    """What the journal, the ledger, the disk, dockerd and the bucket say after the apply is
    what the plan showed: `before`, the containers on dockerd before it."""
    caches = _caches()
    ledger = _ledger()
    try:
        journalled = {
            c["id"]: [s.step for s in steps_of(ledger, c["id"]) if s.run_id == run_id]
            for c in plan["caches"]["caches"]
        }
    finally:
        ledger.close()
    for decided in plan["caches"]["caches"]:
        cache, action = caches[decided["id"]], decided["action"]
        archived = _in_bucket(s3_client, cache.id)
        if action in REMOVES:
            assert journalled[cache.id] == ["intent", "verified", "deleted", "done"], cache
            assert cache.state == "torn-down" and _gone(cache) and archived, cache
        elif action == GONE:
            assert journalled[cache.id] == ["intent", "done"], cache
            assert cache.state == ("torn-down" if archived else "missing"), cache
        else:
            assert journalled[cache.id] == [], cache
            assert not _gone(cache), cache
            now_archived = cache.id in plan["archive"] or decided["archive"] is not None
            assert cache.state == ("archived" if now_archived else "live"), cache
            assert archived is now_archived, cache
    for image in plan["caches"]["images"]:
        assert _on_dockerd(docker_client, image["id"]) is not image["removes"], image
    going = {c["name"] for c in plan["caches"]["containers"]}
    left = _boot_containers(docker_client)
    assert going <= before and not going & left and (before - going) <= left


@pytest.mark.docker
@pytest.mark.s3
def test_apply_does_exactly_what_the_plan_shows(
    project: Path, docker_client: Any, s3_bucket: str, s3_client: Any
) -> None:
    name, images = _engine_images(docker_client)
    try:
        (project / "lifecycle.yaml").write_text(POLICY + _images(name))
        _, first = _boot(project)  # each boot's caches sorted by name: [i] is one name
        _, second = _boot(project)
        _, newest = _boot(project)  # keep_last 1 keeps these
        _archive(s3_bucket, [first[0], second[0]])
        for cache_id in (first[1], first[3]):
            pinned = _cli(project, "pin", cache_id, "--reason", "production")
            assert pinned.exit_code == 0, pinned.output
        caches = _caches()
        # Gone behind the ledger's back: not archived; pinned; archived; kept by the rule.
        for vanished in (first[2], first[3], second[0], newest[0]):
            shutil.rmtree(caches[vanished].host_path)

        plan = _plan(project)
        before = _boot_containers(docker_client)
        applied = _cli(project, "apply", "--yes", "--json")
        assert applied.exit_code == 0, applied.output
        done = json.loads(applied.stdout)
        _done_as_planned(plan, done)
        _left_as_planned(plan, done["teardown"]["run_id"], docker_client, s3_client, before)
        assert _plan(project)["empty"] is True

        # The plan itself: what each state comes to.
        shown = {c["id"]: (c["action"], c["why"]) for c in plan["caches"]["caches"]}  # type: ignore[index]
        assert {i: action for i, (action, _) in shown.items()} == {
            first[0]: "keep",  # the newest of its name whose dir is there
            first[1]: "keep",  # pinned
            first[2]: GONE,
            first[3]: GONE,  # pinned, but there is nothing left to keep
            second[0]: GONE,
            second[1]: "archive, then remove",
            second[2]: "archive, then remove",
            second[3]: "archive, then remove",
            newest[0]: GONE,  # the newest, but its dir is gone: keep_last keeps first[0]
            newest[1]: "keep",
            newest[2]: "keep",
            newest[3]: "keep",
        }, shown
        assert shown[first[3]][1] == [
            f"its dir {caches[first[3]].host_path} is gone: nothing to remove",
            "pinned: production, but its dir is gone",
        ], shown
        group = f"demo serve {first[0].rsplit('-', 1)[0]}"
        assert shown[first[0]][1] == [f"kept: keep_last 1: among the newest of {group}"]
        assert sorted(plan["archive"]) == sorted([first[1], *newest[1:]]), plan["archive"]  # type: ignore[call-overload]
        assert {
            i["id"]: i["removes"]
            for i in plan["caches"]["images"]  # type: ignore[index]
            if i["manifest_name"] == name
        } == {
            images["bake"]: True,
            images["0.1"]: True,
            images["0.2 untagged"]: False,
            images["0.2"]: False,
            images["pulled"]: False,
        }, plan["caches"]["images"]  # type: ignore[index]
        status = _status(project)
        assert status["caches"][0]["caches"] == status["caches"][0]["warm_ready"] == 5, status
        assert not any(status["policy"].values()), status
    finally:
        _removed_quietly(docker_client, *reversed(images.values()))  # children first
