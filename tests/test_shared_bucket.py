"""Two homes on one real bucket, each attacking what the other relies on: objects another host
wrote that are named by their bytes and still lie, and a pin racing another host's gc."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle.archive import packs
from lifecycle.fingerprint import scan
from tests.archive_support import keys
from tests.night_support import wait_for
from tests.services import _GROWS, demo_copy, run_lifecycle
from tests.trust_support import PREFIX, boot, caches, cli, process, start

pytestmark = [pytest.mark.docker, pytest.mark.s3]


@pytest.fixture
def project(
    tmp_path: Path, demo_images: None, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The demo, demo/0.2 built with the `grows` profile, host A archiving to s3://BUCKET/test."""
    root = demo_copy(tmp_path / "project")
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(child.read_text() + "profiles:\n" + _GROWS)
    built = run_lifecycle(root, "build", "demo/0.2")
    assert built.exit_code == 0, built.output
    monkeypatch.setenv("LIFECYCLE_ARCHIVE", f"s3://{s3_bucket}/{PREFIX}")
    monkeypatch.chdir(root)
    return root


def _json(project: Path, *args: str, env: dict[str, str | None] | None = None) -> Any:
    result = cli(project, *args, "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _lying_pack(client: Any, bucket: str, cache_dir: Path) -> str:
    """What another host could write: a pack named by the sha256 of its bytes, stored with that
    checksum, whose index claims every file of `cache_dir` at offsets holding other bytes."""
    laid, body = [], b""
    for path in sorted(p for p in cache_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        laid.append((hashlib.sha256(data).hexdigest(), len(body), len(data)))
        body += bytes(byte ^ 0xFF for byte in data)
    body += packs.tail(laid)
    digest = hashlib.sha256(body)
    key = f"{PREFIX}/packs/sha256/{digest.hexdigest()[:2]}/{digest.hexdigest()}"
    checksum = base64.b64encode(digest.digest()).decode()
    client.put_object(Bucket=bucket, Key=key, Body=body, ChecksumSHA256=checksum)
    return key


def test_a_pack_whose_index_lies_is_never_relied_on_and_the_cache_comes_back_elsewhere(
    project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    booted = boot(project, "--cold")
    [triton] = [u["cache_id"] for u in booted["caches"] if u["cache_id"].startswith("triton-")]
    lying = _lying_pack(s3_client, s3_bucket, Path(caches()[triton].host_path))
    tree = scan(Path(caches()[triton].host_path)).tree_digest

    _json(project, "archive", "--all", "--with-content")  # host A
    assert cli(project, "teardown", "--yes").exit_code == 0
    # Host B restores the tree A archived: every file from the archive, each checked.
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    restored = cli(project, "restore", f"{triton}@{tree}", env=host_b)
    assert restored.exit_code == 0, restored.output
    assert scan(tmp_path / f"host-b/caches/{triton}").tree_digest == tree
    # The lying pack is not lifecycle's to delete: its bytes are the ones its name says.
    assert s3_client.head_object(Bucket=s3_bucket, Key=lying)["ContentLength"] > 0


def test_a_pin_made_while_another_hosts_gc_deletes_says_so_instead_of_pinned(
    project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    # Host A records a result; host B boots on from A's caches, archives a newer version of
    # each, then runs a routine gc that collects A's result. A pins it after B's gc took its
    # last look, before it deletes: the pin cannot keep it then, and must not say it did.
    booted = boot(project, "--cold")
    _json(project, "archive", "--all", "--with-content")
    result = _json(project, "result", "add", booted["id"], "--name", "n0", "--status", "pass")
    host_b = {"LIFECYCLE_HOME": str(tmp_path / "host-b")}
    assert cli(project, "restore", "--best", "demo/0.2", env=host_b).exit_code == 0
    _json(project, "boot", "demo/0.2", "--profile", "grows", env=host_b)
    _json(project, "archive", "--all", "--with-content", env=host_b)
    gc = start(
        project, "gc", "--remote", "--keep-last", "1", "--older-than", "0s", "--grace", "0s",
        "--yes", env={**host_b, "LIFECYCLE_TEST_DELAY": "gc-looked=8"},
    )  # fmt: skip
    # gc's record is written after its last look, just before it deletes.
    wait_for("gc's record", lambda: keys(s3_client, s3_bucket, f"{PREFIX}/gc/") != [], 30)
    pinned = process(project, "pin", result["id"])
    _, err = gc.communicate(timeout=60)
    assert gc.returncode == 0, err
    url = f"s3://{s3_bucket}/{PREFIX}"
    assert _json(project, "results", "--from", url)["results"] == []  # it went all the same
    assert pinned.returncode == 1, pinned.stdout + pinned.stderr
    assert "a gc at this location may be removing" in pinned.stderr, pinned.stderr
    assert "Traceback" not in pinned.stderr and "pinned for the team" not in pinned.stdout
    # This host's caches behind the result may be the last of it: pinned all the same.
    behind = {u["cache_id"] for u in booted["caches"]}
    here = pinned.stderr.partition("pinned on this host: ")[2].strip()
    assert set(here.split(", ")) == behind, pinned.stderr
    listed = _json(project, "caches")["caches"]
    assert {c["id"] for c in listed if f"result {result['id']}" in c["pins"]} == behind
