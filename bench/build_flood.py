"""A build whose RUN step floods its output: lifecycle's peak memory, the log it keeps, the wall.

A Dockerfile step can print without end: a compile printing every command, a progress bar
redrawn with `\\r` and never a newline (one line of hundreds of MiB). demo/0.2 is built on a
base image of its own, the demo engine with an ONBUILD RUN that prints `--mb` MiB of lines,
then one line of `--line-mb` MiB with no newline (with `--fail`: the lines a failing in-image
helper prints, halfway through the flood, and an exit 1 after it), so the flood runs in
`lifecycle build`'s own Dockerfile, at its FROM. The build runs as a process of its own
(`python -m lifecycle build`), its peak RSS read by the small process that started it
(bench/boot_flood.py's `_WAIT_FOR_IT`); the build's record is read from the ledger and its kept
log measured. A scratch LIFECYCLE_HOME and project, removed afterwards, as are the base image
and what was built on it.

    python3 bench/build_flood.py --mb 512 --line-mb 256 --json
"""

from __future__ import annotations

import argparse
import io
import json
import secrets
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.boot_flood import lifecycle

REPO = Path(__file__).resolve().parents[1]
ENGINE = "lifecycle-demo/engine:v0.2.0"  # demo/0.2's base image
LINE = "building kernel 0042 of 9999: nvcc -O3 -arch=sm_90 -c csrc/attention/paged.cu"
# What lifecycle's in-image helpers print as they fail (lifecycle.build.engine.FAIL_MARKERS).
FAILURE = (
    "lifecycle: PIN MISMATCH: demoinfer is 0.1.0, the manifest pins 0.2.0",
    "lifecycle:   demollm 0.2.0 requires demoinfer==0.2.0",
)


def flood(mib: int, line_mib: int, *, fail: bool) -> str:
    """A shell command printing `mib` MiB of LINE, then one line of `line_mib` MiB and no
    newline; failing, the failure's lines halfway through, and exit 1 at the end."""
    half = mib * 1024 * 1024 // 2
    lines = f'yes "{LINE}" | head -c {half}; echo'
    failed = "".join(f'; echo "{line}"' for line in FAILURE) if fail else ""
    long = f"head -c {line_mib * 1024 * 1024} /dev/zero | tr '\\0' '#'"
    return f"{lines}{failed}; {lines}; {long}" + ("; exit 1" if fail else "")


def flooding_base(client: Any, tag: str, command: str) -> None:
    """The demo engine with `command` as an ONBUILD RUN: it runs in any build FROM `tag`."""
    from lifecycle.demo.images import add_file

    dockerfile = f"FROM {ENGINE}\nONBUILD RUN {json.dumps(['sh', '-c', command])}\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        add_file(tar, "Dockerfile", dockerfile.encode(), int(time.time()))
    buffer.seek(0)
    client.images.build(fileobj=buffer, custom_context=True, tag=tag, rm=True, pull=False)


def project(root: Path, base: str) -> Path:
    """The demo manifests, demo/0.2 built on `base`."""
    for version in ("0.1", "0.2"):
        shutil.copytree(REPO / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    (root / "hooks").mkdir()
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(child.read_text().replace(f"base_image: {ENGINE}", f"base_image: {base}"))
    return root


def measure(mib: int, line_mib: int, *, fail: bool = False) -> dict[str, Any]:
    """One flooding build, measured."""
    import docker

    from lifecycle.ledger import Ledger
    from lifecycle.ledger.builds import all_builds

    client = docker.from_env()
    base = f"lifecycle-bench/flood-base:{secrets.token_hex(4)}"
    flooding_base(client, base, flood(mib, line_mib, fail=fail))
    try:
        with tempfile.TemporaryDirectory(prefix="buildflood-", dir="/var/tmp") as scratch:
            root, home = project(Path(scratch) / "project", base), Path(scratch) / "home"
            started = time.monotonic()
            built, peak_kib = lifecycle(root, home, "build", "demo/0.2")
            wall = time.monotonic() - started
            ledger = Ledger.open(home)
            [record] = all_builds(ledger)
            ledger.close()
            kept = Path(record.log_path).read_text() if record.log_path else ""
    finally:
        for image in client.api.images(filters={"label": f"lifecycle.base-image={base}"}):
            client.images.remove(image["Id"], force=True)
        client.images.remove(base, force=True)
    lines = kept.splitlines()
    return {
        "flood_mib": mib,
        "line_mib": line_mib,
        "exit_code": built.returncode,
        "outcome": record.outcome,
        "error": record.error,
        "tag": record.tag,
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "wall_s": round(wall, 1),
        "kept_log_bytes": len(kept.encode()),
        "first_line_kept": lines[0] if lines else "",
        "last_line_kept": lines[-1] if lines else "",
        "cut_markers": [line for line in lines if line.startswith("[lifecycle: log cut:")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="MiB of lines the RUN step prints")
    parser.add_argument("--line-mb", type=int, default=256, help="MiB of its last line")
    parser.add_argument("--fail", action="store_true", help="the step fails as a helper does")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.mb, args.line_mb, fail=args.fail)
    print(json.dumps(result, indent=1) if args.json else result)


if __name__ == "__main__":
    main()
