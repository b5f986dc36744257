"""`python3 -m lifecycle.demo`: make the demo upstream repo and its offline images."""

from __future__ import annotations

from lifecycle.demo.setup import ensure_demo


def main() -> int:
    """Run `ensure_demo` against the docker engine of the environment."""
    import docker

    client = docker.from_env()
    try:
        ensure_demo(client, print)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
