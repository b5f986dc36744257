"""`lifecycle build` against the real dockerd, on the offline demo engine."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lifecycle.build.engine import find_built
from lifecycle.build.plan import DIGEST_LABEL
from lifecycle.cli import cli
from lifecycle.faults import CRASH_ENV
from lifecycle.ledger import Ledger
from lifecycle.ledger.builds import all_builds, registry_images
from lifecycle.manifest import load_manifest
from lifecycle.manifest.load import manifest_digest, patch_digests
from tests.test_gitbinary import git
from tests.trust_support import process, start

pytestmark = pytest.mark.docker
_DEMO = "demo/0.2/manifest.yaml"


@pytest.fixture
def manifests(
    tmp_path: Path, repo_root: Path, docker_client: Any, demo_images: None
) -> Iterator[Path]:
    """A copy of the demo manifests whose 0.2 has a unique name, so it has never been built."""
    target = tmp_path / "manifests" / "demo"
    shutil.copytree(repo_root / "manifests/demo/0.1", target / "0.1")
    shutil.copytree(repo_root / "manifests/demo/0.2", target / "0.2")
    child = target / "0.2" / "manifest.yaml"
    name = f"demo-test-{secrets.token_hex(4)}"
    child.write_text(child.read_text() + f"name: {name}\n")
    yield tmp_path / "manifests"
    for image in docker_client.images.list(name=f"lifecycle/{name}"):
        docker_client.images.remove(image.id, force=True)


def _build(manifests: Path, *args: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["--manifests", str(manifests), "build", "demo/0.2", *args])
    return result.exit_code, result.stdout, result.stderr, time.monotonic() - started


def test_build_labels_then_up_to_date(manifests: Path, docker_client: Any) -> None:
    loaded = load_manifest(manifests / "demo/0.2/manifest.yaml")
    digest = manifest_digest(loaded)
    by_digest = {"label": f"lifecycle.manifest.digest={digest}"}

    code, out, err, _ = _build(manifests, "--dry-run")
    assert code == 0, err
    assert f"FROM {loaded.manifest.engine.base_image}" in out
    assert docker_client.images.list(filters=by_digest) == []  # a dry run builds nothing

    code, out, err, first = _build(manifests, "--force")  # --force: no layer cache, full log
    assert code == 0, err
    assert "lifecycle: patch applied: patches/kernel-mix.patch" in err  # streamed progress
    tag = re.search(r"built (\S+)", out)
    assert tag, out
    labels = docker_client.images.get(tag[1]).labels  # read back through the API
    assert labels["lifecycle.manifest.digest"] == digest
    for index, (file, sha256) in enumerate(patch_digests(loaded), start=1):
        assert labels[f"lifecycle.patch.{index:02d}.file"] == file
        assert labels[f"lifecycle.patch.{index:02d}.sha256"] == sha256
    assert labels["lifecycle.pin.vllm"] == "0.2.0"
    # All in one LABEL step, not one step (a layer and a container) per label.
    history = [step["CreatedBy"] for step in docker_client.images.get(tag[1]).history()]
    [label_step] = [step for step in history if "lifecycle.manifest.digest" in step]
    assert all(name in label_step for name in labels if name.startswith("lifecycle."))

    code, out, err, second = _build(manifests)
    assert code == 0, err
    assert f"{tag[1]} is up to date" in out
    assert second < first / 3, (first, second)

    builds = all_builds(Ledger.open(Path.home() / "lifecycle"))
    assert [b.outcome for b in builds] == ["built", "up-to-date"]
    assert builds[0].log_path and "pin ok: demollm" in Path(builds[0].log_path).read_text()


def test_an_image_up_to_date_gets_its_tag_back(manifests: Path, docker_client: Any) -> None:
    # An image untagged since it was built (dockerd keeps it untagged while another is built
    # on it) was "up to date" without its tag: `docker images` showed <none>.
    code, out, err, _ = _build(manifests)
    assert code == 0, err
    tag = re.search(r"built (\S+)", out)
    assert tag, out
    image = docker_client.images.get(tag[1])
    image.tag(tag[1] + "-kept")  # so removing the tag only untags
    docker_client.images.remove(tag[1])
    code, out, err, _ = _build(manifests)
    assert code == 0 and f"{tag[1]} is up to date" in out, err
    assert docker_client.images.get(tag[1]).id == image.id
    docker_client.images.remove(tag[1] + "-kept")


def test_built_image_runs_the_patched_engine(manifests: Path, docker_client: Any) -> None:
    code, out, err, _ = _build(manifests)
    assert code == 0, err
    tag = out.split()[1]
    logs = docker_client.containers.run(
        tag, ["python3", "-m", "demollm.serve"], network_mode="none", remove=True, stderr=True
    ).decode()
    assert "demo patch: kernel-mix applied" in logs
    assert "Application startup complete." in logs


def test_a_patch_that_does_not_apply_names_patch_and_hunk(
    manifests: Path, docker_client: Any
) -> None:
    patch = manifests / "demo/0.2/patches/kernel-mix.patch"
    lines = patch.read_text().splitlines(keepends=True)
    context = next(i for i, line in enumerate(lines) if line.startswith(" ") and line.strip())
    lines[context] = " this context line is not in the upstream file\n"
    patch.write_text("".join(lines))
    digest = manifest_digest(load_manifest(manifests / "demo/0.2/manifest.yaml"))

    result = subprocess.run(
        ["lifecycle", "--manifests", str(manifests), "build", "demo/0.2"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 1
    message = result.stderr[result.stderr.index("build of") :]
    assert "PATCH FAILED: patches/kernel-mix.patch" in message
    assert re.search(r"Hunk #\d+ FAILED at \d+", message), message
    assert re.search(r"checking file \S+\.py|patching file \S+\.py", message), message
    assert "Traceback" not in result.stderr
    label = {"label": f"lifecycle.manifest.digest={digest}"}
    assert docker_client.images.list(filters=label) == []  # no image tagged
    assert [b.outcome for b in all_builds(Ledger.open(Path.home() / "lifecycle"))] == ["failed"]


def _binary_patch(tmp_path: Path, base: dict[str, bytes], patched: dict[str, bytes]) -> bytes:
    """`git diff --binary` from files `base` to files `patched`, as `lifecycle port` writes it."""
    repo = tmp_path / "patch-source"
    repo.mkdir()
    git(repo, "init", "-q")
    for files, gone in ((base, {}), (patched, base)):
        for name in gone:
            (repo / name).unlink()
        for name, data in files.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(data)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    return git(repo, "diff", "--binary", "--src-prefix=a/", "--dst-prefix=b/", "HEAD~1", "HEAD")


def _add_patch(manifests: Path, name: str, patch: bytes) -> None:
    """Append `patch` to demo/0.2's series (after kernel-mix.patch)."""
    (manifests / "demo/0.2/patches" / name).write_bytes(patch)
    manifest = manifests / "demo/0.2/manifest.yaml"
    entry = "    drop_when: never; this is the demo's own patch\n"
    text = manifest.read_text()
    assert entry in text
    manifest.write_text(
        text.replace(entry, f"{entry}  - file: patches/{name}\n    reason: a test's binary file\n")
    )


