"""A boot whose pre-boot hook, or whose acceptance command, floods its output: lifecycle's peak
memory, what the boot and its result say, whether the secret is anywhere in lifecycle's home.

A hook stuck in a loop printing, or an acceptance printing without end, takes lifecycle's
memory with it unless what is kept of it is bounded; a night runs many in one process. One
real boot of demo/0.2 (bench/boot_flood.py's scratch project and child process): with `--what
hook`, the hook `floods` prints `--mb` MiB of one warning line holding the boot's secret
(HF_TOKEN, passed by name) at pre-boot, then exits 0; with `--what acceptance`, the profile's
acceptance command prints them on stdout and exits 0.

    python3 bench/hook_flood.py --mb 200 --what hook --json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.boot_flood import SECRET, WARNING, lifecycle, project

WHAT = ("hook", "acceptance")


def flood(mib: int) -> str:
    """A shell command printing `mib` MiB of the warning, the secret's value in each line."""
    return f'yes "{WARNING}" | head -c {mib * 1024 * 1024}'


def flooding_project(root: Path, mib: int) -> Path:
    """The demo manifests, a hook `floods` (at pre-boot), a profile `hooked` to attach it to
    and a profile `floods` whose acceptance command floods (boot_flood's `flood`, unused)."""
    project(root, 1)
    hook = root / "hooks/floods"
    hook.write_text(f'#!/bin/sh\n[ "$1" = pre-boot ] && {flood(mib)}\nexit 0\n')
    hook.chmod(0o755)
    child = root / "manifests/demo/0.2/manifest.yaml"
    child.write_text(
        child.read_text() + "  hooked:\n    command: [python3, -m, demollm.serve]\n"
        "    secrets: [HF_TOKEN]\n    network: none\n"
        "  floods:\n    command: [python3, -m, demollm.serve]\n"
        "    secrets: [HF_TOKEN]\n    network: none\n"
        f"    acceptance:\n      command: [sh, -c, '{flood(mib)}']\n      name: floods\n"
    )
    return root


def measure(mib: int, what: str) -> dict[str, Any]:
    """One boot with a flooding hook or acceptance, measured."""
    with tempfile.TemporaryDirectory(prefix="hookflood-", dir="/var/tmp") as scratch:
        root, home = flooding_project(Path(scratch) / "project", mib), Path(scratch) / "home"
        built, _ = lifecycle(root, home, "build", "demo/0.2")
        assert built.returncode == 0, built.stdout
        args = ["--profile", "hooked", "--hook", "floods"] if what == "hook" else []
        started = time.monotonic()
        booted, peak_kib = lifecycle(
            root, home, "boot", "demo/0.2", "--json", *(args or ["--profile", "floods"])
        )
        wall = time.monotonic() - started
        report = json.loads(booted.stdout)
        results, _ = lifecycle(root, home, "results", "--json")
        return {
            "what": what,
            "flood_mib": mib,
            "exit_code": booted.returncode,
            "outcome": report.get("outcome"),
            "results": [
                {key: row.get(key) for key in ("status", "note", "document")}
                for row in json.loads(results.stdout).get("results", [])
            ],
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "wall_s": round(wall, 1),
            "secret_in_home": any(
                SECRET.encode() in path.read_bytes() for path in home.rglob("*") if path.is_file()
            ),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="MiB the hook or acceptance prints")
    parser.add_argument("--what", choices=WHAT, default="hook")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.mb, args.what)
    print(json.dumps(result, indent=1) if args.json else result)


if __name__ == "__main__":
    main()
