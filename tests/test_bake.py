"""`lifecycle bake` and `boot --baked` on a real dockerd and S3: only proven caches are baked,
one layer each; the baked image boots warm with nothing mounted, judged by what the engine
read in its layers; a layer that is not the tree its label names is refused at boot."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.record import publish_image
from lifecycle.archive.store import BlobStore
from lifecycle.boot.baked import PROFILE_LABEL
from lifecycle.build.plan import BAKED_LABEL
from lifecycle.faults import BAKE_CRASH_POINTS
from lifecycle.home import Home
from lifecycle.leases import try_lease
from lifecycle.records import IMAGE_FORMAT, ImageRecordV1
from tests.night_support import finish, lifecycle
from tests.services import boot_demo, demo_copy, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]

NAMES = ["vllm", "flashinfer", "triton", "inductor"]  # the demo's caches, the manifest's order
FACTORS = "lifecycle.bake.key_factors"  # what the caches' keys were made of: their GPU arch too


def _bake(project: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = run_lifecycle(project, "bake", "demo/0.2", "--json", *args)
    return done.exit_code, json.loads(done.stdout)


def _ledger(home: Path) -> sqlite3.Connection:
    return closing(sqlite3.connect(home / "ledger.sqlite3"))  # type: ignore[return-value]


def _trees(home: Path) -> dict[str, str]:
    """cache name -> the tree digest of its newest cache in the ledger."""
    with _ledger(home) as conn:
        rows = conn.execute("SELECT cache_name, tree_digest FROM caches ORDER BY rowid")
        return dict(rows.fetchall())


def _bakes_in_status(project: Path) -> list[tuple[str, str, bool | None]]:
    """(profile, image id, on dockerd) of each newest bake `status` lists."""
    shown = json.loads(run_lifecycle(project, "status", "--json").stdout)
    return [(b["profile"], b["image_id"], b["on_dockerd"]) for b in shown["bakes"]]


def _layer_file(docker_client: Any, image_id: str, cache_path: str) -> Path:
    """A file of the baked cache at `cache_path`, where dockerd keeps the image's layer."""
    data = docker_client.images.get(image_id).attrs["GraphDriver"]["Data"]
    layers = [data["UpperDir"], *data["LowerDir"].split(":")]
    root = next(p for d in layers if (p := Path(d, cache_path.lstrip("/"))).is_dir())
    return next(p for p in sorted(root.rglob("*")) if p.is_file())