def test_a_patch_with_binary_files_applies_them_in_the_image(
    manifests: Path, docker_client: Any, tmp_path: Path
) -> None:
    """GNU patch refuses git's binary blocks; the build applies them itself (gitbinary.py),
    the text of the same patch still through patch."""
    kernel = b"\x7fELF\0" + secrets.token_bytes(5000)
    patch = _binary_patch(
        tmp_path, {}, {"kernels/tuned.cubin": kernel, "TUNING.txt": b"tuned on the demo\n"}
    )
    assert b"GIT binary patch" in patch and b"+tuned on the demo" in patch
    _add_patch(manifests, "tuned-kernel.patch", patch)

    code, out, err, _ = _build(manifests)
    assert code == 0, err
    assert "lifecycle: patch applied: patches/tuned-kernel.patch" in err
    read = (
        "import hashlib, pathlib; p = pathlib.Path('/usr/lib/python3/dist-packages/demollm');"
        " print(hashlib.sha256((p / 'kernels/tuned.cubin').read_bytes()).hexdigest());"
        " print((p / 'TUNING.txt').read_text(), end='')"
    )
    logs = docker_client.containers.run(
        out.split()[1], ["python3", "-c", read], network_mode="none", remove=True
    ).decode()
    assert logs == f"{hashlib.sha256(kernel).hexdigest()}\ntuned on the demo\n"


