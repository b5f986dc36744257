"""A Ray cluster of "GPU hosts" on this machine, inside a network namespace the test makes.

Ray puts a node on the host's interface address, so the cluster runs in a namespace of its own
(`unshare --net --pid --mount-proc`) whose only interface is its loopback: there every node's
address is 127.0.0.1 and no traffic leaves. Inside it: an S3 server (SeaweedFS) for the shared
bucket, a Ray head with no GPU, and worker nodes, each started with its own LIFECYCLE_HOME,
GPU arch and `--num-gpus 1 --resources '{"TYPE": 1}'`. dockerd stays outside and is reached
through its unix socket, so a node pulls from the registry on the host's loopback only through
dockerd. Commands run inside with nsenter; killing the namespace's first process ends them all.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.night_support import make_project

REPO = Path(__file__).resolve().parent.parent
HEAD = "127.0.0.1:6379"
S3 = "http://127.0.0.1:8333"
ARCHIVE = "s3://night/lc"  # in the bucket the namespace's S3 server holds
# The namespace's first process: it reaps what is orphaned there (a killed raylet's workers).
REAPER = "import os, time\nwhile True:\n try: os.wait()\n except ChildProcessError: time.sleep(0.2)"


@dataclass
class Node:
    """A worker node: its name in the test, GPU type and arch, home, and extra environment."""

    name: str
    gpu: str
    arch: str
    home: Path
    env: dict[str, str] = field(default_factory=dict)
    also: dict[str, float] = field(default_factory=dict)  # more custom resources it offers


class Cluster:
    """The namespace, its S3 server and Ray head, and the worker nodes started in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.temp = Path(
            tempfile.mkdtemp(prefix="lcray", dir="/tmp")
        )  # Ray's socket paths are short
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
             sys.executable, "-c", REAPER],
        )  # fmt: skip
        self.pid = _child_of(self.holder.pid)
        self.nodes: list[Node] = []
        self.access = secrets.token_hex(10).upper()
        self.secret = secrets.token_urlsafe(30)
        self.run("ip", "link", "set", "lo", "up")
        self._start_s3()
        self.run(
            "ray", "start", "--head", "--node-ip-address=127.0.0.1", "--port=6379",
            "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
            "--object-store-memory=80000000", f"--temp-dir={self.temp}",
        )  # fmt: skip

    @property
    def env(self) -> dict[str, str]:
        """What every process in the namespace gets: the bucket's server and keys, this
        checkout on the path."""
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LIFECYCLE_"))}
        return {
            **keep,
            "AWS_ENDPOINT_URL": S3,
            "AWS_ACCESS_KEY_ID": self.access,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "PYTHONPATH": str(REPO),
            "RAY_USAGE_STATS_ENABLED": "0",
        }

    def argv(self, *argv: str) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "-n", "-p", "-m", *argv]

    def run(
        self, *argv: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,),
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        done = subprocess.run(
            self.argv(*argv), env={**self.env, **(env or {})}, capture_output=True, text=True,
            timeout=timeout, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode in ok, f"{argv} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def popen(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*argv), env={**self.env, **(env or {})}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def kill(self, process: subprocess.Popen[str]) -> None:
        """SIGKILL what `popen` started (nsenter's child, in the namespace), then nsenter."""
        pid = process.pid
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
                os.kill(int(child), signal.SIGKILL)
        process.kill()
        process.communicate(timeout=30)

    def python(self, code: str, env: dict[str, str] | None = None) -> Any:
        """Run Python inside the namespace; what it prints, as JSON."""
        return json.loads(self.run(sys.executable, "-c", code, env=env).stdout)

    def add_nodes(self, *nodes: Node) -> None:
        """Start worker nodes, one after the other: started at once, two raylets on one
        address can pick the same free port."""
        for node in nodes:
            node.home.mkdir(parents=True, exist_ok=True)
            env = {"LIFECYCLE_HOME": str(node.home), "LIFECYCLE_GPU_ARCH": node.arch, **node.env}
            self.run(
                "ray", "start", f"--address={HEAD}", "--node-ip-address=127.0.0.1",
                "--num-cpus=2", "--num-gpus=1", "--object-store-memory=80000000",
                f"--resources={json.dumps({node.gpu: 1, **node.also})}", env=env,
            )  # fmt: skip
            self.nodes.append(node)

    def raylet_of(self, node: Node) -> int:
        """The host pid of a node's raylet (it carries the node's LIFECYCLE_HOME)."""
        found = _processes_of(node, lambda program: b"raylet" in program)
        if not found:
            raise AssertionError(f"no raylet of {node.name}")
        return found[0]

    def workers_of(self, node: Node, task: str) -> list[int]:
        """The host pids of a node's Ray workers running `task` now (`ray::run`: a run)."""
        return _processes_of(node, lambda program: program == f"ray::{task}".encode())

    def pushed_demo(self, root: Path, registry: str) -> Path:
        """The demo project at `root`, both releases built in the driver's home beside it and
        pushed to `registry`: their image records in the bucket, where the nodes find them."""

        def build(project: Path, *args: str) -> Any:
            done = self.run(
                sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"),
                *args, "--push", registry, env=driver_env(root.parent / "driver"), timeout=600,
            )  # fmt: skip
            return type("Built", (), {"exit_code": done.returncode, "output": done.stderr})

        return make_project(root, build, own_images=True)

    def close(self) -> None:
        """SIGKILL the namespace's first process: the kernel ends every process in it."""
        self.holder.send_signal(signal.SIGKILL)
        self.holder.wait(timeout=30)
        shutil.rmtree(self.temp, ignore_errors=True)

    def _start_s3(self) -> None:
        data = self.root / "weed"
        (data / "data").mkdir(parents=True)
        keys = {"accessKey": self.access, "secretKey": self.secret}
        actions = ["Admin", "Read", "List", "Tagging", "Write"]
        identity = {"name": "admin", "credentials": [keys], "actions": actions}
        (data / "s3.json").write_text(json.dumps({"identities": [identity]}))
        self.weed = subprocess.Popen(
            self.argv(
                shutil.which("weed") or "weed", f"-logdir={data}", "mini", f"-dir={data / 'data'}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.config={data / 's3.json'}",
                "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.telemetry=false", "-volume.max=1000", "-master.volumeSizeLimitMB=64",
            ),
            cwd=data, env={**self.env, "GOMEMLIMIT": "512MiB"}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.run(
            sys.executable, "-c",
            "import time, boto3\n"
            "deadline = time.monotonic() + 60\n"
            "while True:\n"
            "  try:\n"
            "    boto3.client('s3').create_bucket(Bucket='night'); break\n"
            "  except Exception:\n"
            "    if time.monotonic() > deadline: raise\n"
            "    time.sleep(0.3)\n",
            timeout=90,
        )  # fmt: skip


def driver_env(home: Path) -> dict[str, str]:
    """The environment of a night's driver whose home is `home`."""
    return {"LIFECYCLE_HOME": str(home), "LIFECYCLE_ARCHIVE": ARCHIVE}


def _child_of(pid: int) -> int:
    """The first child of `pid` (unshare's fork: the namespace's first process)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError("unshare started no process")


def _processes_of(node: Node, program: Callable[[bytes], bool]) -> list[int]:
    """The pids of the processes of `node` (they carry its LIFECYCLE_HOME) whose argv[0]
    `program` accepts."""
    found = []
    for pid in _pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if program(argv.split(b"\0")[0]) and f"LIFECYCLE_HOME={node.home}".encode() in environ:
            found.append(pid)
    return found


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
