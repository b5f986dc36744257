"""The MCV images `bake --format mcv` makes are images lifecycle made: the ledger records each
with its bake, `status` lists them, and they go with their bake (teardown --images, apply),
through the plan a dry run shows; a bake killed once one was built leaves none unknown."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound

from lifecycle.bake.image import settle_killed_bakes
from lifecycle.build.plan import BAKED_LABEL
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.builds import NOT_YET_ATTEMPTED, BakeRecord, dead_bake_attempts
from lifecycle.ledger.core import insert
from tests.night_support import finish, lifecycle
from tests.services import run_lifecycle
from tests.test_bake import _archived_release, _bake, _bake_killed_at, _ledger


def _recorded(home: Path) -> dict[str, tuple[str, str, str, str | None]]:
    """image id -> (bake image id, cache, tag, removed at) of each MCV image in the ledger."""
    with _ledger(home) as conn:
        rows = conn.execute(
            "SELECT image_id, bake_image_id, cache_name, tag, removed_at FROM mcv_images"
        ).fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}


def _planned(project: Path, *args: str) -> dict[str, dict[str, Any]]:
    """image id -> its decision, as `ARGS --json` shows the plan's images."""
    shown = json.loads(run_lifecycle(project, *args, "--json").stdout)
    plan = shown["plan"] if args[0] == "teardown" else shown["caches"]  # plan's: teardown's too
    return {image["id"]: image for image in plan["images"]}


@pytest.mark.docker
@pytest.mark.s3
def test_mcv_images_are_recorded_listed_and_torn_down_with_their_bake(
    tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
) -> None:  # fmt: skip
    project = _archived_release(tmp_path, s3_bucket, monkeypatch)
    home = isolated_home / "lifecycle"
    code, first = _bake(project, "--format", "mcv")
    assert code == 0, first
    assert _recorded(home) == {
        m["image_id"]: (first["image_id"], m["cache"], m["tag"], None) for m in first["mcv"]
    }
    # A bake again moves the tags: the first bake's MCV images stay on dockerd, untagged,
    # recorded with the bake they were made with.
    time.sleep(1)  # another bake: created a second later
    code, again = _bake(project, "--format", "mcv")
    assert code == 0 and again["image_id"] != first["image_id"], again
    made = {m["image_id"]: m for m in first["mcv"] + again["mcv"]}
    assert len(made) == 4 and set(_recorded(home)) == set(made)

    # `status` lists the newest bake's MCV images.
    shown = json.loads(run_lifecycle(project, "status", "--json").stdout)
    (bake,) = shown["bakes"]
    assert bake["image_id"] == again["image_id"]
    assert [(m["cache"], m["image_id"], m["on_dockerd"]) for m in bake["mcv"]] == [
        (m["cache"], m["image_id"], True) for m in again["mcv"]
    ]
    text = run_lifecycle(project, "status").stdout
    assert f"  mcv image of vllm: {again['mcv'][0]['tag']}" in text, text

    # The policy keeps the release's engine image, so its bakes, so their MCV images.
    (project / "lifecycle.yaml").write_text(
        "policy:\n  images:\n    - match: '*'\n      keep_last: 1\n"
    )
    planned = _planned(project, "plan")
    assert all(not planned[i]["removes"] for i in made), planned
    assert "an MCV image of bake" in planned[next(iter(made))]["why"]
    (project / "lifecycle.yaml").unlink()

    # Once nothing keeps the engine image, the dry run shows each MCV image going with its
    # bake, and the teardown removes them all and records it.
    dry = _planned(project, "teardown", "--images", "--dry-run")
    assert all(dry[i]["removes"] and "an MCV image of bake" in dry[i]["why"] for i in made), dry
    shown_text = run_lifecycle(project, "teardown", "--images", "--dry-run").stdout
    assert f"image {again['mcv'][1]['tag']}: remove (an MCV image of bake" in shown_text
    done = run_lifecycle(project, "teardown", "--images", "--yes", "--json")
    assert done.exit_code == 0, done.output
    went = {i["id"] for i in json.loads(done.stdout)["result"]["images"] if i["removes"]}
    assert set(made) <= went
    for image_id in made:
        with pytest.raises(ImageNotFound):
            docker_client.images.get(image_id)
    assert all(removed_at for *_, removed_at in _recorded(home).values()), _recorded(home)
    text = run_lifecycle(project, "status").stdout
    assert f"  mcv image of triton: {again['mcv'][1]['tag']}" in text and "; removed 20" in text


@pytest.mark.docker
@pytest.mark.s3
def test_a_bake_killed_once_an_mcv_image_was_built_leaves_no_image_unknown(
    tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
) -> None:  # fmt: skip
    project = _archived_release(tmp_path, s3_bucket, monkeypatch)
    home = isolated_home / "lifecycle"
    # Killed once dockerd has built and the bake checked its first MCV image, unrecorded.
    tag = _bake_killed_at("bake-mcv-built", project, home, "--format", "mcv")
    left = docker_client.images.get(f"{tag}-mcv-vllm")
    assert left.id not in _recorded(home)

    time.sleep(1)  # the next bake is another image: created a second later
    again = lifecycle(project, "bake", "demo/0.2", "--json", env={"LIFECYCLE_HOME": str(home)})
    code, out, err = finish(again)
    assert code == 0, err
    assert f"its MCV image of vllm {left.id[:19]} removed: not recorded" in err, err
    with pytest.raises(ImageNotFound):
        docker_client.images.get(left.id)
    with _ledger(home) as conn:
        assert conn.execute("SELECT COUNT(*) FROM bake_attempts").fetchone()[0] == 0
    assert run_lifecycle(project, "teardown", "--images", "--yes").exit_code == 0
    with pytest.raises(ImageNotFound):
        docker_client.images.get(json.loads(out)["image_id"])


class _Refusing:
    """A docker client whose engine lists one image a killed bake left, whose layers cannot be
    read here, and refuses to remove it."""

    def __init__(self, caches: str) -> None:
        listed = [{"Id": "sha256:" + "b" * 64, "Labels": {BAKED_LABEL: caches}}]
        unreadable = SimpleNamespace(id=listed[0]["Id"], attrs={"GraphDriver": {"Name": "vfs"}})
        self.api = SimpleNamespace(images=lambda **_: listed)
        self.images = SimpleNamespace(get=lambda _: unreadable, remove=self._remove)

    def _remove(self, image_id: str, force: bool) -> None:
        raise APIError("409 Client Error: Conflict", explanation="image is being used")


def test_a_killed_bakes_image_dockerd_will_not_remove_is_said_in_one_line(
    isolated_home: Path,
) -> None:
    home = Home(isolated_home / "lifecycle")
    ledger = Ledger.open(home)
    bake = BakeRecord("", "lifecycle/demo:x-baked", "demo", "d" * 64, "sha256:e", "serve", "90",
                      "[]", "2026-01-01T00:00:00+00:00")  # fmt: skip
    with ledger.transaction() as conn:  # attempted by a process that died: no lock held
        insert(conn, "bake_attempts", bake, skip=NOT_YET_ATTEMPTED)
    said: list[str] = []
    try:
        settle_killed_bakes(_Refusing("[]"), ledger, home, said.append)
        assert len(dead_bake_attempts(ledger, home)) == 1, "kept: the next bake tries again"
    finally:
        ledger.close()
    (line,) = said
    assert line.startswith("bake lifecycle/demo:x-baked of 2026-01-01T00:00:00+00:00 was killed")
    assert "not removed: dockerd: image is being used" in line and "\n" not in line