def test_a_binary_block_for_another_file_fails_the_build_by_name(
    manifests: Path, docker_client: Any, tmp_path: Path
) -> None:
    patch = _binary_patch(
        tmp_path, {"kernels/absent.cubin": b"\0old"}, {"kernels/absent.cubin": b"\0new"}
    )
    _add_patch(manifests, "absent-kernel.patch", patch)
    code, _, err, _ = _build(manifests)
    assert code == 1
    assert "PATCH FAILED: patches/absent-kernel.patch" in err
    assert "binary: kernels/absent.cubin: No such file or directory" in err
    assert "Traceback" not in err


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry on a free loopback port, storage in tmp."""
    binary = shutil.which("docker-registry")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("docker-registry is not installed (.ci/setup installs it)")
        pytest.skip("docker-registry is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'registry'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    server = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_push_to_a_registry(manifests: Path, registry: str, docker_client: Any) -> None:
    code, out, err, _ = _build(manifests, "--push", registry)
    assert code == 0, err
    pushed = re.search(r"pushed (\S+)", out)
    assert pushed, out
    repository, _, tag = pushed[1].removeprefix(f"{registry}/").rpartition(":")
    with urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list") as answer:
        assert tag in json.load(answer)["tags"]
    docker_client.images.remove(pushed[1])


def test_a_build_killed_at_any_point_is_recorded_and_the_next_completes(
    manifests: Path, registry: str, docker_client: Any
) -> None:
    """SIGKILL before dockerd is asked, during its build, once it has tagged the image (the
    outcome not recorded yet), and while pushing: each time the next build completes, every
    image of the manifest dockerd holds is one the ledger records, and the tag names the image
    the build reports (and a boot runs)."""
    project, digest = manifests.parent, manifest_digest(load_manifest(manifests / _DEMO))
    home = Path(os.environ["LIFECYCLE_HOME"])
    try:
        assert process(project, "build", "demo/0.2").returncode == 0
        for point in ("build-started", "build-tagged"):
            killed = process(project, "build", "--force", "demo/0.2", env={CRASH_ENV: point})
            assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
            _next_build_completes(project, home, docker_client, digest, point)
        running = start(project, "build", "--force", "demo/0.2")
        assert running.stderr is not None
        for line in running.stderr:  # dockerd's build under way: kill it mid-series
            if "Step 4/" in line:
                running.send_signal(signal.SIGKILL)
                break
        assert running.wait(timeout=60) == -signal.SIGKILL
        _next_build_completes(project, home, docker_client, digest, "during dockerd's build")
        pushing = ("build", "demo/0.2", "--push", registry)
        killed = process(project, *pushing, env={CRASH_ENV: "push-tagged"})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        pushed = process(project, *pushing, "--json")
        assert pushed.returncode == 0, pushed.stderr
        image_id = json.loads(pushed.stdout)["image_id"]
        with _ledger(home) as ledger:
            assert [i.image_id for i in registry_images(ledger, image_id)] == [image_id]
            outcomes = [b.outcome for b in all_builds(ledger)]
        assert outcomes.count("interrupted") == 3 and "running" not in outcomes, outcomes
    finally:
        for image in docker_client.images.list(filters={"label": f"{DIGEST_LABEL}={digest}"}):
            docker_client.images.remove(image.id, force=True)


def _next_build_completes(
    project: Path, home: Path, docker_client: Any, digest: str, point: str
) -> None:
    done = process(project, "build", "demo/0.2", "--json")
    assert done.returncode == 0, (point, done.stderr)
    reported = json.loads(done.stdout)
    assert docker_client.images.get(reported["tag"]).id == reported["image_id"], point
    with _ledger(home) as ledger:
        builds = all_builds(ledger)
        booted = find_built(docker_client, ledger, digest)  # the image a boot runs
    assert booted is not None and booted.id == reported["image_id"], point
    assert builds[-2].outcome == "interrupted", (point, builds[-2])
    assert "running" not in [b.outcome for b in builds], point
    recorded = {b.image_id for b in builds}
    made = docker_client.images.list(filters={"label": f"{DIGEST_LABEL}={digest}"})
    assert {image.id for image in made} <= recorded, (point, "an image only dockerd knows")


@contextmanager
def _ledger(home: Path) -> Iterator[Ledger]:
    ledger = Ledger.open(home)
    try:
        yield ledger
    finally:
        ledger.close()
