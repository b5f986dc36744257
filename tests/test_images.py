"""Images by digest and cache keys that travel, with the real dockerd, the real S3 server and a
real registry (docker-registry on 127.0.0.1, started by `.ci/with-services`).

Each test builds a manifest of its own (the demo's, with its own tuned value, so its own digest
and image), as two hosts would: two LIFECYCLE_HOMEs on one Docker engine."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import socket
import sqlite3
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import publish_image
from lifecycle.archive.store import BlobStore
from lifecycle.boot.engine import NotBuilt
from lifecycle.build.engine import RegistryFailed, pull_image, push_image
from lifecycle.build.plan import BASE_DIGEST_LABEL, DIGEST_LABEL
from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.records import IMAGE_FORMAT, ImageRecordV1
from tests.services import TEST_LABEL, demo_copy, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]

HIT = "Directly load the compiled graph(s) for dynamic shape from the cache"
ENGINE = "lifecycle-demo/engine:v0.2.0"


@dataclass(frozen=True)
class Own:
    """A project of the test's own."""

    project: Path
    base: str  # the tag of its base image
    url: str  # its archive (lifecycle.yaml)


@pytest.fixture
def own(tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str) -> Iterator[Own]:
    """A project whose demo/0.2 differs from the demo's by one tuned value (its own image),
    built on a base of its own (`lifecycle-test/base:<token>`, the demo engine with one more
    file), archiving to a fresh bucket. Its images go afterwards."""
    root = demo_copy(tmp_path / "project")
    base = f"lifecycle-test/base:{secrets.token_hex(4)}"
    _base_image(docker_client, base, "first")
    manifest = root / "manifests/demo/0.2/manifest.yaml"
    text = manifest.read_text().replace(f"base_image: {ENGINE}", f"base_image: {base}")
    manifest.write_text(text.replace("value: 0.92", f"value: 0.9{secrets.randbelow(9)}"))
    (root / "lifecycle.yaml").write_text(f"archive: s3://{s3_bucket}/team\n")
    yield Own(root, base, f"s3://{s3_bucket}/team")
    for image in docker_client.api.images(filters={"label": f"lifecycle.base-image={base}"}):
        docker_client.images.remove(image["Id"], force=True)  # this test's: none goes meanwhile
    docker_client.images.remove(base, force=True)


def _base_image(client: Any, tag: str, content: str) -> str:
    """The demo engine with one more file: a base image of `tag`, its id."""
    dockerfile = f'FROM {ENGINE}\nRUN echo "{content}" > /etc/lifecycle-test-base\n'
    return _built(client, dockerfile, tag=tag, labels={TEST_LABEL: "base"})


