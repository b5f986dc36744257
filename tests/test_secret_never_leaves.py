"""A secret-printing engine: after `lifecycle boot` returns, no byte of the secret's value is on
stdout or stderr, in the ledger, in the kept evidence, in any S3 object (content included) or in
any Docker object on the host. The engine (profile `leaky`) prints the token and writes it
into a file of its FlashInfer cache, as a JIT log might."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, NotFound

from lifecycle.ledger.boots import CacheRecord
from tests.trust_support import caches, home, process, record

pytestmark = [pytest.mark.docker, pytest.mark.s3]


def test_the_secret_is_nowhere_but_the_engines_own_cache_file(
    archive_project: Path, s3_client: Any, s3_bucket: str, docker_client: Any
) -> None:
    # Not shaped like any known credential: only the value itself can find it.
    token = f"q{secrets.token_hex(20)}"
    env = {"HF_TOKEN": token}
    started = int(time.time())
    booted = process(archive_project, "boot", "demo/0.2", "--profile", "leaky", "--json", env=env)
    assert booted.returncode == 0, booted.stderr
    assert "hello <redacted:HF_TOKEN>" in booted.stderr  # shown, redacted, as it streamed
    report = json.loads(booted.stdout)
    flashinfer = next(c for c in caches().values() if c.cache_name == "flashinfer")
    leak = Path(flashinfer.host_path) / "leak.log"
    assert token in leak.read_text()  # the engine's own file on this host: it stays there

    outputs = [booted]
    outputs.append(process(archive_project, "archive", "--all", "--with-content", env=env))
    boot_id = report["id"]
    add = ["result", "add", boot_id, "--name", "leak", "--status", "pass"]
    outputs.append(process(archive_project, *add, env=env))
    outputs.append(process(archive_project, "boots", "--json", env=env))
    outputs.append(process(archive_project, "audit", "result", _result_id(), "--json", env=env))
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert token not in done.stdout + done.stderr

    document = record(s3_client, s3_bucket, flashinfer.id)
    assert document is not None and document["with_content"]
    assert document["withheld"] == [
        {"path": "leak.log", "sha256": _sha(leak), "why": "holds the value of secret HF_TOKEN"}
    ]
    needle = token.encode()
    for key, body in _objects(s3_client, s3_bucket):
        assert needle not in body, key
    for path in home().rglob("*"):
        if path.is_file() and not path.is_relative_to(home() / "caches"):
            assert needle not in path.read_bytes(), path
    for container in _created_since(docker_client, started):
        try:
            attrs, logs = json.dumps(container.attrs).encode(), container.logs()
        except APIError as error:
            if isinstance(error, NotFound) or error.status_code == 409:
                continue  # another process's container, gone or being removed meanwhile
            raise
        assert needle not in attrs + logs, container.name
    gone = docker_client.containers.list(all=True, filters={"id": report["container_id"]})
    assert not gone
    inspected = subprocess.run(["docker", "inspect", report["image_id"]], capture_output=True)
    assert needle not in inspected.stdout

    # A file no archive holds keeps its cache, named in the plan, until --drop-withheld.
    kept = process(archive_project, "teardown", flashinfer.id, "--yes", env=env)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "1 file withheld from any archive (they hold a secret's value): leak.log" in kept.stdout
    assert leak.exists()
    # Torn down, then restored: everything but the withheld file comes back, and it says so.
    torn = process(archive_project, "teardown", flashinfer.id, "--drop-withheld", "--yes", env=env)
    assert torn.returncode == 0, torn.stdout + torn.stderr
    assert not leak.exists()
    restored = process(archive_project, "restore", flashinfer.id, "--json", env=env)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["withheld"] == ["leak.log"]
    assert not leak.exists() and Path(flashinfer.host_path).is_dir()


def test_a_secret_moved_copied_or_grown_in_its_cache_by_boots_given_none_never_leaves(
    archive_project: Path, s3_client: Any, s3_bucket: str, registry: str
) -> None:
    # `leaky` writes the token into leak.log. The caches' key holds no profile, so boots given
    # no secret reuse them: `shuffle`, where the host holds no value, moves and copies the
    # file (its bytes unchanged); `extends`, where it does, writes them out grown. Withheld
    # by (path, bytes), and looked for by a boot only with its own secrets, all three reached
    # S3 with --with-content and a pushed image's layer.
    token, env, outputs, flashinfer = _booted(archive_project, "leaky")
    for profile, given in (("shuffle", {"HF_TOKEN": ""}), ("extends", env)):
        outputs.append(
            process(archive_project, "boot", "demo/0.2", "--profile", profile, env=given)
        )
    root = Path(flashinfer.host_path)
    moved = ["jit-build.log", "jit-copy.log", "jit-done.log"]
    assert not (root / "leak.log").exists()
    assert all(token in (root / name).read_text() for name in moved)
    outputs.append(process(archive_project, "archive", "--all", "--with-content", env=env))
    document = record(s3_client, s3_bucket, flashinfer.id)
    assert document is not None and document["with_content"]
    why = "holds the value of secret HF_TOKEN"
    assert [(w["path"], w["why"]) for w in document["withheld"]] == [(n, why) for n in moved]
    _nowhere_outside_caches(token, s3_client, s3_bucket)

    # Never baked, the refusal naming them; the cache is kept until --drop-withheld.
    baked = process(archive_project, "bake", "demo/0.2", "--push", registry, "--json", env=env)
    assert baked.returncode == 1, baked.stdout + baked.stderr
    report = json.loads(baked.stdout)
    assert report["image_id"] is None and report["pushed_reference"] is None
    refused = {c["name"]: c.get("refused", "") for c in report["caches"]}
    assert f"for a secret's value ({', '.join(moved)})" in refused["flashinfer"], refused
    outputs.append(process(archive_project, "teardown", flashinfer.id, "--yes", env=env))
    assert "3 files withheld from any archive" in outputs[-1].stdout
    assert all((root / name).is_file() for name in moved)
    for done in [*outputs, baked]:
        assert token not in done.stdout + done.stderr
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_secret_in_a_file_name_is_nowhere_but_the_engines_own_cache(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    # The engine (profile `leaky-name`) names a file and a dir of its FlashInfer cache after the
    # token; their contents hold nothing secret. The secret check used to read contents only.
    token, env, outputs, flashinfer = _booted(archive_project, "leaky-name")
    hub = Path(flashinfer.host_path) / "hub"
    assert (hub / f"models--x--{token}.ref").is_file()  # the engine's own, on this host
    # A warm boot without the secret finds the tree it left (the masks carried, not "damage").
    outputs.append(process(archive_project, "boot", "demo/0.2", "--json", env=env))
    assert json.loads(outputs[-1].stdout)["passed_over"] == []
    outputs.append(process(archive_project, "archive", "--all", "--with-content", env=env))
    for verb in (("caches", "--json"), ("boots", "--json"), ("audit", "cache", flashinfer.id)):
        outputs.append(process(archive_project, *verb, env=env))
    outputs.append(process(archive_project, "teardown", "--dry-run", env=env))
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
    masked = "hub/models--x--<redacted:HF_TOKEN>.ref"
    assert masked in outputs[-1].stdout  # the plan names what it keeps, by the secret's name
    # Re-hashed in full, the live cache is the tree recorded: its masks found again.
    outputs.append(process(archive_project, "verify", flashinfer.id, env=env))
    warm_boot = json.loads(outputs[1].stdout)["id"]
    explained = process(archive_project, "why", warm_boot, env=env)  # its exit code is its own

    document = record(s3_client, s3_bucket, flashinfer.id)
    assert document is not None and document["with_content"]
    why = "its name holds the value of secret HF_TOKEN"
    assert [(w["path"], w["why"]) for w in document["withheld"]] == [
        ("hub/models--<redacted:HF_TOKEN>/a.bin", why),
        (masked, why),
    ]
    _nowhere_outside_caches(token, s3_client, s3_bucket)

    # Kept until told; then gone, and a restore makes neither the file nor the dir.
    outputs.append(process(archive_project, "teardown", "--yes", env=env))
    assert hub.is_dir()
    outputs.append(process(archive_project, "teardown", "--drop-withheld", "--yes", env=env))
    assert not hub.exists()
    outputs.append(process(archive_project, "restore", flashinfer.id, "--json", env=env))
    assert json.loads(outputs[-1].stdout)["withheld"] == sorted(
        ["hub/models--<redacted:HF_TOKEN>/a.bin", masked]
    )
    assert not any(hub.iterdir())
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
    for done in [*outputs, explained]:
        assert token not in done.stdout + done.stderr


def test_a_secret_in_a_link_target_is_nowhere_but_the_engines_own_cache(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    # The engine (profile `leaky-link`) points a symlink of its FlashInfer cache at a path
    # holding the token. A fingerprint keeps link targets, and archive records keep
    # fingerprints: the target reached S3 whole while names were masked.
    token, env, outputs, flashinfer = _booted(archive_project, "leaky-link")
    link = Path(flashinfer.host_path) / "hub/current"
    assert link.is_symlink() and token in str(link.readlink())  # the engine's own, here
    outputs.append(process(archive_project, "boot", "demo/0.2", "--json", env=env))
    assert json.loads(outputs[-1].stdout)["passed_over"] == []  # the mask carried: no damage
    outputs.append(process(archive_project, "archive", "--all", "--with-content", env=env))
    outputs.append(process(archive_project, "verify", flashinfer.id, env=env))
    outputs.append(process(archive_project, "teardown", "--dry-run", env=env))
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
    _nowhere_outside_caches(token, s3_client, s3_bucket)
    assert "hub/current" in outputs[-1].stdout  # kept: no archive holds where it points

    outputs.append(process(archive_project, "teardown", "--yes", env=env))
    assert link.is_symlink()
    outputs.append(process(archive_project, "teardown", "--drop-withheld", "--yes", env=env))
    outputs.append(process(archive_project, "restore", flashinfer.id, "--json", env=env))
    assert json.loads(outputs[-1].stdout)["withheld"] == ["hub/current"]
    assert not os.path.lexists(link)  # never made: its target was never kept
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert token not in done.stdout + done.stderr


def test_a_secret_holding_a_slash_is_in_no_name_part_by_part(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    # A value holding `/` (base64 tokens, AWS secret keys) makes dirs of its parts: the
    # engine's `models--x--FIRST/SECOND.ref`. Paths were masked name by name, by whole values.
    token = f"q{secrets.token_hex(12)}/{secrets.token_hex(12)}"
    _, env, outputs, flashinfer = _booted(archive_project, "leaky-name", token)
    assert (Path(flashinfer.host_path) / f"hub/models--x--{token}.ref").is_file()
    outputs.append(process(archive_project, "boot", "demo/0.2", "--json", env=env))
    assert json.loads(outputs[-1].stdout)["passed_over"] == []  # the masks carried
    outputs.append(process(archive_project, "archive", "--all", "--with-content", env=env))
    outputs.append(process(archive_project, "verify", flashinfer.id, env=env))
    outputs.append(process(archive_project, "teardown", "--dry-run", env=env))
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
    assert "hub/models--x--<redacted:HF_TOKEN>/<redacted:HF_TOKEN>.ref" in outputs[-1].stdout
    for part in token.split("/"):
        _nowhere_outside_caches(part, s3_client, s3_bucket)
        assert not any(part in done.stdout + done.stderr for done in outputs)


def test_a_secret_put_into_a_cache_outside_any_boot_is_found_by_the_archive(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    # Between boots, by hand: a dir named after the archive's own S3 secret key, a link pointing
    # at a path holding HF_TOKEN's value, a file holding it. No boot's scan saw them, and the
    # archive's scanned with no secret: names and target reached S3 in the fingerprint blob
    # (without --with-content too), the file in a pack, and teardown took the cache as archived.
    token = f"q{secrets.token_hex(20)}"
    env = {"HF_TOKEN": token}
    key = os.environ["AWS_SECRET_ACCESS_KEY"]
    outputs = [process(archive_project, "boot", "demo/0.2", env=env)]  # passes no secret
    flashinfer = next(c for c in caches().values() if c.cache_name == "flashinfer")
    root = Path(flashinfer.host_path)
    (root / f"d_{key}").mkdir(parents=True)
    (root / f"d_{key}/f.txt").write_text("hi\n")
    (root / "link1").symlink_to(f"/root/{token}/x")
    (root / "cfg.txt").write_text(f"token={token}\n")

    asked = ("archive", "--all", "--with-content", "--dry-run", "--json")
    dry = process(archive_project, *asked, env=env)
    outputs.append(dry)
    sending = {sha for c in json.loads(dry.stdout)["caches"] for sha, _, _ in c["to_upload"]}
    assert _sha(root / "cfg.txt") not in sending
    outputs.append(process(archive_project, "archive", "--all", env=env))
    for value in (token, key):
        _nowhere_outside_caches(value, s3_client, s3_bucket)
    outputs.append(process(archive_project, "archive", "--all", "--with-content", env=env))
    for value in (token, key):
        _nowhere_outside_caches(value, s3_client, s3_bucket)
    document = record(s3_client, s3_bucket, flashinfer.id)
    assert document is not None and document["with_content"]
    masked = "/".join("<redacted:AWS_SECRET_ACCESS_KEY>" for _ in key.split("/"))
    assert [(w["path"], w["why"]) for w in document["withheld"]] == [
        ("cfg.txt", "holds the value of secret HF_TOKEN"),
        (f"d_{masked}/f.txt", "its name holds the value of secret AWS_SECRET_ACCESS_KEY"),
    ]

    # Kept, as a file a boot wrote a secret into is, until --drop-withheld.
    outputs.append(process(archive_project, "teardown", flashinfer.id, "--yes", env=env))
    assert "3 files withheld from any archive" in outputs[-1].stdout
    assert (root / "cfg.txt").is_file() and (root / "link1").is_symlink()
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert token not in done.stdout + done.stderr and key not in done.stdout + done.stderr


def test_a_secret_named_in_a_cache_between_two_boots_is_masked_in_the_mark_of_damage(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    # The check of a warm cache before its mount sees a name planted behind lifecycle's back:
    # what it records of it (the ledger's mark, the boot's output) holds the name masked.
    token, env, outputs, flashinfer = _booted(archive_project, "with-token")
    (Path(flashinfer.host_path) / f"planted-{token}.so").write_bytes(b"\0" * 64)
    again = ("boot", "demo/0.2", "--profile", "with-token", "--json")
    outputs.append(process(archive_project, *again, env=env))
    [passed] = json.loads(outputs[-1].stdout)["passed_over"]
    assert (passed["cache_id"], passed["added"]) == (
        flashinfer.id,
        ["planted-<redacted:HF_TOKEN>.so"],
    )
    outputs.append(process(archive_project, "archive", "--all", env=env))
    for done in outputs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert token not in done.stdout + done.stderr
    _nowhere_outside_caches(token, s3_client, s3_bucket)


def _booted(
    project: Path, profile: str, token: str = ""
) -> tuple[str, dict[str, str], list[subprocess.CompletedProcess[str]], CacheRecord]:
    """A token (by default a fresh one), the environment giving it, the boot of `profile` with
    it (its process, in a list later steps add to) and the FlashInfer cache it used."""
    token = token or f"q{secrets.token_hex(20)}"
    env = {"HF_TOKEN": token}
    outputs = [process(project, "boot", "demo/0.2", "--profile", profile, env=env)]
    flashinfer = next(c for c in caches().values() if c.cache_name == "flashinfer")
    return token, env, outputs, flashinfer


def _nowhere_outside_caches(token: str, s3_client: Any, bucket: str) -> None:
    """Not in any S3 object's key or bytes, nor in the name or bytes of any file of the home
    outside its caches (the engine's own files)."""
    needle = token.encode()
    for key, body in _objects(s3_client, bucket):
        assert needle not in key.encode() and needle not in body, key
    for path in home().rglob("*"):
        if not path.is_relative_to(home() / "caches"):
            assert needle not in str(path).encode(), path
            assert not path.is_file() or needle not in path.read_bytes(), path


def test_a_result_given_a_secret_is_refused_and_the_secret_goes_nowhere(
    archive_project: Path, s3_client: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """A result is kept and archived as given: a note pasted from a log, a metric, a
    benchmark's JSON holding the token's value reached S3 verbatim. Refused at its flag (exit
    2), naming the secret and where; no byte of it is kept or sent."""
    token = f"q{secrets.token_hex(20)}"
    env = {"HF_TOKEN": token}
    booted = process(archive_project, "boot", "demo/0.2", "--json", env=env)
    assert booted.returncode == 0, booted.stderr
    boot_id = json.loads(booted.stdout)["id"]
    document = tmp_path / "bench.json"
    document.write_text(json.dumps({"metrics": {"tps": 1.0}, "env": {"auth": f"Bearer {token}"}}))
    given = {
        "--note": ["--note", f"curl -H 'x-token: {token}' failed"],
        "--metric token": ["--metric", f"token={token}"],
        f"{document}": ["--file", str(document)],
    }
    for where, flags in given.items():
        add = ["result", "add", boot_id, "--name", "leak", "--status", "pass", *flags]
        refused = process(archive_project, *add, env=env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"{where}: holds the value of secret HF_TOKEN" in refused.stderr, refused.stderr
        assert token not in refused.stdout + refused.stderr
    clean = process(archive_project, "result", "add", boot_id, "--name", "ok", "--status",
                    "pass", "--note", "fine", env=env)  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    needle = token.encode()
    for key, body in _objects(s3_client, s3_bucket):
        assert needle not in body, key
    _nowhere_in_home(needle)


def test_a_secret_written_into_the_manifest_or_a_patch_is_refused_at_build_and_boot(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    """The image holds the patches as written (a pushed one is anyone's who can pull it), and a
    boot keeps its manifest and patches, which every archive carries: a command line pasted
    into a tuned value's `method`, or a token in a patch's header, reached S3 in the boot's
    record. Refused at the file (exit 2): by `build`, and by a boot of an image built before
    the value was a secret, before anything is kept."""
    token = f"q{secrets.token_hex(20)}"
    env = {"HF_TOKEN": token}
    manifest = archive_project / "manifests/demo/0.2/manifest.yaml"
    patch = archive_project / "manifests/demo/0.2/patches/kernel-mix.patch"
    clean_manifest, clean_patch = manifest.read_text(), patch.read_text()
    pasted = f"method: >-\n      measured as HF_TOKEN={token} vllm serve,\n"
    in_manifest = clean_manifest.replace("method: >-\n", pasted, 1)
    in_patch = f"From: ci <ci@example.com>\nX-Token: {token}\n\n{clean_patch}"
    edits = [(manifest, clean_manifest, in_manifest), (patch, clean_patch, in_patch)]
    for file, undo, text in edits:
        file.write_text(text)
        build = process(archive_project, "build", "demo/0.2", env=env)
        assert build.returncode == 2, build.stdout + build.stderr
        assert f"{file}: holds the value of secret HF_TOKEN" in build.stderr, build.stderr
        built = process(archive_project, "build", "demo/0.2")  # no secret by that value yet
        assert built.returncode == 0, built.stderr  # (`patch` skips a patch's header)
        boot = process(archive_project, "boot", "demo/0.2", "--profile", "with-token", env=env)
        assert boot.returncode == 2, boot.stdout + boot.stderr
        assert f"{file}: holds the value of secret HF_TOKEN" in boot.stderr, boot.stderr
        for done in (build, boot):
            assert token not in done.stdout + done.stderr
        file.write_text(undo)
    assert not caches()  # refused before any cache dir was made
    needle = token.encode()
    _nowhere_in_home(needle)


def test_a_record_holding_a_secret_known_since_its_boot_is_never_sent(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    """What a boot kept was checked for the secrets known then; a value that became one since
    (set on the host after the boot, or a boot by an earlier lifecycle) is found in the record
    at the archive, which sends nothing of that cache and names where the value is."""
    token = f"q{secrets.token_hex(20)}"
    manifest = archive_project / "manifests/demo/0.2/manifest.yaml"
    text = manifest.read_text().replace("method: >-\n", f"method: >-\n      run {token},\n", 1)
    manifest.write_text(text)
    assert process(archive_project, "build", "demo/0.2").returncode == 0
    booted = process(archive_project, "boot", "demo/0.2")  # the value is no secret yet
    assert booted.returncode == 0, booted.stderr
    env = {"HF_TOKEN": token}
    refused = process(archive_project, "archive", "--all", env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "its manifest holds the value of secret HF_TOKEN" in said, said
    assert "nothing of this cache is sent" in said and token not in said
    listed = s3_client.list_objects_v2(Bucket=s3_bucket).get("Contents", [])
    needle = token.encode()
    for item in listed:
        body = s3_client.get_object(Bucket=s3_bucket, Key=item["Key"])["Body"].read()
        assert needle not in body, item["Key"]
    assert all(c.state == "live" for c in caches().values())  # kept: not archived
    # No secret by that value on the host (rotated): the record is the boot's as it was.
    assert process(archive_project, "archive", "--all").returncode == 0


def test_a_result_holding_a_secret_known_since_it_was_added_is_never_sent(
    archive_project: Path, s3_client: Any, s3_bucket: str
) -> None:
    """`result add` checks a result for the secrets known then; one added with no archive set
    goes with a later `archive`, by when its value may be a secret. Its record is refused there,
    naming the result and where the value is; the caches' own archive goes on."""
    token = f"q{secrets.token_hex(20)}"
    booted = process(archive_project, "boot", "demo/0.2", "--json")
    assert booted.returncode == 0, booted.stderr
    boot_id = json.loads(booted.stdout)["id"]
    unset = {"LIFECYCLE_ARCHIVE": ""}  # recorded only: archived by the next `archive`
    add = ["result", "add", boot_id, "--name", "n", "--status", "pass", "--note", f"ran {token}"]
    added = process(archive_project, *add, env=unset)
    assert added.returncode == 0, added.stdout + added.stderr
    refused = process(archive_project, "archive", "--all", env={"HF_TOKEN": token})
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1, said
    assert f"result {_result_id()}: its note holds the value of secret HF_TOKEN" in said, said
    assert token not in said
    needle = token.encode()
    for key, body in _objects(s3_client, s3_bucket):
        assert needle not in body, key
    assert all(c.state == "archived" for c in caches().values())  # they carry no secret
    # No secret by that value on the host (rotated): the result goes as it was given.
    assert process(archive_project, "archive", "--all").returncode == 0
    assert any(needle in body for _, body in _objects(s3_client, s3_bucket))


def _nowhere_in_home(needle: bytes) -> None:
    for path in home().rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), path


def _result_id() -> str:
    import sqlite3

    conn = sqlite3.connect(home() / "ledger.sqlite3")
    try:
        return str(conn.execute("SELECT id FROM results").fetchone()[0])
    finally:
        conn.close()


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _created_since(docker_client: Any, started: int) -> list[Any]:
    """Every container on the host created since `started` (unix seconds): only those can hold
    this test's fresh token. Read from one listing; inspecting (and reading the logs of) every
    container other tests left running took minutes under `make test`."""
    listed = docker_client.api.containers(all=True)
    fresh = [c["Id"] for c in listed if c["Created"] >= started - 1]
    found = []
    for container_id in fresh:
        with contextlib.suppress(NotFound):
            found.append(docker_client.containers.get(container_id))
    return found


def _objects(s3_client: Any, bucket: str) -> list[tuple[str, bytes]]:
    found = []
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = s3_client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            found.append((item["Key"], body))
    assert found
    return found


def test_a_secret_passed_by_a_name_no_credential_has_is_masked_in_what_lifecycle_prints(
    tmp_path: Path, demo_images: None
) -> None:
    """A profile's secret may be named anything (`LICENSE_SERIAL`): its value was masked in the
    engine's output and the ledger, but not in the one line an error prints, which named a
    failing hook's stderr echoing it (a CI job keeps that line in its log)."""
    from tests.services import _demo_root

    serial = f"q{secrets.token_hex(16)}"
    profile = (
        "  serial:\n    command: [python3, -m, demollm.serve]\n    secrets: [LICENSE_SERIAL]\n"
    )
    project = _demo_root(tmp_path, profile + "    network: none\n")
    hook = project / "hooks" / "checks-license"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text('#!/bin/sh\necho "licence server refused serial $LICENSE_SERIAL" >&2\nexit 1\n')
    hook.chmod(0o755)
    env = {"LICENSE_SERIAL": serial}
    refused = process(project, "boot", "demo/0.2", "--profile", "serial", "--hook",
                      "checks-license", env=env)  # fmt: skip
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "licence server refused serial" in said, said
    assert serial not in said
    _nowhere_in_home(serial.encode())
