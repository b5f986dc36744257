"""Builders for the port tests: a real upstream git repository and a project holding manifests/.

Not a test module (no `test_` prefix, so pytest does not collect it): the port tests import
from it. Every repository is real git in a tmp dir, built commit by commit, so each scenario
is exactly the upstream history it names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from lifecycle.cli import cli

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}

SUBDIR = "pkg"


def git(cwd: Path, *args: str) -> str:
    """Run git without user config; its stdout (it must succeed)."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def serve_py() -> str:
    """The upstream module most scenarios patch: line N is `VALUE_N = N`, but line 20 is the
    line the patches change, `MIX = 31`."""
    body = [f"VALUE_{n:02d} = {n}\n" for n in range(1, 41)]
    body[19] = "MIX = 31\n"
    return "".join(body)


class Upstream:
    """An upstream repository with the package under `pkg/` and release tags `v<version>`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        self.write("pkg/serve.py", serve_py())
        self.write("pkg/other.py", "".join(f"OTHER_{n} = {n}\n" for n in range(1, 31)))
        self.write("pkg/data.bin", bytes(range(256)) * 4)
        self.write("requirements.txt", "fakeinfer==1.0.0\nnumpy>=1\n")
        self.commit("Release 1.0.0")
        self.tag("1.0.0")

    def write(self, rel: str, content: str | bytes) -> None:
        """Write a file of the work tree."""
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)

    def edit(self, rel: str, change: Callable[[str], str]) -> None:
        """Rewrite a text file through `change`."""
        target = self.path / rel
        target.write_text(change(target.read_text()))

    def commit(self, message: str) -> str:
        """Commit everything; the new commit id."""
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.path, "rev-parse", "HEAD").strip()

    def tag(self, version: str) -> None:
        """An annotated release tag at HEAD."""
        git(self.path, "tag", "-a", f"v{version}", "-m", f"release {version}")

    def patch(self, base: str, change: Callable[[Upstream], None]) -> bytes:
        """The package-relative patch `change` makes on `base` (the work tree is restored)."""
        return self.series(base, [change])[0]

    def series(self, base: str, changes: list[Callable[[Upstream], None]]) -> list[bytes]:
        """Patches made one on top of the other from `base`, as a series is written."""
        current = git(self.path, "symbolic-ref", "-q", "--short", "HEAD").strip()
        git(self.path, "checkout", "-q", "--detach", base)
        patches = []
        for change in changes:
            change(self)
            git(self.path, "add", "-A")
            patches.append(
                subprocess.run(
                    ["git", "diff", "--cached", "--binary", "--abbrev=12", f"--relative={SUBDIR}/"],
                    cwd=self.path,
                    env={**os.environ, **GIT_ENV},
                    capture_output=True,
                    check=True,
                ).stdout
            )
            git(self.path, "commit", "-q", "-m", "patch")
        git(self.path, "checkout", "-q", "-f", current)
        return patches

    def mail(
        self, base: str, change: Callable[[Upstream], None], author: str, message: str
    ) -> bytes:
        """The patch `change` makes on `base` as `git format-patch` writes it (diffstat and
        version signature included), committed by `author` ("Name <email>") with `message`."""
        current = git(self.path, "symbolic-ref", "-q", "--short", "HEAD").strip()
        git(self.path, "checkout", "-q", "--detach", base)
        change(self)
        git(self.path, "add", "-A")
        date = "--date=2025-06-01T12:00:00+02:00"
        git(self.path, "commit", "-q", f"--author={author}", date, "-m", message)
        mail = subprocess.run(
            ["git", "format-patch", "--stdout", f"--relative={SUBDIR}/", "-1", "HEAD"],
            cwd=self.path,
            env={**os.environ, **GIT_ENV},
            capture_output=True,
            check=True,
        ).stdout
        git(self.path, "checkout", "-q", "-f", current)
        return mail


@dataclass(frozen=True)
class PatchSpec:
    """One patch of a test manifest."""

    name: str
    content: bytes
    upstream_commit: str | None = None
    drop_when: str | None = None


@dataclass(frozen=True)
class PortRun:
    """What one `lifecycle port` run returned."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        """The `--json` report."""
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    def outcomes(self) -> dict[str, str]:
        """patch file → outcome."""
        return {p["file"]: p["outcome"] for p in self.report["patches"]}


class Project:
    """A git repository holding manifests/, the way release engineers keep one."""

    def __init__(self, path: Path, upstream: Upstream) -> None:
        self.path = path
        self.upstream = upstream
        self.manifests = path / "manifests"
        self.manifests.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")

    def manifest(
        self, version: str, patches: list[PatchSpec], *, vllm: str = "1.0.0", commit: bool = True
    ) -> Path:
        """manifests/<version>/manifest.yaml with `patches` beside it (committed)."""
        directory = self.manifests / version
        (directory / "patches").mkdir(parents=True)
        entries = ""
        for spec in patches:
            (directory / "patches" / spec.name).write_bytes(spec.content)
            entries += f"  - file: patches/{spec.name}\n    reason: test patch {spec.name}\n"
            if spec.upstream_commit:
                entries += f"    upstream_commit: {spec.upstream_commit}\n"
            if spec.drop_when:
                entries += f"    drop_when: {spec.drop_when}\n"
        (directory / "manifest.yaml").write_text(
            "schema_version: 1\n"
            "name: toy\n"
            "engine:\n"
            f'  vllm: "{vllm}"\n'
            f'  flashinfer: "{vllm}"\n'
            f"  base_image: toy/engine:v{vllm}\n"
            f"  package_dir: /usr/lib/python3/dist-packages/{SUBDIR}\n"
            "  vllm_dist: toy\n"
            "  flashinfer_dist: fakeinfer\n"
            "upstream:\n"
            f"  repository: {self.upstream.path}\n"
            "patches:\n" + (entries or "  []\n") + "tuned:\n"
            "  gpu_memory_utilization:\n"
            "    value: 0.9\n"
            "    status: validated\n"
            f"    measured_on: toy {vllm}\n"
            "    method: utilization ladder\n"
            "    margin: 1 GiB at the 64-prompt step\n"
        )
        if commit:
            git(self.path, "add", "-A")
            git(self.path, "commit", "-q", "-m", f"manifest {version}")
        return directory

    def port(self, *args: str) -> PortRun:
        """`lifecycle --manifests <manifests> port ARGS --json`, in process."""
        result = CliRunner().invoke(cli, ["--manifests", str(self.manifests), "port", *args])
        return PortRun(result.exit_code, result.stdout, result.stderr)

    def shown(self, branch: str, path: str) -> bytes:
        """A file as committed on `branch`."""
        return subprocess.run(
            ["git", "show", f"{branch}:{path}"], cwd=self.path, capture_output=True, check=True
        ).stdout


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (the .git dir included) by relative path → bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(root))] = path.read_bytes()
    return found


def change_mix(value: str) -> Callable[[Upstream], None]:
    """A change setting `MIX = 31` to `MIX = <value>`."""

    def change(up: Upstream) -> None:
        up.edit("pkg/serve.py", lambda text: text.replace("MIX = 31\n", f"MIX = {value}\n"))

    return change