def _built(client: Any, dockerfile: str, **options: Any) -> str:
    """The id of the image dockerd builds of `dockerfile` alone."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    buffer.seek(0)
    image, _ = client.images.build(fileobj=buffer, custom_context=True, rm=True, **options)
    return str(image.id)


def _lifecycle(project: Path, home: Path, *args: str) -> Any:
    result = run_lifecycle(project, *args, env={"LIFECYCLE_HOME": str(home)})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in args else result


def test_build_labels_its_base_digest_and_rebuilds_when_the_base_moved(
    own: Own, docker_client: Any, tmp_path: Path
) -> None:
    project, base = own.project, own.base
    home = tmp_path / "home"
    first = _lifecycle(project, home, "build", "demo/0.2", "--json")
    base_id = docker_client.images.get(base).id
    assert first["outcome"] == "built" and first["base_digest"] == base_id
    assert docker_client.images.get(first["image_id"]).labels[BASE_DIGEST_LABEL] == base_id
    again = _lifecycle(project, home, "build", "demo/0.2", "--json")
    assert again["outcome"] == "up-to-date" and again["image_id"] == first["image_id"]

    moved = _base_image(docker_client, base, "second")  # the tag now names other content
    assert moved != base_id
    rebuilt = _lifecycle(project, home, "build", "demo/0.2", "--json")
    assert rebuilt["outcome"] == "built" and rebuilt["base_digest"] == moved
    assert rebuilt["image_id"] != first["image_id"]
    with sqlite3.connect(home / "ledger.sqlite3") as conn:
        rows = conn.execute("SELECT outcome, base_digest FROM builds ORDER BY id").fetchall()
    assert rows == [("built", base_id), ("up-to-date", base_id), ("built", moved)]

    # Two images now carry the manifest's digest: a boot takes the newest build, by the ledger,
    # whatever order dockerd lists them in.
    digest = first["digest"]
    assert len(docker_client.images.list(filters={"label": f"{DIGEST_LABEL}={digest}"})) == 2
    booted = _lifecycle(project, home, "boot", "demo/0.2", "--json")
    assert booted["image_id"] == rebuilt["image_id"]


def test_an_image_pushed_on_one_host_is_pulled_by_digest_on_another_and_boots_warm(
    own: Own, docker_client: Any, registry: str, tmp_path: Path
) -> None:
    project = own.project
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    pushed = _lifecycle(project, host_a, "build", "demo/0.2", "--push", registry, "--json")
    image_id = pushed["image_id"]
    assert (
        pushed["pushed_reference"]
        == f"{pushed['pushed'].rpartition(':')[0]}@{pushed['pushed_digest']}"
    )
    assert pushed["pushed_reference"].startswith(f"{registry}/lifecycle/demo@sha256:")
    assert pushed["image_record"].startswith("s3://") and "/images/" in pushed["image_record"]
    cold = _lifecycle(project, host_a, "boot", "demo/0.2", "--cold", "--json")
    _lifecycle(project, host_a, "archive", "--all", "--with-content")
    result = _lifecycle(
        project, host_a, "result", "add", cold["id"], "--name", "smoke", "--status", "pass",
        "--json",
    )  # fmt: skip
    chain = _lifecycle(project, host_a, "audit", "result", result["id"], "--json")
    assert chain["image"]["repo_digests"] == [pushed["pushed_reference"]]

    docker_client.images.remove(image_id, force=True)  # gone from this engine, every tag of it
    absent = run_lifecycle(project, "boot", "demo/0.2", env={"LIFECYCLE_HOME": str(host_b)})
    assert absent.exit_code == 2 and "is not built" in absent.stderr
    # Host B has no image yet: what A archived says what the cache keys are made of.
    best = _lifecycle(project, host_b, "restore", "--best", "demo/0.2", "--json")
    assert best["none_found"] == [] and "(as pushed)" in best["image"]
    assert sorted(r["cache_id"] for r in best["restored"]) == sorted(
        u["cache_id"] for u in cold["caches"]
    )
    pulling = run_lifecycle(
        project, "boot", "demo/0.2", "--pull", "--json", env={"LIFECYCLE_HOME": str(host_b)}
    )
    assert pulling.exit_code == 0, pulling.output
    warm = json.loads(pulling.stdout)
    assert warm["image_id"] == image_id  # the very image A built, pulled by its digest
    assert f"pulled {pushed['pushed_reference']} (pushed, as s3://" in pulling.stderr
    # Pulled by digest it has no tag here: the boot names it by what it was pulled as.
    assert warm["image_tag"] == pushed["pushed_reference"]
    assert {u["mode"] for u in warm["caches"]} == {"warm"}
    assert HIT in Path(warm["log_path"]).read_text()
    pulled = docker_client.images.get(image_id)
    assert pushed["pushed_reference"] in pulled.attrs["RepoDigests"]
    with sqlite3.connect(host_b / "ledger.sqlite3") as conn:
        [row] = conn.execute("SELECT image_id, reference, how FROM registry_images").fetchall()
    assert row == (image_id, pushed["pushed_reference"], "pulled")
    theirs = _lifecycle(
        project, host_b, "result", "add", warm["id"], "--name", "smoke", "--status", "pass",
        "--json",
    )  # fmt: skip
    audited = _lifecycle(
        project, host_b, "audit", "result", theirs["id"], "--from", own.url, "--json"
    )
    assert pushed["pushed_reference"] in audited["image"]["repo_digests"]

    # No archive to say where it went, no --pull: the manifest's `registry:` alone (outside
    # its digest) makes a third host pull the image by the digest its tag has there.
    docker_client.images.remove(image_id, force=True)
    (project / "lifecycle.yaml").unlink()
    manifest = project / "manifests/demo/0.2/manifest.yaml"
    manifest.write_text(f"registry: {registry}\n" + manifest.read_text())
    third = _lifecycle(project, tmp_path / "host-c", "boot", "demo/0.2", "--json")
    assert third["image_id"] == image_id


def _damaged_image_records(client: Any, bucket: str, prefix: str, digest: str) -> list[str]:
    """Two objects among the manifest's image records that are not image records: bytes that
    are not the ones their key names (a bit flip, a half-written object), and a JSON record of
    another format named by its own bytes (hand-made); their s3:// URLs."""
    where = f"{prefix}/images/{digest}"
    other = json.dumps({"format": "lifecycle-pin/1", "target": "r-x", "reason": "crafted"}).encode()
    objects = {
        f"{where}/{hashlib.sha256(b'the bytes it had').hexdigest()}.json": b"\x00{half",
        f"{where}/{hashlib.sha256(other).hexdigest()}.json": other,
    }
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    return [f"s3://{bucket}/{key}" for key in objects]


