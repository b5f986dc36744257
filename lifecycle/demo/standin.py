"""The real-JIT stand-in engine: an offline image in which TorchInductor really compiles.

The demo engine's JIT is a few KB of tcc output; on it, every cache looks right. The stand-in
is real where it matters: Debian bookworm with g++ and the Python headers (mmdebstrap →
`docker import`, as the demo's base), the CPU build of torch, and the real vllm and
flashinfer-python wheels installed `--no-deps` (vllm is then not servable, but its pins check,
its plugin loader runs and patches apply to its real sources). Its program
(`in_image/standin_engine.py`) `torch.compile`s a small MLP on CPU, so Inductor writes real
FX-graph, AOTAutograd and C++ kernel caches, and spills what it spills.

Wheels are downloaded once per machine with pip (`/var/tmp/lifecycle-wheels`), the rootfs is
made once per machine (`/var/tmp/lifecycle-demo`), and the image is rebuilt only when one of
them changes. Measured here (2 cores): rootfs 31 s (515 MB), wheels 4 s from a warm index
(548 MB), image 64 to 73 s; 2.3 GB in dockerd, its 504 MB base included.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import tarfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from lifecycle import proc
from lifecycle.demo.images import ROOTFS_LABEL, add_file, ensure_base_image, image_label

# g++ and the Python headers: Inductor compiles C++ kernels that include Python.h; openssl:
# Inductor hashes the preprocessed header it precompiles with `openssl sha512`.
PACKAGES = ("python3", "python3-pip", "python3-dev", "g++", "patch", "openssl")
BASE_IMAGE = "lifecycle-standin/base:bookworm"
IMAGE = "lifecycle-standin/engine:torch2.13"
PYTHON = "3.11"  # bookworm's python3; every wheel below must suit it
SITE_PACKAGES = f"/usr/local/lib/python{PYTHON}/dist-packages"
# Exact pins, so the wheel cache and the image are the same on every machine: torch's own
# requirements (its METADATA), and what `import vllm.plugins` needs beyond them (numpy,
# packaging, regex), so vLLM's own plugin loader runs in the stand-in.
TORCH_WHEELS = (
    "torch==2.13.0+cpu",
    "filelock==4.3.1",
    "typing-extensions==4.16.0",
    "setuptools==84.2.1",
    "sympy==1.14.0",
    "mpmath==1.4.1",
    "networkx==3.6.1",
    "jinja2==3.1.6",
    "markupsafe==3.0.4",
    "fsspec==2026.9.0",
    "numpy==2.4.6",
    "packaging==26.4",
    "regex==2026.11.19",
)
# The production pins of manifests/0.31, so its patch series builds into the stand-in.
ENGINE_WHEELS = ("vllm==0.31.0", "flashinfer-python==0.7.0.post1")
WHEELS = TORCH_WHEELS + ENGINE_WHEELS
WHEELS_LABEL = "org.lifecycle.standin.wheels"
BASE_LABEL = "org.lifecycle.standin.base-image"
ENGINE_LABEL = "org.lifecycle.standin.engine-sha256"
ENGINE_MODULE = "standin_engine.py"
BUILD_TIMEOUT_S = 1800


def default_wheel_dir() -> Path:
    """`LIFECYCLE_WHEEL_CACHE`, else `/var/tmp/lifecycle-wheels`: per machine, outside HOME."""
    return Path(os.environ.get("LIFECYCLE_WHEEL_CACHE") or "/var/tmp/lifecycle-wheels")


def _wheels_key() -> str:
    return hashlib.sha256(" ".join((PYTHON, platform.machine(), *WHEELS)).encode()).hexdigest()[:12]


def ensure_wheels(wheel_dir: Path) -> Path:
    """The pinned wheels for bookworm's Python, downloaded once with pip into a dir named by
    their pins (a temp dir renamed into place, so an interrupted download is never used)."""
    target = wheel_dir / f"wheels-{_wheels_key()}"
    if target.is_dir():
        return target
    wheel_dir.mkdir(parents=True, exist_ok=True)
    temp = wheel_dir / f".{target.name}.{os.getpid()}.tmp"
    # --platform/--python-version: the wheels are for the image's Python, not this one.
    command = [
        "python3", "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", PYTHON, "--implementation", "cp",
        "--platform", f"manylinux_2_28_{platform.machine()}", "--dest", str(temp), *WHEELS,
    ]  # fmt: skip
    try:
        proc.run(command)
        temp.rename(target)
    finally:
        if temp.exists():
            for leftover in temp.iterdir():
                leftover.unlink()
            temp.rmdir()
    return target


def _engine_source() -> bytes:
    return resources.files("lifecycle.demo").joinpath("in_image", ENGINE_MODULE).read_bytes()


def _context(wheels: Path, labels: dict[str, str]) -> io.BytesIO:
    """Two stages: pip installs the wheels into a staging root, and only what it installed is
    copied onto the base, so the wheels (~550 MB) never become a layer of the image."""
    dockerfile = "\n".join(
        [
            f"FROM {BASE_IMAGE} AS install",
            "COPY wheels/ /wheels/",
            "RUN python3 -m pip install --quiet --no-index --no-deps --no-compile"
            " --break-system-packages --root /staging /wheels/*.whl",
            f"FROM {BASE_IMAGE}",
            "COPY --from=install /staging/ /",
            f"COPY {ENGINE_MODULE} {SITE_PACKAGES}/{ENGINE_MODULE}",
            "ENV PYTHONUNBUFFERED=1",
            "LABEL " + " ".join(f'{key}="{value}"' for key, value in labels.items()),
            'CMD ["python3", "-m", "standin_engine"]',
            "",
        ]
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as context:
        for name, data in (("Dockerfile", dockerfile.encode()), (ENGINE_MODULE, _engine_source())):
            add_file(context, name, data, int(time.time()))
        for wheel in sorted(wheels.glob("*.whl")):
            context.add(wheel, f"wheels/{wheel.name}")
    buffer.seek(0)
    return buffer


def ensure_standin_image(
    client: Any, cache_dir: Path, wheel_dir: Path, say: Callable[[str], None] = lambda _: None
) -> str:
    """`lifecycle-standin/engine:torch2.13`: built once per rootfs, wheel set and engine
    program; `say` gets one line per step it had to do."""
    if image_label(client, BASE_IMAGE, ROOTFS_LABEL) is None:
        say("stand-in: making the bookworm rootfs with g++ (mmdebstrap, once per machine)")
    ensure_base_image(client, cache_dir, PACKAGES, BASE_IMAGE)
    labels = {
        WHEELS_LABEL: " ".join(WHEELS),
        BASE_LABEL: client.images.get(BASE_IMAGE).id,
        ENGINE_LABEL: hashlib.sha256(_engine_source()).hexdigest(),
    }
    if all(image_label(client, IMAGE, key) == value for key, value in labels.items()):
        return IMAGE
    say(f"stand-in: pip download {len(WHEELS)} wheels into {wheel_dir} (once per machine)")
    wheels = ensure_wheels(wheel_dir)
    say("stand-in: building the engine image (installs torch, vllm, flashinfer --no-deps)")
    context = _context(wheels, labels)
    # pip installs torch quietly for a minute or more: no client read timeout may cut that.
    client.images.build(
        fileobj=context,
        custom_context=True,
        tag=IMAGE,
        rm=True,
        forcerm=True,
        network_mode="none",
        timeout=BUILD_TIMEOUT_S,
    )
    return IMAGE
