"""Runs inside the image being built (stdlib only): install, then check, the manifest's pins.

`install` installs with pip only the pins the base image does not already satisfy;
`check` fails the build unless every installed version equals its pin.
"""

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PINS = json.loads((Path(__file__).parent / "pins.json").read_text())


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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