def test_only_proven_caches_are_baked_and_the_image_boots_warm_with_nothing_mounted(
    archive_project: Path, docker_client: Any, isolated_home: Path, registry: str,
    s3_client: Any, s3_bucket: str,
) -> None:  # fmt: skip
    home = isolated_home / "lifecycle"
    boot_demo(archive_project)  # cold: the caches are made
    code, refused = _bake(archive_project)
    assert code == 1 and refused["image_id"] is None
    assert [c["name"] for c in refused["caches"]] == NAMES
    assert all("not archived" in c["refused"] for c in refused["caches"]), refused

    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, planned = _bake(archive_project, "--dry-run")
    assert code == 0 and planned["image_id"] is None
    assert {c["name"]: c["tree_digest"] for c in planned["caches"]} == _trees(home)
    with _ledger(home) as conn:
        assert conn.execute("SELECT COUNT(*) FROM bakes").fetchone()[0] == 0, "a dry run bakes"

    code, baked = _bake(archive_project, "--format", "mcv")
    assert code == 0, baked
    assert _bakes_in_status(archive_project) == [("serve", baked["image_id"], True)]
    image = docker_client.images.get(baked["image_id"])
    # And, for the caches MCV knows, a cache-only image in its layout (docs/mcv.md).
    assert [m["cache"] for m in baked["mcv"]] == ["vllm", "triton"]
    for made in baked["mcv"]:
        mcv = docker_client.images.get(made["image_id"])
        assert len(mcv.attrs["RootFS"]["Layers"]) == 1 and made["tag"] in mcv.tags
        assert f"cache.{made['cache']}.image/summary" in mcv.labels
        assert mcv.labels["lifecycle.bake.caches"] == image.labels["lifecycle.bake.caches"]
    engine = docker_client.images.get(baked["engine_image_id"])
    # FROM the engine by id, then one layer per cache, in the manifest's order.
    layers, under = image.attrs["RootFS"]["Layers"], engine.attrs["RootFS"]["Layers"]
    assert layers[: len(under)] == under and len(layers) == len(under) + len(NAMES)
    labels = image.labels
    in_label = json.loads(labels["lifecycle.bake.caches"])
    assert [c["name"] for c in in_label] == NAMES
    assert {c["name"]: c["tree_digest"] for c in in_label} == _trees(home)
    assert all(c["record"]["key"].startswith("test/caches/") for c in in_label)
    assert labels["org.opencontainers.image.base.digest"] == engine.id
    factors = json.loads(labels["lifecycle.bake.key_factors"])
    assert factors["manifest_digest"] == engine.labels["lifecycle.manifest.digest"]
    assert factors["base_digest"] == engine.labels["lifecycle.base.digest"]
    assert (factors["vllm"], factors["arch"]) == ("0.2.0", "unknown")
    assert labels["lifecycle.manifest.digest"] == engine.labels["lifecycle.manifest.digest"]

    report = boot_demo(archive_project, "--baked")
    assert report["image_id"] == image.id and report["caches"] == []
    assert report["verdict"] == "warm-hit" and report["warmth"] == "warm", report
    used = {u["cache_name"]: u for u in report["baked"]}
    assert list(used) == NAMES
    assert {n: u["tree_digest"] for n, u in used.items()} == _trees(home)
    assert used["vllm"]["verdict"] == "warm-hit" and used["vllm"]["files_read"] >= 1
    assert all(u["verdict"] in ("warm-hit", "unused") for u in used.values()), used
    assert report["untracked"] == []
    container = docker_client.containers.get(report["container_id"])
    assert container.attrs["Mounts"] == [], "a baked boot mounts nothing"
    listed = run_lifecycle(archive_project, "boots").stdout
    (row,) = [line for line in listed.splitlines() if report["id"] in line]
    assert f"{len(NAMES)} baked" in row
    why = run_lifecycle(archive_project, "why", report["id"]).stdout
    assert why.startswith(f"boot {report['id']}: warm\n") and "vllm: baked, warm-hit" in why
    # Compared with the cold boot that made its caches: reused from the layers, not created.
    reused = "baked into the image and reused: 1 file read, nothing compiled into it"
    assert f"cache vllm: cold-compiled → warm-hit ({reused})" in why, why
    assert "created the cache" not in why, why
    added = run_lifecycle(archive_project, "result", "add", report["id"], "--name", "smoke",
                          "--status", "pass", "--json")  # fmt: skip
    assert added.exit_code == 0, added.output
    result = json.loads(added.stdout)["id"]

    # verify hashes each layer again, and checks each version record in the archive.
    checked = run_lifecycle(archive_project, "verify", image.id, "--json")
    assert checked.exit_code == 0, checked.output
    subjects = [c["subject"] for c in json.loads(checked.stdout)["checked"]]
    assert len(subjects) == 2 * len(NAMES) and subjects[0].startswith("layer of baked cache vllm")

    # A layer changed behind dockerd's back (one byte of a baked file) is refused, never booted.
    file = _layer_file(docker_client, image.id, in_label[0]["path"])
    original = file.read_bytes()
    try:
        file.write_bytes(original + b"x")
        differs = run_lifecycle(archive_project, "verify", baked["tag"])
        assert differs.exit_code == 1 and "DIFFERS layer of baked cache vllm" in differs.output
        refused_boot = run_lifecycle(archive_project, "boot", "demo/0.2", "--baked")
        assert refused_boot.exit_code == 1
        (line,) = refused_boot.stderr.strip().splitlines()
        assert "baked cache vllm" in line and "refused" in line, line
    finally:
        file.write_bytes(original)
    with _ledger(home) as conn:
        boots = conn.execute("SELECT COUNT(*) FROM boots").fetchone()[0]
    assert boots == 2, "the refused boot recorded nothing"

    # Pushed and recorded by digest: a host with an empty home pulls it and boots it warm.
    code, pushed = _bake(archive_project, "--push", registry)
    assert code == 0 and "@sha256:" in pushed["pushed_reference"] and pushed["image_record"]
    docker_client.images.remove(pushed["image_id"], force=True)
    assert _bakes_in_status(archive_project) == [("serve", pushed["image_id"], False)]
    elsewhere: dict[str, str | None] = {"LIFECYCLE_HOME": str(isolated_home / "elsewhere")}
    # A damaged object among its image records (a half-written one) is left out and named.
    damaged = f"test/images/{labels['lifecycle.manifest.digest']}/{'0' * 64}.json"
    s3_client.put_object(Bucket=s3_bucket, Key=damaged, Body=b"{half")
    left_out = f"left out: cannot read s3://{s3_bucket}/{damaged}: "
    pulled = run_lifecycle(archive_project, "boot", "demo/0.2", "--baked", "--pull", "--json",
                           env=elsewhere)  # fmt: skip
    assert pulled.exit_code == 0 and left_out in pulled.stderr, pulled.output
    far = json.loads(pulled.stdout)
    assert far["image_id"] == pushed["image_id"] and far["verdict"] == "warm-hit", far
    assert {u["cache_name"]: u["tree_digest"] for u in far["baked"]} == _trees(home)
    # A result there audits from S3 alone to the bake's trees, and to its provenance: an
    # in-toto Statement whose subject is the pushed digest, recorded with the push.
    statement = pushed["provenance"]
    named = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    repository, _, digest = pushed["pushed_reference"].partition("@sha256:")
    assert named[repository] == digest and named[pushed["tag"]] == pushed["image_id"][7:]
    predicate = statement["predicate"]
    needs = {d["name"]: d for d in predicate["buildDefinition"]["resolvedDependencies"]}
    assert needs["engine image"]["digest"]["sha256"] == engine.id[7:]
    assert needs["manifest demo/0.2"]["digest"]["sha256"] == labels["lifecycle.manifest.digest"]
    assert "patch patches/kernel-mix.patch" in needs
    assert {n: needs[f"cache {n}"]["digest"]["sha256"] for n in NAMES} == _trees(home)
    measured = {b["name"]: b["annotations"] for b in predicate["runDetails"]["byproducts"]}
    assert measured[f"boot {report['id']}"]["results"] == [
        {"id": result, "name": "smoke", "status": "pass"}
    ]
    far_added = run_lifecycle(archive_project, "result", "add", far["id"], "--name", "smoke",
                              "--status", "pass", "--json", env=elsewhere)  # fmt: skip
    assert far_added.exit_code == 0, far_added.output
    source = os.environ["LIFECYCLE_ARCHIVE"]
    far_result = json.loads(far_added.stdout)["id"]
    far_chain = run_lifecycle(archive_project, "audit", "result", far_result, "--from", source,
                              "--json")  # fmt: skip
    assert far_chain.exit_code == 0, far_chain.output
    assert json.loads(far_chain.stdout)["image"]["provenance"] == statement
    assert [w for w in json.loads(far_chain.stdout)["warnings"] if w.startswith(left_out)]
    s3_client.delete_object(Bucket=s3_bucket, Key=damaged)

    # A plain boot there runs the engine image, never the bake that carries its labels too.
    plain = boot_demo(archive_project, env=elsewhere)
    assert plain["image_id"] == pushed["engine_image_id"] and plain["baked"] == []

    # A result on the baked boot audits to the baked trees and their records, the image, the
    # engine it was built FROM, the manifest and the patches: from the ledger, and from S3
    # alone once the caches are torn down here.
    chain = json.loads(run_lifecycle(archive_project, "audit", "result", result, "--json").stdout)
    assert run_lifecycle(archive_project, "teardown", "--yes").exit_code == 0
    alone = run_lifecycle(archive_project, "audit", "result", result, "--from", source, "--json")
    assert alone.exit_code == 0, alone.output
    assert json.loads(alone.stdout) == chain
    baked_caches = {c["id"]: c for c in chain["caches"]}
    assert {c["mode"] for c in baked_caches.values()} == {"baked"}
    assert {c["cache_id"]: c["tree_digest"] for c in in_label} == {
        i: c["tree_digest"] for i, c in baked_caches.items()
    }
    for cache in in_label:
        record = baked_caches[cache["cache_id"]]["archive"]["record"]
        assert record.endswith(cache["record"]["key"]), (record, cache)
    assert chain["warnings"] == []
    assert chain["image"]["id"] == image.id
    assert chain["image"]["labels"]["lifecycle.bake.engine"] == engine.id
    assert [p["file"] for p in chain["patches"]] == ["patches/kernel-mix.patch"]


