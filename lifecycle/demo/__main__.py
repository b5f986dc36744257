"""`python3 -m lifecycle.demo [--standin]`: make the demo upstream repo and its offline images;
with `--standin`, the real-JIT stand-in engine image too (lifecycle/demo/standin.py)."""

from __future__ import annotations

import sys

from lifecycle.demo.setup import ensure_demo


def main(argv: list[str] | None = None) -> int:
    """Run `ensure_demo` (and the stand-in's) against the docker engine of the environment."""
    import docker

    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--standin"]):
        print("usage: python3 -m lifecycle.demo [--standin]", file=sys.stderr)
        return 2
    client = docker.from_env()
    try:
        ensure_demo(client, print)
        if args:
            from lifecycle.demo.images import default_cache_dir
            from lifecycle.demo.standin import default_wheel_dir, ensure_standin_image

            print(ensure_standin_image(client, default_cache_dir(), default_wheel_dir(), print))
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
