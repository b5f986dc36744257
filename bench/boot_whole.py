"""A whole `lifecycle boot` against `docker run --rm` of the same image, command, environment
and mounts: what a boot costs beyond the engine. `python3 bench/boot_overhead.py --whole`
runs it; this module holds its parts, and is the child that times one boot's phases.

For each engine (the demo's `demo/0.2`; the stand-in's `standin/0.31` profile `compile` when
its image `lifecycle-standin/engine:torch2.13` is in dockerd, never built here): a scratch
LIFECYCLE_HOME, the manifest built, one cold and one warm boot not counted, the `docker run`
command read from that warm boot's recorded spec (`spec.json`: the image by id, the command,
every variable, the same cache dirs mounted, the network). Then `rounds` pairs, each command a
fresh process, the order alternating (lifecycle first in odd rounds): wall time of each, and
the lifecycle process's peak RSS (its `ru_maxrss`, from wait4). Both run the engine warm: the
caches hold its JIT output, and a warm engine writes nothing into them. The overhead is the
median of the pairs' differences. As an engine's own time can vary by more than that (the
stand-in's by seconds on a busy machine), each process's wall less its engine's run (between
dockerd's `start` and `die` events for its container) is reported too: what each command
costs around the engine, whatever the engine took that time.

Then three more warm boots, each in a child that times lifecycle's phases in-process (the
imports of `lifecycle.cli`, the boot verb and the docker SDK, each wrapped function below,
the rest): each phase's median.
The containers the bench's boots leave (lifecycle removes one only when secrets were passed)
are removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STANDIN_IMAGE = "lifecycle-standin/engine:torch2.13"
BENCH_LABEL = "lifecycle-bench"  # on the docker run containers
# engine: (manifest, profile or None, base image that must exist first or None)
ENGINES: dict[str, tuple[str, str | None, str | None]] = {
    "demo": ("demo/0.2", None, None),
    "standin": ("standin/0.31", "compile", STANDIN_IMAGE),
}
# The phases the child times: (module, function) -> name. "boot" is lifecycle.boot.run.boot
# whole (as flows calls it); what of it no other part covers is the intent and the hooks.
PHASES: dict[tuple[str, str], str] = {
    ("lifecycle.dockerd", "connect"): "dockerd connection",
    ("lifecycle.commands.boot", "request"): "manifest, image lookup",
    ("lifecycle.flows", "boot"): "boot",
    ("lifecycle.boot.run", "_create"): "container create",
    ("lifecycle.boot.run", "run_container"): "container start to exit (the engine)",
    ("lifecycle.boot.run", "read_untracked"): "writes outside the caches",
    ("lifecycle.boot.run", "_finish"): "scans, evidence, outcome",
}


def lifecycle_env(home: Path, pycache: Path | None) -> dict[str, str]:
    """The environment of every lifecycle process: this checkout first on the path, the
    scratch home; with `pycache`, bytecode cached there as an installed lifecycle has it."""
    env = dict(os.environ, LIFECYCLE_HOME=str(home))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def lifecycle_argv(*args: str) -> list[str]:
    """`python -m lifecycle --manifests REPO/manifests ARGS` with this interpreter itself (not a
    launcher in front of it, such as pyenv's shim: ~70 ms a run here). Run in REPO: `-m` puts
    the working dir first on the path, so another checkout's dir would be benched instead."""
    return [sys.executable, "-m", "lifecycle", "--manifests", str(REPO / "manifests"), *args]


def boot_args(ref: str, profile: str | None) -> list[str]:
    """The boot command's arguments."""
    return ["boot", ref, *(["--profile", profile] if profile else [])]


def run_quietly(argv: list[str], env: dict[str, str]) -> str:
    """Run to the end; its stdout, or SystemExit with its output when it failed."""
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def prepare(engine: str, home: Path, env: dict[str, str]) -> dict[str, Any] | None:
    """Build the engine, boot it cold then warm; the warm boot's spec, or None when the
    engine's base image is not in dockerd."""
    import docker

    ref, profile, needs = ENGINES[engine]
    client = docker.from_env()
    try:
        if needs is not None:
            if not client.images.list(name=needs):
                return None
        else:
            from lifecycle.demo.setup import ensure_demo

            ensure_demo(client)
    finally:
        client.close()
    run_quietly(lifecycle_argv("build", ref), env)
    run_quietly(lifecycle_argv(*boot_args(ref, profile), "--cold"), env)
    warm = json.loads(run_quietly(lifecycle_argv(*boot_args(ref, profile), "--json"), env))
    spec: dict[str, Any] = json.loads((Path(warm["evidence_path"]) / "spec.json").read_text())
    return spec


def docker_run_argv(spec: dict[str, Any], tag: str, copies: Path) -> list[str]:
    """`docker run --rm` of the spec: same image (by id), command, variables (a secret by
    name, from this environment), network, IPC, shm and ports; labelled `tag` so its events
    can be told from others'. Its mounts are copies (under `copies`) of the warm caches:
    the engine rewrites its JIT log on every boot, and lifecycle would rightly pass over a
    cache changed behind its back, booting it cold."""
    if spec["device_requests"]:
        raise SystemExit("a profile that asks for GPUs is not benched here")
    argv = ["docker", "run", "--rm", "--label", f"{BENCH_LABEL}={tag}"]
    options = {"--network": "network_mode", "--ipc": "ipc_mode", "--shm-size": "shm_size"}
    for flag, key in options.items():
        if spec[key]:
            argv += [flag, str(spec[key])]
    for port, host in spec["ports"].items():
        argv += ["-p", f"{host}:{port}"]
    for key, value in spec["environment"].items():
        secret = value == f"<from host env {key}>"
        argv += ["-e", key if secret else f"{key}={value}"]
    for mount in spec["mounts"]:
        copy = copies / Path(mount["source"]).name
        shutil.copytree(mount["source"], copy, symlinks=True)
        argv += ["-v", f"{copy}:{mount['target']}"]
    return [*argv, spec["image"], *spec["command"]]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, peak RSS MiB) of one run of `argv`, its output thrown away."""
    start = time.perf_counter()
    devnull = subprocess.DEVNULL
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=devnull, stderr=devnull)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])}… exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def phases(ref: str, profile: str | None, env: dict[str, str], runs: int = 3) -> dict[str, float]:
    """`runs` more warm boots, each in a child of its own (below): each phase's median, s."""
    found: list[dict[str, float]] = []
    for _ in range(runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            argv = [sys.executable, __file__, "--child", out.name, *boot_args(ref, profile)]
            start = time.perf_counter()
            subprocess.run(argv, env=env, cwd=REPO, capture_output=True, check=True)
            wall = time.perf_counter() - start
            parts = json.loads(Path(out.name).read_text())
        # What no clock inside the process sees: the interpreter's start, and its exit.
        found.append({**parts, "python start and exit": wall - sum(parts.values())})
    return {name: statistics.median(run[name] for run in found) for name in found[0]}


def compare(engine: str, rounds: int, pycache: Path | None) -> dict[str, Any]:
    """The interleaved rounds of one engine, and its phases; {"skipped": why} without it."""
    ref, profile, _ = ENGINES[engine]
    home = Path(tempfile.mkdtemp(prefix=f"boot-whole-{engine}-"))
    env = lifecycle_env(home, pycache)
    try:
        spec = prepare(engine, home, env)
        if spec is None:
            return {
                "skipped": f"no {STANDIN_IMAGE} in dockerd: python3 -m lifecycle.demo --standin"
            }
        commands = {
            "lifecycle": lifecycle_argv(*boot_args(ref, profile)),
            "docker run": docker_run_argv(spec, home.name, home / "baseline-caches"),
        }
        walls: dict[str, list[float]] = {name: [] for name in commands}
        rss: list[float] = []
        events = EngineRuns(lambda: _boots(home), home.name)
        for index in range(rounds):
            order = list(commands) if index % 2 == 0 else list(reversed(commands))
            for name in order:
                wall, peak = timed(commands[name], env)
                walls[name].append(wall)
                if name == "lifecycle":
                    rss.append(peak)
        runs = events.stop()
        parts = phases(ref, profile, env)
    finally:
        _remove_containers(home)
    pairs = list(zip(walls["lifecycle"], walls["docker run"], strict=True))
    result = {
        "ref": ref,
        "profile": profile,
        "rounds": rounds,
        "lifecycle_wall_s": round(statistics.median(walls["lifecycle"]), 3),
        "docker_run_wall_s": round(statistics.median(walls["docker run"]), 3),
        "overhead_s": round(statistics.median(a - b for a, b in pairs), 3),
        "ratio": round(statistics.median(a / b for a, b in pairs), 3),
        "lifecycle_peak_rss_mib": round(statistics.median(rss), 1),
        "walls_s": {name: [round(w, 3) for w in ws] for name, ws in walls.items()},
        "phases_s": {name: round(s, 4) for name, s in parts.items()},
        "docker_run": " ".join(commands["docker run"]),
    }
    if all(len(runs[name]) == rounds for name in commands):
        # Each process's wall less its engine's run (dockerd's start to die events): what the
        # command costs around the engine, however long the engine took this time.
        own = {name: [w - r for w, r in zip(walls[name], runs[name], strict=True)] for name in runs}
        result["own_s"] = {name: round(statistics.median(o), 3) for name, o in own.items()}
        result["own_overhead_s"] = round(
            statistics.median(
                a - b for a, b in zip(own["lifecycle"], own["docker run"], strict=True)
            ),
            3,
        )
    return result


class EngineRuns:
    """dockerd's container `start` and `die` events, followed live while the rounds run (its
    event history keeps only the last 256, which other users' containers fill fast)."""

    def __init__(self, boots: Callable[[], set[str]], tag: str) -> None:
        import docker

        self._client = docker.from_env()
        filters = {"type": "container", "event": ["start", "die"]}
        self._stream = self._client.events(filters=filters, decode=True)
        self._events: list[dict[str, Any]] = []
        self._boots, self._tag = boots, tag
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        with contextlib.suppress(Exception):  # closing the stream under the read ends it so
            self._events.extend(self._stream)

    def stop(self) -> dict[str, list[float]]:
        """How long each engine ran, start to die, in the order they started: the lifecycle
        boots' (those recorded in its home), the docker runs' (labelled with the tag)."""
        time.sleep(0.5)  # the last die event is sent as the container exits: let it arrive
        self._stream.close()
        self._thread.join()
        self._client.close()
        boots = self._boots()
        started: dict[str, tuple[str, int]] = {}
        runs: dict[str, list[tuple[int, float]]] = {"lifecycle": [], "docker run": []}
        for event in self._events:
            labels = event["Actor"]["Attributes"]
            if labels.get("lifecycle.boot.id") in boots:
                name = "lifecycle"
            elif labels.get(BENCH_LABEL) == self._tag:
                name = "docker run"
            else:
                continue
            if event["Action"] == "start":
                started[event["id"]] = (name, event["timeNano"])
            elif event["id"] in started:
                name, start = started.pop(event["id"])
                runs[name].append((start, (event["timeNano"] - start) / 1e9))
        return {name: [seconds for _, seconds in sorted(found)] for name, found in runs.items()}


def _boots(home: Path) -> set[str]:
    """The boots recorded in `home`, named by their evidence dirs."""
    return {p.name for p in (home / "evidence" / "boots").glob("b-*") if p.is_dir()}


def _remove_containers(home: Path) -> None:
    """The containers of the boots recorded in `home`."""
    import docker

    boots = _boots(home)
    client = docker.from_env()
    try:
        for container in client.containers.list(all=True, filters={"label": "lifecycle.boot.id"}):
            if container.labels.get("lifecycle.boot.id") in boots:
                container.remove(force=True)
    finally:
        client.close()


def child(out: Path, args: list[str]) -> None:
    """One boot in this process: the imports, then the CLI with the phases wrapped."""
    start = time.perf_counter()
    import importlib

    import lifecycle.cli  # what `python3 -m lifecycle` imports

    # What the CLI's main() does first (a checkout of another time may not have it).
    getattr(lifecycle.cli, "_no_collection_at_start", lambda: None)()
    import docker  # noqa: F401  (what connecting to dockerd imports)

    import lifecycle.commands.boot  # what the boot verb imports

    imported = time.perf_counter()
    spent: dict[str, float] = {}
    for (module_name, function), name in PHASES.items():
        module = importlib.import_module(module_name)
        if hasattr(module, function):  # a checkout of another time may lack one
            setattr(module, function, timed_calls(getattr(module, function), spent, name))
    argv = ["--manifests", str(REPO / "manifests"), *args]
    lifecycle.cli.cli.main(argv, prog_name="lifecycle", standalone_mode=False)
    total = time.perf_counter() - imported
    boot = spent.pop("boot", 0.0)
    before = sum(spent.pop(n, 0.0) for n in ("dockerd connection", "manifest, image lookup"))
    found = {
        "imports": imported - start,
        "dockerd connection, manifest, image lookup": before,
        **spent,
        "intent, hooks (the rest of the boot)": boot - sum(spent.values()),
        "CLI, ledger, report (the rest)": total - boot - before,
    }
    out.write_text(json.dumps(found))
    # Exit as this checkout's CLI does (without the interpreter's teardown since it can).
    exit_as_the_cli: Callable[[int], None] = getattr(lifecycle.cli, "_exit", sys.exit)
    exit_as_the_cli(0)


def timed_calls(function: Callable[..., Any], spent: dict[str, float], name: str) -> Any:
    """`function`, its every call's seconds added to `spent[name]` (boot_overhead's too)."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

    return timed


def show(engine: str, result: dict[str, Any]) -> str:
    """A few lines for one engine."""
    if "skipped" in result:
        return f"{engine}: skipped, {result['skipped']}"
    parts = ", ".join(f"{name} {s * 1000:.0f}" for name, s in result["phases_s"].items())
    return (
        f"{engine} ({result['ref']}{' ' + result['profile'] if result['profile'] else ''}),"
        f" median of {result['rounds']} pairs: lifecycle {result['lifecycle_wall_s']:.3f} s,"
        f" docker run {result['docker_run_wall_s']:.3f} s: overhead {result['overhead_s']:.3f} s"
        f" ({result['ratio']:.2f}x); lifecycle peak RSS {result['lifecycle_peak_rss_mib']} MiB\n"
        f"  around the engine (wall less its run): {result.get('own_s')},"
        f" lifecycle's more: {result.get('own_overhead_s')} s\n"
        f"  phases, median of 3 boots (ms): {parts}"
    )


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    child(Path(sys.argv[2]), sys.argv[3:])