def test_a_partial_failed_unverified_or_withheld_cache_is_never_baked(
    archive_project: Path, s3_client: Any, s3_bucket: str, isolated_home: Path
) -> None:
    home = isolated_home / "lifecycle"
    boot_demo(archive_project)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, planned = _bake(archive_project, "--dry-run")
    assert code == 0

    # Held by a boot (its lease taken): not read into an image while it may be written.
    (vllm,) = [c["cache_id"] for c in planned["caches"] if c["name"] == "vllm"]
    held = try_lease(Home(home), vllm)
    assert held is not None
    try:
        code, refused = _bake(archive_project, "--dry-run")
        by_name = {c["name"]: c for c in refused["caches"]}
        assert code == 1 and "in use" in by_name["vllm"]["refused"], by_name
        assert [n for n, c in by_name.items() if "refused" in c] == ["vllm"]
    finally:
        held.release()

    # Its last boot compiled outside its caches: partial.
    boot_demo(archive_project, "--profile", "spills")
    code, refused = _bake(archive_project, "--dry-run")
    assert code == 1 and all("was partial" in c["refused"] for c in refused["caches"]), refused

    # Its last boot failed: not a cache a warm boot would take.
    assert run_lifecycle(archive_project, "boot", "demo/0.2", "--profile", "fails").exit_code == 1
    code, refused = _bake(archive_project, "--dry-run")
    assert code == 1 and all("last boot ended ok" in c["refused"] for c in refused["caches"])

    # Its archive does not verify: one version record gone from the server. (The boot after
    # the failed one starts cold: new caches, archived anew.)
    assert boot_demo(archive_project)["warmth"] == "cold"
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, planned = _bake(archive_project, "--dry-run")
    assert code == 0
    (vllm,) = [c["cache_id"] for c in planned["caches"] if c["name"] == "vllm"]
    with _ledger(home) as conn:
        (key,) = conn.execute(
            "SELECT record_key FROM archives WHERE cache_id = ?", (vllm,)
        ).fetchone()
    s3_client.delete_object(Bucket=s3_bucket, Key=key)
    code, refused = _bake(archive_project, "--dry-run")
    by_name = {c["name"]: c for c in refused["caches"]}
    assert code == 1 and "archive does not verify" in by_name["vllm"]["refused"], by_name
    assert all("refused" not in c for n, c in by_name.items() if n != "vllm")
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0  # heals it
    assert _bake(archive_project, "--dry-run")[0] == 0

    # A link pointing at a path that holds a secret's value: the layer would hold it whole.
    env: dict[str, str | None] = {"HF_TOKEN": "hf_bakedsecret123456"}
    boot_demo(archive_project, "--profile", "leaky-link", env=env)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, refused = _bake(archive_project, "--dry-run")
    by_name = {c["name"]: c for c in refused["caches"]}
    assert code == 1 and "symlinks name a secret's value" in by_name["flashinfer"]["refused"]

    # A file named after a secret's value is withheld from the archive: never baked either.
    boot_demo(archive_project, "--profile", "leaky-name", env=env)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, refused = _bake(archive_project)
    by_name = {c["name"]: c for c in refused["caches"]}
    assert code == 1 and refused["image_id"] is None
    assert "withheld" in by_name["flashinfer"]["refused"], by_name


