"""Offline images for the demo engine: a Debian rootfs imported as a base, one image per release.

Everything is cached per machine (the rootfs tarball on disk, images in the docker engine) and
rebuilt only when what it was made from changes (package list, upstream commit).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

from lifecycle import proc
from lifecycle.demo.upstream import git

SUITE = "bookworm"
# `python3` (not -minimal) for ctypes and json; tcc + libc6-dev to compile and link a `.so`.
PACKAGES = ("python3", "patch", "tcc", "libc6-dev")
BASE_IMAGE = f"lifecycle-demo/base:{SUITE}"
ENGINE_REPOSITORY = "lifecycle-demo/engine"
SITE_PACKAGES = "/usr/lib/python3/dist-packages"
ROOTFS_LABEL = "org.lifecycle.demo.rootfs"
COMMIT_LABEL = "org.lifecycle.demo.upstream-commit"
BASE_LABEL = "org.lifecycle.demo.base-image"
VERSION_LABEL = "org.opencontainers.image.version"
_DISTRIBUTIONS = {"demollm": "demoinfer", "demoinfer": None}


def default_cache_dir() -> Path:
    """`LIFECYCLE_DEMO_CACHE`, else `/var/tmp/lifecycle-demo`: per machine, outside HOME."""
    return Path(os.environ.get("LIFECYCLE_DEMO_CACHE") or "/var/tmp/lifecycle-demo")


def engine_image(version: str) -> str:
    """The tag of the released demo engine `version`, playing `vllm/vllm-openai:vX`."""
    return f"{ENGINE_REPOSITORY}:v{version}"


def _rootfs_name(packages: tuple[str, ...] = PACKAGES) -> str:
    key = hashlib.sha256(" ".join((SUITE, *packages)).encode()).hexdigest()[:12]
    return f"rootfs-{SUITE}-{key}.tar"


def ensure_rootfs(cache_dir: Path, packages: tuple[str, ...] = PACKAGES) -> Path:
    """The Debian rootfs tarball with `packages`, made once with mmdebstrap (to a temp name,
    then renamed)."""
    tarball = cache_dir / _rootfs_name(packages)
    if tarball.is_file():
        return tarball
    cache_dir.mkdir(parents=True, exist_ok=True)
    temp = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
    # mmdebstrap guesses the output format from the name: say tar, or it makes a directory.
    command = [
        "mmdebstrap", "--quiet", "--variant=essential", "--format=tar",
        f"--include={','.join(packages)}", SUITE, str(temp),
    ]  # fmt: skip
    try:
        proc.run(command)
    except proc.CommandFailed:
        temp.unlink(missing_ok=True)
        raise
    temp.replace(tarball)
    return tarball


def image_label(client: Any, tag: str, label: str) -> str | None:
    """A label of the local image `tag`, "" if unlabelled, None if there is no such image."""
    import docker.errors

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels: dict[str, str] = image.labels or {}
    return labels.get(label, "")


def ensure_base_image(
    client: Any, cache_dir: Path, packages: tuple[str, ...] = PACKAGES, image: str = BASE_IMAGE
) -> str:
    """`image` (`lifecycle-demo/base:bookworm`), imported from the rootfs of `packages` unless
    already there."""
    name = _rootfs_name(packages)
    if image_label(client, image, ROOTFS_LABEL) == name:
        return image
    tarball = ensure_rootfs(cache_dir, packages)
    repository, tag = image.split(":")
    changes = [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        f"LABEL {ROOTFS_LABEL}={name}",
    ]
    client.api.import_image_from_file(str(tarball), repository=repository, tag=tag, changes=changes)
    return image


def add_file(context: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    """Add `data` to a build context as the file `name` (mode 0644)."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    context.addfile(info, io.BytesIO(data))


def _metadata(name: str, version: str) -> bytes:
    requires = _DISTRIBUTIONS[name]
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires:
        lines.append(f"Requires-Dist: {requires}=={version}")
    return ("\n".join(lines) + "\n").encode()


def _build_context(upstream_repo: Path, version: str, labels: dict[str, str]) -> io.BytesIO:
    """Dockerfile + the release's packages (from `git archive`) + minimal dist-info."""
    # bytes, not text: proc.run decodes, and a tar must arrive untouched
    archive = subprocess.run(
        ["git", f"--git-dir={upstream_repo}", "archive", "--format=tar", f"v{version}"],
        check=True,
        capture_output=True,
    ).stdout
    mtime = int(time.time())
    buffer = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive)) as source,
        tarfile.open(fileobj=buffer, mode="w") as context,
    ):
        for member in source.getmembers():
            if member.name.split("/")[0] in _DISTRIBUTIONS:
                context.addfile(member, source.extractfile(member) if member.isfile() else None)
        copies = []
        for name in _DISTRIBUTIONS:
            info = f"{name}-{version}.dist-info"
            add_file(context, f"{info}/METADATA", _metadata(name, version), mtime)
            add_file(context, f"{info}/INSTALLER", b"lifecycle-demo\n", mtime)
            copies += [f"COPY {name} {SITE_PACKAGES}/{name}", f"COPY {info} {SITE_PACKAGES}/{info}"]
        dockerfile = [
            f"FROM {BASE_IMAGE}",
            *copies,
            "ENV PYTHONUNBUFFERED=1",
            "LABEL " + " ".join(f'{key}="{value}"' for key, value in labels.items()),
            'CMD ["python3", "-m", "demollm.serve"]',
        ]
        add_file(context, "Dockerfile", ("\n".join(dockerfile) + "\n").encode(), mtime)
    buffer.seek(0)
    return buffer


def ensure_engine_image(client: Any, upstream_repo: Path, version: str) -> str:
    """`lifecycle-demo/engine:v<version>`: the release installed on the base image, built once
    per upstream commit and base image."""
    tag = engine_image(version)
    labels = {
        VERSION_LABEL: version,
        COMMIT_LABEL: git(["rev-parse", f"v{version}^{{commit}}"], upstream_repo).strip(),
        BASE_LABEL: client.images.get(BASE_IMAGE).id,
    }
    if all(image_label(client, tag, key) == value for key, value in labels.items()):
        return tag
    context = _build_context(upstream_repo, version, labels)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True)
    return tag
