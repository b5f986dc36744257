"""Runs inside the image being built (stdlib only): install, then check, the manifest's pins.

`install` installs with pip only the pins the base image does not already satisfy;
`check` fails the build unless every installed version equals its pin, and every entry point
the manifest declares (entry_points.json, when there is one) is found as declared.
"""

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PINS = json.loads((Path(__file__).parent / "pins.json").read_text())
ENTRY_POINTS = Path(__file__).parent / "entry_points.json"


def installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main(mode: str) -> int:
    failed = False
    for dist, pin in PINS.items():
        found = installed(dist)
        if mode == "install" and found != pin:
            print(f"lifecycle: installing {dist}=={pin} (base image has {found})", flush=True)
            cmd = [sys.executable, "-m", "pip", "install", "--no-deps", f"{dist}=={pin}"]
            if subprocess.run(cmd, check=False).returncode != 0:
                print(f"lifecycle: PIN INSTALL FAILED: {dist}=={pin}", flush=True)
                return 1
        elif mode == "check":
            ok = found is not None and found.lower() == pin.lower()
            failed |= not ok
            word = "pin ok" if ok else "PIN MISMATCH"
            print(f"lifecycle: {word}: {dist} pinned {pin}, installed {found}", flush=True)
    if mode == "check" and ENTRY_POINTS.is_file():
        failed |= not entry_points_found(json.loads(ENTRY_POINTS.read_text()))
    return 1 if failed else 0


def entry_points_found(declared: dict[str, dict[str, str]]) -> bool:
    """Each declared entry point, as the engine's loader will look it up."""
    ok = True
    for group, refs in declared.items():
        found = {ep.name: ep.value for ep in metadata.entry_points(group=group)}
        for name, value in refs.items():
            good = found.get(name) == value
            ok &= good
            word = "entry point ok" if good else "ENTRY POINT MISSING"
            print(f"lifecycle: {word}: {group} {name} = {value}", flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