def test_an_impostor_under_the_bakes_name_is_refused_at_boot(
    archive_project: Path, docker_client: Any, isolated_home: Path, tmp_path: Path
) -> None:
    home = isolated_home / "lifecycle"
    boot_demo(archive_project)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, baked = _bake(archive_project)
    assert code == 0, baked
    labels = docker_client.images.get(baked["image_id"]).labels
    # Its labels copied whole, one baked .so altered: what a moved tag could point at.
    context = tmp_path / "impostor"
    for cache in baked["caches"]:
        source = Path(cache["host_path"])
        target = context / "caches" / cache["name"]
        target.mkdir(parents=True)
        for file in sorted(source.rglob("*")):
            copy = target / file.relative_to(source)
            if file.is_dir():
                copy.mkdir(exist_ok=True)
            else:
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(file.read_bytes())
    victim = next(p for p in sorted((context / "caches/vllm").rglob("*")) if p.is_file())
    victim.write_bytes(victim.read_bytes()[: len(victim.read_bytes()) // 2])
    copies = "".join(f"COPY caches/{c['name']}/ {c['path']}/\n" for c in baked["caches"])
    (context / "Dockerfile").write_text(f"FROM {baked['engine_image_id']}\n{copies}")
    impostor, _ = docker_client.images.build(path=str(context), labels=labels, rm=True)
    impostor.tag(baked["tag"])
    with _ledger(home) as conn:
        conn.execute("UPDATE bakes SET image_id = ?", (impostor.id,))
        conn.commit()
    try:
        done = run_lifecycle(archive_project, "boot", "demo/0.2", "--baked")
        assert done.exit_code == 1
        (line,) = done.stderr.strip().splitlines()
        assert "baked cache vllm" in line and "refused" in line, line
    finally:
        docker_client.images.remove(impostor.id, force=True)


def test_a_bake_stays_while_its_engine_image_does_and_goes_before_it(
    tmp_path: Path,
    demo_images: None,
    docker_client: Any,
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A release of its own (one profile variable apart), so removing its images touches no
    # image another test boots.
    project = demo_copy(tmp_path / "project")
    child = project / "manifests/demo/0.2/manifest.yaml"
    token = secrets.token_hex(4)
    child.write_text(
        child.read_text() + "profiles:\n  serve:\n    command: [python3, -m, demollm.serve]\n"
        f"    env: {{LIFECYCLE_TEST_PROJECT: '{token}'}}\n    network: none\n"
    )
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/test")
    monkeypatch.chdir(project)
    assert run_lifecycle(project, "build", "demo/0.2").exit_code == 0
    boot_demo(project)
    assert run_lifecycle(project, "archive", "--all").exit_code == 0
    code, baked = _bake(project)
    assert code == 0, baked
    # A boot of the bake leaves its stopped container, which uses no cache of this host: it
    # goes with its image, not before (and never holds the image forever).
    baked_boot = boot_demo(project, "--baked")["id"]

    # The policy keeps the newest release's images: its engine image, and so its bake.
    (project / "lifecycle.yaml").write_text(
        "policy:\n  images:\n    - match: '*'\n      keep_last: 1\n"
    )
    planned = json.loads(run_lifecycle(project, "plan", "--json").stdout)
    images = {i["id"]: i for i in planned["caches"]["images"]}
    assert not images[baked["engine_image_id"]]["removes"]
    assert not images[baked["image_id"]]["removes"]
    assert "baked from engine image" in images[baked["image_id"]]["why"]
    assert baked_boot not in [c["boot_id"] for c in planned["caches"]["containers"]]

    # Once no cache and no rule keeps the engine image, both go: the bake first (a child
    # image must go before its parent can), the baked boot's container before its image.
    (project / "lifecycle.yaml").unlink()
    shown = run_lifecycle(project, "teardown", "--images", "--dry-run", "--json").stdout
    assert baked_boot in [c["boot_id"] for c in json.loads(shown)["plan"]["containers"]], shown
    done = run_lifecycle(project, "teardown", "--images", "--yes", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)["result"]
    went = [i["id"] for i in result["images"] if i["removes"]]
    assert went.index(baked["image_id"]) < went.index(baked["engine_image_id"]), result["images"]
    assert baked_boot in [c["boot_id"] for c in result["containers_removed"]]
    for image_id in (baked["image_id"], baked["engine_image_id"]):
        with pytest.raises(ImageNotFound):
            docker_client.images.get(image_id)


def test_gc_keeps_every_version_a_pushed_bake_holds(
    archive_project: Path, s3_client: Any, s3_bucket: str, registry: str
) -> None:
    boot_demo(archive_project)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, baked = _bake(archive_project, "--push", registry)
    assert code == 0, baked
    # Each cache grows a newer version: keep-last 1 keeps that one, and only the pushed bake
    # (no result, no pin) keeps the version baked into it.
    boot_demo(archive_project, "--profile", "grows")
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    swept = run_lifecycle(archive_project, "gc", "--remote", "--keep-last", "1", "--grace", "0s",
                          "--yes")  # fmt: skip
    assert swept.exit_code == 0, swept.output
    for cache in baked["caches"]:
        version = f"{cache['cache_id']}@{cache['tree_digest']}"
        checked = run_lifecycle(archive_project, "verify", version)
        assert checked.exit_code == 0 and "collected" not in checked.output, checked.output
        s3_client.head_object(Bucket=s3_bucket, Key=cache["record"]["key"])


def test_a_bake_killed_at_any_step_is_completed_by_the_next_and_loses_nothing(
    archive_project: Path, s3_client: Any, s3_bucket: str, registry: str, isolated_home: Path
) -> None:
    home = isolated_home / "lifecycle"
    boot_demo(archive_project)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    trees = _trees(home)
    here = {"LIFECYCLE_HOME": str(home)}
    for point in BAKE_CRASH_POINTS:
        crash = {**here, "LIFECYCLE_TEST_CRASH_AT": point}
        killed = lifecycle(archive_project, "bake", "demo/0.2", "--push", registry, env=crash)
        code, _, err = finish(killed)
        assert code == -signal.SIGKILL, (point, err)
        # Nothing it relied on moved, and its leases went with it: the next run completes.
        assert _trees(home) == trees
        args = ("bake", "demo/0.2", "--push", registry, "--json")
        again = lifecycle(archive_project, *args, env=here)
        code, out, err = finish(again)
        assert code == 0, (point, err)
        baked = json.loads(out)
        assert {c["name"]: c["tree_digest"] for c in baked["caches"]} == trees
        assert baked["provenance"] is not None and baked["image_record"]
        booted = boot_demo(archive_project, "--baked")
        assert booted["image_id"] == baked["image_id"] and booted["verdict"] == "warm-hit"
    with _ledger(home) as conn:
        bakes = conn.execute("SELECT COUNT(*) FROM bakes").fetchone()[0]
    assert bakes >= len(BAKE_CRASH_POINTS)  # each completed run recorded its bake


def test_a_baked_boot_is_judged_by_what_it_read_when_its_log_names_nothing(
    archive_project: Path, isolated_home: Path
) -> None:
    home = isolated_home / "lifecycle"
    boot_demo(archive_project)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    code, baked = _bake(archive_project, "--profile", "quiet")
    assert code == 0, baked
    report = boot_demo(archive_project, "--baked", "--profile", "quiet")
    assert Path(report["log_path"]).read_text().strip() == "", "the engine printed nothing"
    used = {u["cache_name"]: u for u in report["baked"]}
    with _ledger(home) as conn:
        (files,) = conn.execute("SELECT files FROM caches WHERE cache_name = 'vllm'").fetchone()
    assert used["vllm"]["verdict"] == "warm-hit" and used["vllm"]["files_read"] == files
    assert {used[n]["verdict"] for n in NAMES if n != "vllm"} == {"unused"}
    assert report["verdict"] == "warm-hit"


def test_a_bake_for_one_gpu_arch_is_never_booted_on_another(
    archive_project: Path, docker_client: Any, isolated_home: Path, registry: str
) -> None:
    on_90a: dict[str, str | None] = {"LIFECYCLE_GPU_ARCH": "90a"}
    boot_demo(archive_project, env=on_90a)
    assert run_lifecycle(archive_project, "archive", "--all", env=on_90a).exit_code == 0
    done = run_lifecycle(archive_project, "bake", "demo/0.2", "--push", registry, "--json",
                         env=on_90a)  # fmt: skip
    assert done.exit_code == 0, done.output
    baked = json.loads(done.stdout)
    labels = docker_client.images.get(baked["image_id"]).labels
    assert json.loads(labels[FACTORS])["arch"] == "90a"

    # Its kernels are not an arch-80 GPU's: refused as when there is no bake, whether this
    # host baked it or another host would pull it.
    elsewhere = str(isolated_home / "elsewhere")
    on_80: dict[str, str | None] = {"LIFECYCLE_GPU_ARCH": "80"}
    for env, args in ((on_80, ()), ({**on_80, "LIFECYCLE_HOME": elsewhere}, ("--pull",))):
        refused = run_lifecycle(archive_project, "boot", "demo/0.2", "--baked", *args, env=env)
        assert refused.exit_code == 1, (args, refused.output)
        (line,) = refused.stderr.strip().splitlines()
        assert "no bake of demo" in line and "for GPU arch 80 is on" in line, line

    # On a host of its arch it is pulled, booted warm, and recorded under its arch.
    far = boot_demo(
        archive_project, "--baked", "--pull", env={**on_90a, "LIFECYCLE_HOME": elsewhere}
    )
    assert far["image_id"] == baked["image_id"] and far["verdict"] == "warm-hit", far
    with _ledger(isolated_home / "elsewhere") as conn:
        assert conn.execute("SELECT arch FROM bakes").fetchall() == [("90a",)]


def test_a_pulled_bake_that_is_not_the_image_its_record_names_is_refused_in_one_line(
    archive_project: Path, docker_client: Any, isolated_home: Path, registry: str,
    s3_client: Any, s3_bucket: str,
) -> None:  # fmt: skip
    built = json.loads(run_lifecycle(archive_project, "build", "demo/0.2", "--json").stdout)
    engine = docker_client.images.get(built["image_id"])
    name = f"{registry}/lifecycle/demo:not-a-bake-{secrets.token_hex(3)}"
    repository, _, tag = name.rpartition(":")
    engine.tag(repository, tag)
    try:
        for line in docker_client.api.push(repository, tag, stream=True, decode=True):
            assert "error" not in line, line
        reference = f"{repository}@{docker_client.images.get_registry_data(name).id}"
    finally:
        docker_client.images.remove(name)
    # What a push that trusted a moved tag recorded: a bake's id and labels, and the digest of
    # the image the tag named then (here the engine image, which holds no cache); and a record
    # of the engine image's own id that calls it a bake.
    labels = {**engine.labels, BAKED_LABEL: "[]", PROFILE_LABEL: "serve",
              FACTORS: json.dumps({"arch": "unknown"})}  # fmt: skip
    store = BlobStore(s3_client, ArchiveLocation(s3_bucket, "test"))
    for image_id in ("sha256:" + "ab" * 32, engine.id):
        record = ImageRecordV1(
            format=IMAGE_FORMAT, manifest_digest=built["digest"], image_id=image_id,
            reference=reference, tag=name, labels=labels, host="elsewhere", tool_version="0",
            pushed_at="2026-01-01T00:00:00+00:00",
        )  # fmt: skip
        publish_image(store, record)

    elsewhere: dict[str, str | None] = {"LIFECYCLE_HOME": str(isolated_home / "elsewhere")}
    done = run_lifecycle(archive_project, "boot", "demo/0.2", "--baked", "--pull", env=elsewhere)
    assert done.exit_code == 1, done.output
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("no bake could be pulled: "), line
    assert f"is image {engine.id[:19]}, not sha256:abababababab as recorded" in line, line
    assert f"its label {BAKED_LABEL} is None" in line, line
    with _ledger(isolated_home / "elsewhere") as conn:
        assert conn.execute("SELECT COUNT(*) FROM bakes").fetchone()[0] == 0
    assert docker_client.images.get(engine.id).tags, "the engine image stays, with its tags"


# Writes the secret where a JIT's writer leaves its file before renaming it, and into a lock
# file: both transient, in no tree digest, no archive and no scan for a secret's value.
_LEAKY_TRANSIENT = (
    "  leaky-tmp:\n    command: [sh, -c, 'w=$FLASHINFER_WORKSPACE_BASE; mkdir -p $w/locks;"
    ' echo "$HF_TOKEN" > $w/.hub.1.2.tmp; echo "$HF_TOKEN" > $w/locks/hub.lock;'
    ' exec python3 -m demollm.serve "$@"\', sh]\n    secrets: [HF_TOKEN]\n    network: none\n'
)


def _own_release(
    tmp_path: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, profiles: str
) -> Path:
    """A project whose demo/0.2 is a release of its own (a profile variable apart, `profiles`
    added), built, archiving to `s3_bucket`: removing its images touches no other test's."""
    project = demo_copy(tmp_path / "project")
    child = project / "manifests/demo/0.2/manifest.yaml"
    token = secrets.token_hex(4)
    child.write_text(
        child.read_text() + "profiles:\n  serve:\n    command: [python3, -m, demollm.serve]\n"
        f"    env: {{LIFECYCLE_TEST_PROJECT: '{token}'}}\n    network: none\n" + profiles
    )
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/test")
    monkeypatch.chdir(project)
    assert run_lifecycle(project, "build", "demo/0.2").exit_code == 0
    return project


def _archived_release(tmp_path: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`_own_release` with the caches of a cold boot archived: what a bake takes."""
    project = _own_release(tmp_path, s3_bucket, monkeypatch, "")
    boot_demo(project)
    assert run_lifecycle(project, "archive", "--all").exit_code == 0
    return project


def _bake_killed_at(point: str, project: Path, home: Path, *args: str) -> str:
    """The tag of demo/0.2's bake (with `args`), that bake SIGKILLed at crash point `point`."""
    tag: str = _bake(project, "--dry-run")[1]["tag"]
    crash = {"LIFECYCLE_HOME": str(home), "LIFECYCLE_TEST_CRASH_AT": point}
    code, _, err = finish(lifecycle(project, "bake", "demo/0.2", *args, env=crash))
    assert code == -signal.SIGKILL, err
    return tag


def _layers_holding(docker_client: Any, image_id: str, needle: bytes) -> list[str]:
    """The files under /var/cache/lifecycle in the image's layers whose bytes hold `needle`."""
    data = docker_client.images.get(image_id).attrs["GraphDriver"]["Data"]
    found = []
    for layer in [data["UpperDir"], *data["LowerDir"].split(":")]:
        caches = Path(layer, "var/cache/lifecycle")
        found += [str(p) for p in caches.rglob("*") if p.is_file() and needle in p.read_bytes()]
    return found


def test_a_transient_file_holding_a_secret_is_never_baked(
    tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    project = _own_release(tmp_path, s3_bucket, monkeypatch, _LEAKY_TRANSIENT)
    value = f"hf_{secrets.token_hex(16)}"
    boot_demo(project, "--profile", "leaky-tmp", env={"HF_TOKEN": value})
    assert run_lifecycle(project, "archive", "--all").exit_code == 0
    code, baked = _bake(project, "--profile", "leaky-tmp")
    try:
        assert code == 0, baked
        # What the layers hold is the tree their labels name: no file the tree leaves out.
        assert _layers_holding(docker_client, baked["image_id"], value.encode()) == []
    finally:
        assert run_lifecycle(project, "teardown", "--images", "--yes").exit_code == 0


def test_an_image_a_killed_bake_left_is_recorded_by_the_next_and_torn_down_with_its_engine(
    tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
) -> None:  # fmt: skip
    project = _archived_release(tmp_path, s3_bucket, monkeypatch)
    home = isolated_home / "lifecycle"
    # Killed once dockerd has built, tagged and checked its image, before the ledger knew it.
    tag = _bake_killed_at("bake-built", project, home)
    killed = docker_client.images.get(tag)
    time.sleep(1)  # the next bake is another image: created a second later
    code, baked = _bake(project)
    assert code == 0 and baked["image_id"] != killed.id, baked
    with _ledger(home) as conn:  # and it recorded the one the killed bake left
        recorded = {row[0] for row in conn.execute("SELECT image_id FROM bakes")}
    assert recorded == {killed.id, baked["image_id"]}
    assert boot_demo(project, "--baked")["image_id"] == baked["image_id"], "the newest bake"
    # Both bakes go before their engine image, which goes too: no child of it is left behind.
    done = run_lifecycle(project, "teardown", "--images", "--yes")
    assert done.exit_code == 0, done.output
    for image_id in (killed.id, baked["image_id"], baked["engine_image_id"]):
        with pytest.raises(ImageNotFound):
            docker_client.images.get(image_id)


def test_a_bake_removed_is_recorded_and_no_verb_calls_a_gone_bake_there(
    tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path,
) -> None:  # fmt: skip
    project = _archived_release(tmp_path, s3_bucket, monkeypatch)
    home = isolated_home / "lifecycle"
    code, old = _bake(project)
    assert code == 0, old
    time.sleep(1)  # the next bake is another image under the same tag: created a second later
    code, new = _bake(project)
    assert code == 0 and new["image_id"] != old["image_id"] and new["tag"] == old["tag"], new

    # The older bake removed behind lifecycle's back: the tag names the newer one, which is
    # verified; the older one is said gone in one line, never as a difference dockerd dumped.
    docker_client.images.remove(old["image_id"])
    by_tag = run_lifecycle(project, "verify", new["tag"])
    assert by_tag.exit_code == 0 and "as recorded" in by_tag.output, by_tag.output
    gone = run_lifecycle(project, "verify", old["image_id"])
    assert gone.exit_code == 1, gone.output
    said = [line for line in gone.output.splitlines() if "DIFFERS" in line]
    assert len(said) == 1 and "is not on this Docker engine" in said[0], gone.output
    assert "Client Error" not in gone.output, gone.output

    # Torn down by lifecycle: the ledger records when, and every verb says so, with dockerd
    # answering or not; the older bake lifecycle did not remove is not said removed.
    done = run_lifecycle(project, "teardown", "--images", "--yes")
    assert done.exit_code == 0, done.output
    with _ledger(home) as conn:
        removed = dict(conn.execute("SELECT image_id, removed_at FROM bakes").fetchall())
    assert removed[old["image_id"]] is None and removed[new["image_id"]], removed
    for env in ({}, {"DOCKER_HOST": f"unix://{tmp_path}/no-dockerd.sock"}):
        shown = json.loads(run_lifecycle(project, "status", "--json", env=env).stdout)
        (bake,) = shown["bakes"]
        assert (bake["image_id"], bake["removed_at"]) == (new["image_id"], removed[new["image_id"]])
        text = run_lifecycle(project, "status", env=env).stdout
        assert f"; removed {removed[new['image_id']]}" in text, text
    gone = run_lifecycle(project, "verify", new["tag"])
    assert gone.exit_code == 1 and f"removed {removed[new['image_id']]}" in gone.output, gone.output


def test_a_baked_boot_says_so_when_the_newest_bake_is_gone_and_an_older_one_runs(
    tmp_path: Path, demo_images: None, docker_client: Any, s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    project = _archived_release(tmp_path, s3_bucket, monkeypatch)
    code, old = _bake(project)
    assert code == 0, old
    time.sleep(1)  # another image under the same tag: created a second later
    code, new = _bake(project)
    assert code == 0, new
    try:
        docker_client.images.remove(new["image_id"])  # behind lifecycle's back
        done = run_lifecycle(project, "boot", "demo/0.2", "--baked", "--json")
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["image_id"] == old["image_id"]
        said = [line for line in done.stderr.splitlines() if new["image_id"][:19] in line]
        assert len(said) == 1, done.stderr
        assert "is not on this Docker engine (removed with no record here: by hand" in said[0]
        assert "booting the bake of 20" in said[0] and f"({old['image_id'][:19]})" in said[0]
        # The morning screen says the same: the newest is gone, the older one runs instead.
        shown = json.loads(run_lifecycle(project, "status", "--json").stdout)
        (bake,) = shown["bakes"]
        assert (bake["image_id"], bake["on_dockerd"]) == (new["image_id"], False), bake
        assert bake["runs_instead"]["image_id"] == old["image_id"], bake
        text = run_lifecycle(project, "status").stdout
        assert f"; boot --baked runs the older {old['image_id'][:19]} (baked " in text, text
    finally:
        assert run_lifecycle(project, "teardown", "--images", "--yes").exit_code == 0


def test_an_s3_server_out_of_reach_is_exit_3_not_a_refusal(archive_project: Path) -> None:
    """No archive could be asked, so no cache was found unproven: the environment failed (3),
    as for teardown, not "the answer is no" (1) that a cache whose archive lost an object is."""
    boot_demo(archive_project)
    assert run_lifecycle(archive_project, "archive", "--all").exit_code == 0
    nowhere: dict[str, str | None] = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1"}  # nothing listens
    for args in (["--dry-run"], []):
        done = run_lifecycle(archive_project, "bake", "demo/0.2", "--json", *args, env=nowhere)
        report = json.loads(done.stdout)
        assert done.exit_code == 3, done.output
        assert report["image_id"] is None
        assert all("127.0.0.1:1 is not answering" in c["refused"] for c in report["caches"])
        (said,) = done.stderr.strip().splitlines()  # the JSON on stdout, the failure here
        assert said.startswith("lifecycle: s3://") and "is not answering" in said, said
