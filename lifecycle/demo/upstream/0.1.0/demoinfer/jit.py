"""Build small C kernels into `$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<ver>/<arch>/`.

A module is compiled once per workspace; later boots load the `.so` with ctypes. Outputs are
written under a temporary name and renamed, so a crash never leaves a truncated `.so` behind.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from demoinfer import __version__

MIX_KERNEL = """\
/* A checksum over n steps; DEMO_MIX is fixed at JIT time, like a FlashInfer template. */
long demo_kernel(long n)
{
    long acc = 1;
    for (long i = 0; i < n; i++)
        acc = (acc * DEMO_MIX + i) % 1000000007L;
    return acc;
}
"""

logger = logging.getLogger("demoinfer.jit")


@dataclass(frozen=True)
class JitSpec:
    """One JIT module; the name encodes its parameters, as FlashInfer's module URIs do."""

    name: str
    source: str
    defines: dict[str, int] = field(default_factory=dict)


def gen_mix_module(mix: int) -> JitSpec:
    """The mix kernel specialised for one constant."""
    return JitSpec(f"demo_mix_{mix}", MIX_KERNEL, {"DEMO_MIX": mix})


def workspace_dir() -> Path:
    """The versioned, per-arch JIT workspace."""
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or str(Path.home())
    arch = os.environ.get("DEMOINFER_ARCH", "cpu")
    return Path(base) / ".cache" / "flashinfer" / __version__ / arch


def _setup_logging(workspace: Path) -> None:
    if logger.handlers:
        return
    workspace.mkdir(parents=True, exist_ok=True)
    formatter = logging.Formatter("%(asctime)s - %(levelname)s - %(name)s: %(message)s")
    for handler in (
        logging.StreamHandler(sys.stdout),
        logging.FileHandler(workspace / "flashinfer_jit.log"),
    ):
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def find_compiler() -> str:
    """tcc if present (fast), else gcc or cc."""
    for name in ("tcc", "gcc", "cc"):
        if found := shutil.which(name):
            return found
    raise RuntimeError("no C compiler found (tried tcc, gcc, cc)")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")


def _compile_to(final: Path, command: list[str]) -> None:
    """Run a compiler writing to a temp name (the last argument), then rename into place."""
    temp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    _run([*command, str(temp)])
    temp.replace(final)


def _ninja_hash(command: str) -> str:
    return format(int.from_bytes(hashlib.sha256(command.encode()).digest()[:8], "big"), "x")


def _build(spec: JitSpec, ops: Path) -> None:
    ops.mkdir(parents=True, exist_ok=True)
    source = ops / f"{spec.name}.c"
    source.write_text(spec.source)
    cc = find_compiler()
    cflags = ["-fPIC", "-O2", *(f"-D{key}={value}" for key, value in spec.defines.items())]
    obj, lib = ops / f"{spec.name}.o", ops / f"{spec.name}.so"
    (ops / "build.ninja").write_text(
        "ninja_required_version = 1.3\n"
        f"cc = {cc}\ncflags = {' '.join(cflags)}\n\n"
        "rule compile\n  command = $cc $cflags -c $in -o $out\n\n"
        "rule link\n  command = $cc -shared $in -o $out\n\n"
        f"build {obj.name}: compile {source}\nbuild {lib.name}: link {obj.name}\n"
        f"default {lib.name}\n"
    )
    steps = [
        (obj, [cc, *cflags, "-c", str(source), "-o"]),
        (lib, [cc, "-shared", str(obj), "-o"]),
    ]
    log_path = ops / ".ninja_log"
    entries = [] if log_path.exists() else ["# ninja log v5"]
    started = time.monotonic()
    for output, command in steps:
        begin = int((time.monotonic() - started) * 1000)
        _compile_to(output, command)
        end = int((time.monotonic() - started) * 1000)
        mtime = output.stat().st_mtime_ns
        entries.append(f"{begin}\t{end}\t{mtime}\t{output.name}\t{_ninja_hash(' '.join(command))}")
    with log_path.open("a") as log:
        log.write("\n".join(entries) + "\n")


def build_and_load(spec: JitSpec) -> ctypes.CDLL:
    """Load the module's `.so`, building it first if this workspace has none."""
    workspace = workspace_dir()
    _setup_logging(workspace)
    ops = workspace / "cached_ops" / spec.name
    lib_path = ops / f"{spec.name}.so"
    if lib_path.exists():
        logger.info("Loading JIT ops: %s (prebuilt %s)", spec.name, lib_path)
    else:
        logger.info(
            "Building JIT module %s; this can take several minutes on first use.", spec.name
        )
        started = time.monotonic()
        _build(spec, ops)
        logger.info(
            "Finished building JIT module %s in %.2f s", spec.name, time.monotonic() - started
        )
    lib = ctypes.CDLL(str(lib_path))
    lib.demo_kernel.restype = ctypes.c_long
    lib.demo_kernel.argtypes = [ctypes.c_long]
    return lib