def test_a_damaged_image_record_is_left_out_and_named_and_the_pushed_image_still_pulled(
    own: Own, docker_client: Any, registry: str, s3_client: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """One damaged record under a manifest's images/ made every host's `boot --pull` and
    `restore --best` of it fail for good: it is left out, named, and the rest is used."""
    project = own.project
    pushed = _lifecycle(project, tmp_path / "host-a", "build", "demo/0.2", "--push", registry,
                        "--json")  # fmt: skip
    damaged = _damaged_image_records(s3_client, s3_bucket, "team", pushed["digest"])
    docker_client.images.remove(pushed["image_id"], force=True)
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}

    best = run_lifecycle(project, "restore", "--best", "demo/0.2", "--json", env=host_b)
    assert best.exit_code == 1, best.output  # nothing archived: every cache boots cold
    answer = json.loads(best.stdout)
    assert answer["image"] == f"{pushed['pushed_reference']} (as pushed)"
    assert sorted(answer["unreadable"]) == sorted(damaged)
    for url in damaged:
        assert f"left out: cannot read {url}: " in best.stderr, best.stderr

    pulling = run_lifecycle(project, "boot", "demo/0.2", "--pull", "--json", env=host_b)
    assert pulling.exit_code == 0, pulling.output
    assert json.loads(pulling.stdout)["image_id"] == pushed["image_id"]
    assert f"pulled {pushed['pushed_reference']} (pushed, as s3://" in pulling.stderr
    for url in damaged:
        assert f"left out: cannot read {url}: " in pulling.stderr, pulling.stderr


def test_a_cluster_night_resolves_and_pulls_past_a_damaged_image_record(
    docker_client: Any, registry: str, s3_client: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """The driver's pin and a node's pull read the same records: one damaged stops neither."""
    from lifecycle.night import node
    from lifecycle.night.cluster import RayEngine
    from lifecycle.night.local import LocalEngine

    store = BlobStore(s3_client, ArchiveLocation(s3_bucket, "team"))
    digest = secrets.token_hex(32)  # a manifest no image here carries
    reference = f"{registry}/lifecycle/nothing@sha256:{'e' * 64}"  # the registry lacks it
    record = ImageRecordV1(
        format=IMAGE_FORMAT, manifest_digest=digest, image_id="sha256:" + "ab" * 32,
        reference=reference, tag=f"{registry}/lifecycle/nothing:v1", labels={}, host="a",
        tool_version="0", pushed_at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip
    publish_image(store, record)
    damaged = _damaged_image_records(s3_client, s3_bucket, "team", digest)

    said: list[str] = []
    driver = SimpleNamespace(store=store, say=said.append, pins={})
    pin = RayEngine.resolve(driver, "demo/0.2", None, digest)  # type: ignore[arg-type]
    assert pin.image["id"] == record.image_id and pin.tag == record.tag
    assert len(said) == 2, said  # a line for each record left out, naming it
    for url in damaged:
        assert any(line.startswith(f"left out: cannot read {url}: ") for line in said), said

    ledger = Ledger.open(Home(tmp_path / "node"))
    try:
        engine = LocalEngine(docker_client, ledger, Home(tmp_path / "node"), {}, "unknown")
        with pytest.raises(NotBuilt, match=re.escape(reference)):  # the readable one, tried
            node._pin_here(node._Host(engine, store), pin)
    finally:
        ledger.close()


def test_a_pulled_image_whose_labels_are_not_the_manifests_is_refused_and_removed(
    own: Own, docker_client: Any, registry: str
) -> None:
    # Someone pushed another image where the manifest's should be: its digest is real, its
    # labels say it is not this manifest's image.
    impostor = f"{registry}/lifecycle/demo:impostor-{secrets.token_hex(3)}"
    docker_client.images.get(ENGINE).tag(impostor)
    for line in docker_client.api.push(impostor, stream=True, decode=True):
        assert "error" not in line, line
    digest = docker_client.images.get_registry_data(impostor).id
    reference = f"{impostor.rpartition(':')[0]}@{digest}"
    docker_client.images.remove(impostor)
    # Ids from dockerd's list alone: the SDK's list inspects each image, and another test's
    # image may go between the two.
    before = {i["Id"] for i in docker_client.api.images()}
    with pytest.raises(RegistryFailed, match="is not the image of manifest"):
        pull_image(docker_client, reference, "f" * 64)
    assert {i["Id"] for i in docker_client.api.images()} <= before  # nothing new left behind


def test_an_image_refused_after_a_pull_stays_when_it_was_here_before(
    docker_client: Any, registry: str, demo_images: None
) -> None:
    """A person here had pulled that very image by digest for their own use; the refusal
    removed it with the reference (its only name): lifecycle removes only what its pull
    brought."""
    theirs = f"{registry}/lifecycle-test/theirs:{secrets.token_hex(3)}"
    image_id = _base_image(docker_client, theirs, secrets.token_hex(4))
    try:
        for line in docker_client.api.push(theirs, stream=True, decode=True):
            assert "error" not in line, line
        digest = docker_client.images.get_registry_data(theirs).id
        reference = f"{theirs.rpartition(':')[0]}@{digest}"
        docker_client.images.remove(theirs)
        docker_client.images.pull(reference)  # theirs, by digest: that reference its one name
        with pytest.raises(RegistryFailed, match="was here before the pull: left as it was"):
            pull_image(docker_client, reference, "f" * 64)
        assert docker_client.images.get(reference).id == image_id
    finally:
        docker_client.images.remove(image_id, force=True)


def _moving(client: Any, image_id: str, names: Any, to: str) -> Checkpoint:
    """A checkpoint that, once the push has tagged the image, moves `names(tags of the image)`
    onto image `to`: another bake or CI job on the same dockerd tagging the same name."""

    def move(point: str) -> None:
        if point == "push-tagged":
            for name in names(client.images.get(image_id).tags):
                repository, _, tag = name.rpartition(":")
                client.images.get(to).tag(repository, tag)

    return move


def test_a_push_records_its_own_images_digest_whatever_moves_a_tag_meanwhile(
    own: Own, docker_client: Any, registry: str, tmp_path: Path
) -> None:
    built = _lifecycle(own.project, tmp_path / "home", "build", "demo/0.2", "--json")
    image_id, tag, other = built["image_id"], built["tag"], docker_client.images.get(own.base).id
    shared = f"{registry}/{tag}"  # every build and bake of this manifest pushes under it

    # The shared tag moved to another image between the tag and the push: the digest
    # recorded is still this image's (the registry's manifest of it names this image's config).
    moved = _moving(docker_client, image_id, lambda tags: [shared], other)
    pushed = push_image(docker_client, image_id, tag, registry, moved)
    assert pushed.reference.startswith(f"{shared.rpartition(':')[0]}@sha256:")
    assert docker_client.images.pull(pushed.reference).id == image_id

    # Every name the push gave it moved: what the registry holds at the digest dockerd reports
    # is not this image, so it is refused, never recorded as this image's.
    every = _moving(
        docker_client, image_id, lambda tags: [t for t in tags if t.startswith(registry)], other
    )
    with pytest.raises(RegistryFailed, match=f"not {image_id[:19]}"):
        push_image(docker_client, image_id, tag, registry, every)


def _silent_registry() -> tuple[str, socket.socket]:
    """`127.0.0.1:PORT` of a server that accepts connections and never answers, its socket."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with suppress(OSError):  # closed: the test is over
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{server.getsockname()[1]}", server


def test_a_registry_that_never_answers_is_the_environment_as_one_that_refuses(
    own: Own, tmp_path: Path
) -> None:
    home = {"LIFECYCLE_HOME": str(tmp_path / "home")}
    silent, server = _silent_registry()
    closed = socket.create_server(("127.0.0.1", 0))
    refusing = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now: connections are refused
    try:
        for where in (silent, refusing):
            done = run_lifecycle(own.project, "build", "demo/0.2", "--push", where, env=home)
            assert done.exit_code == 3, (where, done.output)
            said = [line for line in done.stderr.splitlines() if not line.startswith("  | ")]
            assert len(said) == 1 and "the registry does not answer: push of" in said[0], said
    finally:
        server.close()


def test_a_rebuild_of_the_same_manifest_on_another_host_boots_warm_from_restored_caches(
    own: Own, tmp_path: Path
) -> None:
    # The cache key is what decides whether compiled artefacts are valid (manifest, base image,
    # pins, GPU arch), not the image id, which a rebuild changes (its `created` label).
    project = own.project
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    built_a = _lifecycle(project, host_a, "build", "demo/0.2", "--json")
    cold = _lifecycle(project, host_a, "boot", "demo/0.2", "--cold", "--json")
    _lifecycle(project, host_a, "archive", "--all", "--with-content")

    built_b = _lifecycle(project, host_b, "build", "demo/0.2", "--force", "--json")
    assert built_b["image_id"] != built_a["image_id"]
    best = _lifecycle(project, host_b, "restore", "--best", "demo/0.2", "--json")
    assert best["image"] == f"{built_b['image_id']} on this host"
    assert sorted(c["cache_id"] for c in best["chosen"]) == sorted(
        u["cache_id"] for u in cold["caches"]
    )
    warm = _lifecycle(project, host_b, "boot", "demo/0.2", "--json")
    assert warm["image_id"] == built_b["image_id"]
    assert {u["mode"] for u in warm["caches"]} == {"warm"}
    assert sum(u["files_added"] for u in warm["caches"]) == 0
    assert HIT in Path(warm["log_path"]).read_text()
    other_arch = run_lifecycle(
        project, "restore", "--best", "demo/0.2", "--json",
        env={"LIFECYCLE_HOME": str(tmp_path / "host-c"), "LIFECYCLE_GPU_ARCH": "90a"},
    )  # fmt: skip
    assert other_arch.exit_code == 1  # keyed by GPU arch: nothing archived for 90a
    assert sorted(json.loads(other_arch.stdout)["none_found"]) == sorted(
        u["cache_id"].rsplit("-", 1)[0] for u in cold["caches"]
    )
    said = run_lifecycle(
        project, "restore", "--best", "demo/0.2", "--cache", "vllm",
        env={"LIFECYCLE_HOME": str(tmp_path / "host-c"), "LIFECYCLE_GPU_ARCH": "90a"},
    )  # fmt: skip
    assert said.exit_code == 1
    assert "vllm: no version of key " in said.stdout
    assert "holds its files from a boot that ended ok (archive --with-content)" in said.stdout


def test_a_boot_that_mounted_no_cache_leaves_a_container_that_goes_with_its_image(
    own: Own, docker_client: Any, tmp_path: Path
) -> None:
    # Every cache off: the boot's stopped container waits on no cache's teardown, and would
    # hold the engine image for ever if it did not go with it.
    manifest = own.project / "manifests/demo/0.2/manifest.yaml"
    caches = "".join(f"  {name}: {{enabled: false}}\n" for name in _DEMO_CACHES)
    manifest.write_text(manifest.read_text() + "caches:\n" + caches)
    home = tmp_path / "home"
    built = _lifecycle(own.project, home, "build", "demo/0.2", "--json")
    booted = _lifecycle(own.project, home, "boot", "demo/0.2", "--json")
    assert booted["outcome"] == "ok" and booted["caches"] == [], booted

    done = _lifecycle(own.project, home, "teardown", "--images", "--yes", "--json")["result"]
    assert [c["boot_id"] for c in done["containers_removed"]] == [booted["id"]], done
    assert built["image_id"] in [i["id"] for i in done["images"] if i["removes"]], done
    assert not docker_client.containers.list(all=True, filters={"id": booted["container_id"]})


_DEMO_CACHES = ("vllm", "flashinfer", "triton", "inductor")


def test_an_engine_image_a_teardown_removed_is_recorded_and_said_so_by_verify_and_boot(
    own: Own, docker_client: Any, tmp_path: Path
) -> None:
    # A build's image went with `teardown --images` and the ledger kept no trace of it: verify
    # and boot could not tell a teardown's removal from an image gone behind lifecycle's back.
    from docker.errors import ImageNotFound

    project, home = own.project, tmp_path / "home"
    env: dict[str, str | None] = {"LIFECYCLE_HOME": str(home)}
    built = _lifecycle(project, home, "build", "demo/0.2", "--json")
    here = _lifecycle(project, home, "verify", built["tag"], "--json")
    assert here["ok"] and here["kind"] == "engine image" and here["removed_at"] is None, here

    done = _lifecycle(project, home, "teardown", "--images", "--yes")
    assert f"removed image {built['tag']}" in done.stdout, done.output
    with pytest.raises(ImageNotFound):
        docker_client.images.get(built["image_id"])
    [(removed_at,)] = _ledger_rows(home, "SELECT removed_at FROM builds")
    assert removed_at, "the removal is recorded, with when"

    said = f"removed {removed_at} by teardown --images or apply"
    gone = run_lifecycle(project, "verify", built["tag"], env=env)
    assert gone.exit_code == 1 and said in gone.output, gone.output
    shown = json.loads(run_lifecycle(project, "verify", built["tag"], "--json", env=env).stdout)
    assert shown["removed_at"] == removed_at and said in shown["problems"][0], shown
    boot = run_lifecycle(project, "boot", "demo/0.2", env=env)
    assert boot.exit_code == 2, boot.output
    [line] = boot.stderr.splitlines()
    assert said in line and "`lifecycle build demo/0.2` again" in line, line
    # A night on this host says it as the boot does, before it runs anything.
    from lifecycle.manifest import load_manifest
    from lifecycle.manifest.load import manifest_digest
    from lifecycle.night.local import LocalEngine

    loaded = load_manifest(project / "manifests/demo/0.2/manifest.yaml")
    ledger = Ledger.open(Home(home))
    try:
        night = LocalEngine(docker_client, ledger, Home(home), {}, "unknown")
        with pytest.raises(LifecycleError, match=re.escape(said)):
            night.resolve("demo/0.2", loaded, manifest_digest(loaded))
    finally:
        ledger.close()

    # Built again: there, as recorded. Then a teardown killed once dockerd removed the image
    # and before the ledger said so: the image is simply gone, as if removed by hand.
    again = _lifecycle(project, home, "build", "demo/0.2", "--json")
    assert _lifecycle(project, home, "verify", again["tag"], "--json")["ok"]
    killed = _killed_teardown(project, home)
    assert killed.returncode == -9, killed.stderr
    with pytest.raises(ImageNotFound):
        docker_client.images.get(again["image_id"])
    newest = _ledger_rows(home, "SELECT removed_at FROM builds ORDER BY id DESC LIMIT 1")
    assert newest == [(None,)]
    unrecorded = run_lifecycle(project, "boot", "demo/0.2", env=env)
    assert unrecorded.exit_code == 2 and "removed with no record here" in unrecorded.stderr
    assert said not in unrecorded.stderr, unrecorded.stderr


def _ledger_rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(home / "ledger.sqlite3") as conn:
        return conn.execute(sql).fetchall()


def _killed_teardown(project: Path, home: Path) -> Any:
    """`teardown --images` as a process of its own, SIGKILLed once dockerd removed an image."""
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"),
         "teardown", "--images", "--yes"],
        env={**os.environ, "LIFECYCLE_HOME": str(home),
             "LIFECYCLE_TEST_CRASH_AT": "teardown-image-removed"},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_layer_left_on_the_engine_is_never_taken_for_it(
    own: Own, docker_client: Any, tmp_path: Path
) -> None:
    # A bake killed, or failed, after its first COPY leaves that step's image on dockerd,
    # untagged and with nothing built on it: the engine's labels whole (a step inherits them)
    # and cache files under the engine's cache paths. A home that does not know the engine
    # (another host's, a new one) found the newest image by its labels, the tie broken by id,
    # and took such a layer for the engine: its boot ran the layer, its bake refused it.
    engine = _lifecycle(own.project, tmp_path / "a", "build", "demo/0.2", "--json")["image_id"]
    layers = [engine]
    try:
        while layers[-1] <= engine:  # one the old tie-break would have taken: its id sorts after
            layers.append(
                _built(
                    docker_client,
                    f"FROM {engine}\nRUN mkdir -p /var/cache/lifecycle/vllm"
                    f" && echo {secrets.token_hex(8)} > /var/cache/lifecycle/vllm/k.so\n",
                )
            )
        labels = [docker_client.images.get(i).labels for i in (layers[-1], engine)]
        assert labels[0][DIGEST_LABEL] == labels[1][DIGEST_LABEL]  # inherited whole
        found = _lifecycle(own.project, tmp_path / "b", "build", "demo/0.2", "--json")
        assert found["outcome"] == "up-to-date" and found["image_id"] == engine, found
        booted = _lifecycle(own.project, tmp_path / "c", "boot", "demo/0.2", "--json")
        assert booted["image_id"] == engine, booted
    finally:  # before the fixture removes the engine: dockerd keeps an image built on
        for layer in layers[1:]:
            docker_client.images.remove(layer, force=True)
