"""A Ray cluster of GPU hosts as a night's engine (`night --engine ray`); docs: cluster.md.

Each run is one Ray task on a GPU node, run there by lifecycle.night.node in that node's own
LIFECYCLE_HOME and Docker engine, through the local engine's boot. This module is imported
only when a night asks for Ray, and Ray only here: `lifecycle --help` never pays for it.

Placement: a run needs `count` GPUs and `count` of the custom resource named after its GPU
type (plan `gpu: {PIN: H200}`), which each node declares at `ray start --num-gpus 8
--resources '{"H200": 8}'`; a cell that names none needs one GPU of any type. lifecycle picks
the node among the live ones that offer that, have room and passed the night's survey, and
pins the task to it. A warm cell prefers a node holding a good cache of its pin; when those
are all busy, a free node restores one from the bucket. Losses: a task is never retried by
Ray (max_retries=0): the night sees the lost attempt, journals it with its node and runs it
again on another node; a node whose attempt was lost, or that cannot run cells (no Docker
engine, no bucket: one line naming it), is given no more runs. Time limits: Ray declares a
node dead only when its raylet stops heartbeating, so a hung host (a worker stuck in the
kernel, stopped) would hold the night, production down, for ever. The driver gives each run
its cell's `timeout_s` plus `margin_s` (the task's image pull, cache restore and archive);
past that the task is cancelled and the attempt lost. A survey or an end action gets
`margin_s`. End actions: each goes to the node that ran each boot as the journal names it (a
run's summary carries its node), so a driver that resumed a killed night ends the boots made
before it too; a node lost, or not in the cluster now, is named with its boots as not done.
Such a driver first asks every node for the runs its killed one never heard back from whose
boots recorded them there (`recorded`, lifecycle.night.adopt): journalled with their node,
they are counted once, not run again, and ended like the rest.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from typing import Any

from lifecycle.archive.record import pushed_images
from lifecycle.archive.store import BlobStore
from lifecycle.errors import EnvironmentFailure, LifecycleError
from lifecycle.manifest import LoadedManifest
from lifecycle.night import node as on_node
from lifecycle.night.engine import EndSummary, LostRun, Pin, RunOrder, RunSummary
from lifecycle.night.plan import Gpu
from lifecycle.report import unread_lines

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:  # the CLI turns this into one line, exit 2
    raise LifecycleError(
        "the ray engine needs Ray on this host: pip install 'lifecycle[ray]'"
    ) from None


@dataclass
class _Node:
    """A GPU node of the cluster, as the night sees it."""

    id: str
    name: str  # host name / first digits of the node id
    resources: dict[str, float]
    warm: dict[str, str] = field(default_factory=dict)  # pin -> local | bucket
    arch: str | None = None  # None: not surveyed (yet)
    out: str | None = None  # why it gets no more runs
    lost: bool = False  # Ray lost it (it died), rather than it refusing
    used: dict[str, float] = field(default_factory=dict)

    def room_for(self, need: dict[str, float]) -> bool:
        return (
            self.out is None
            and self.arch is not None
            and all(
                self.used.get(k, 0.0) + v <= self.resources.get(k, 0.0) for k, v in need.items()
            )
        )

    def remember(self, pin: str, state: str | None) -> None:
        """Where the pin's good caches are on this node, as it said after its last run."""
        if state is None:
            self.warm.pop(pin, None)
        else:
            self.warm[pin] = state

    def take(self, need: dict[str, float], sign: int) -> None:
        for key, value in need.items():
            self.used[key] = self.used.get(key, 0.0) + sign * value


# The time a run's task takes besides its boot (bounded by the cell's timeout_s): the image
# pulled, the caches restored, the boot's caches and results archived; and the limit of a survey
# or an end action. LIFECYCLE_RAY_TASK_MARGIN overrides it (docs/time-limits.md).
TASK_MARGIN_S = 600.0

# What a lost node's end says: what it ran is safe, what it holds is out of reach.
LOST_NODE = "lost during the night: each run it finished had archived its caches and results"
# What the end says of a node that ran boots of the night and is not in the cluster now (it
# left, or restarted under another Ray node id, while the night's driver was down).
GONE_NODE = (
    "not in the cluster now: each run it finished had archived its caches and results; what"
    " it holds is out of reach"
)
# A boot whose run's summary names no node: no engine of this cluster ran it.
UNPLACED = ("boots of no node", "their runs name no node of a cluster; nothing to send them to")


def needs(gpu: Gpu | None) -> dict[str, float]:
    """The resources a run on `gpu` asks Ray for: GPUs, and that many of the GPU type's."""
    if gpu is None:
        return {"GPU": 1.0}
    return {"GPU": float(gpu.count), gpu.type: float(gpu.count)}


class RayEngine:
    """The nodes of a Ray cluster, each running its runs through lifecycle.night.node."""

    def __init__(
        self,
        address: str | None,
        store: BlobStore,
        say: Callable[[str], None],
        margin_s: float = TASK_MARGIN_S,
        task_env: Mapping[str, str] | None = None,
    ) -> None:
        self.address = address or "auto"
        self.store = store
        self.say = say
        self.margin_s = margin_s
        # Ray's driver prints what the cluster reports (a raylet that died) to stdout, where
        # `--json` writes its report: while connected, what Ray prints goes to stderr.
        self._quiet = redirect_stdout(sys.stderr)
        self._quiet.__enter__()
        # `task_env`: what the night's tasks get in their environment besides their node's (the
        # test-only fault settings, lifecycle.faults); none, and the workers are Ray's own.
        runtime_env = {"env_vars": dict(task_env)} if task_env else None
        try:
            ray.init(
                address=self.address, logging_level=logging.ERROR, log_to_driver=False,
                runtime_env=runtime_env,
            )  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EnvironmentFailure(
                f"cannot reach the Ray cluster at {self.address}: {exc}"
            ) from None
        self.nodes = {
            n["NodeID"]: _Node(
                n["NodeID"], f"{n['NodeManagerHostname']}/{n['NodeID'][:8]}", n["Resources"]
            )
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n["Alive"] and n["Resources"].get("GPU", 0) > 0
        }
        self.pins: dict[str, Pin] = {}
        self.running: dict[Any, tuple[RunOrder, _Node, float]] = {}  # by task: when sent
        self._run = ray.remote(max_retries=0, num_cpus=0)(on_node.run)
        self._survey = ray.remote(max_retries=0, num_cpus=0)(on_node.survey)
        self._end = ray.remote(max_retries=0, num_cpus=0)(on_node.end)
        self._recorded = ray.remote(max_retries=0, num_cpus=0)(on_node.recorded)
        self._ready = ray.remote(max_retries=0, num_cpus=0)(on_node.ready)
        # A node's first task starts a worker process and imports lifecycle there (seconds):
        # started now, while the driver resolves the pins, the survey finds it ready.
        self._started = [
            self._ready.options(scheduling_strategy=self._on(n)).remote(
                n.name, store.location.url()
            )
            for n in self.nodes.values()
        ]

    def close(self) -> None:
        ray.shutdown()
        self._quiet.__exit__(None, None, None)

    @property
    def where(self) -> str:
        out = [f"{n.name} out: {n.out}" for n in self.nodes.values() if n.out]
        nodes = f"{len(self.nodes)} GPU nodes"
        return f"the Ray cluster at {self.address} ({nodes}{'; ' if out else ''}{'; '.join(out)})"

    def resolve(self, ref: str, loaded: LoadedManifest, digest: str) -> Pin:
        """The pin as the bucket records its pushed image: what the nodes pull by digest."""
        pushed, unread = pushed_images(self.store, digest)
        for line in unread_lines(unread):  # the nodes read the same records: said once, here
            self.say(line)
        if not pushed:
            raise LifecycleError(
                f"{ref} was never pushed (no image record of manifest digest {digest[:12]} at"
                f" {self.store.location.url()}): `lifecycle build {ref} --push REGISTRY` so the"
                " cluster's nodes can pull it (nothing was run, production untouched)"
            )
        image = pushed[0]
        pin = Pin(
            ref,
            loaded,
            digest,
            {"id": image.image_id, "tags": [image.tag], "labels": image.labels},
            image.tag,
        )
        self.pins[ref] = pin
        return pin

    def warm_ready(self, pin: Pin, gpu: Gpu | None) -> bool:
        self._survey_all()
        want = needs(gpu)
        return any(
            pin.ref in n.warm
            and n.out is None
            and all(n.resources.get(k, 0) >= v for k, v in want.items())
            for n in self.nodes.values()
        )

    def start(self, order: RunOrder) -> bool:
        self._survey_all()
        need = needs(order.cell.gpu)
        free = [n for n in self.nodes.values() if n.room_for(need)]
        if order.cell.state == "warm":  # only where a good cache is, or can be restored from
            free = [n for n in free if order.pin.ref in n.warm]
        if not free:
            return False
        rank = {"local": 0, "bucket": 1}
        chosen = min(
            free,
            key=lambda n: (rank.get(n.warm.get(order.pin.ref, ""), 0), sum(n.used.values()), n.id),
        )
        chosen.take(need, +1)
        gpus = need.pop("GPU")
        ref = self._run.options(
            num_gpus=gpus, resources=need, scheduling_strategy=self._on(chosen)
        ).remote(chosen.name, self.store.location.url(), order)
        self.running[ref] = (order, chosen, time.monotonic())
        return True

    def finished(self) -> list[RunSummary | LostRun]:
        first = min(sent + self._limit(order) for order, _, sent in self.running.values())
        wait_s = max(0.0, first - time.monotonic())
        ready, _ = ray.wait(list(self.running), num_returns=1, timeout=wait_s)
        more, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
        ended: list[RunSummary | LostRun] = []
        for ref in dict.fromkeys([*ready, *more]):
            order, node, sent = self.running.pop(ref)
            node.take(needs(order.cell.gpu), -1)
            try:
                done: on_node.NodeRun = ray.get(ref)
            except RayError as exc:
                ended.append(self._lost(order, node, exc))
                continue
            wall = time.monotonic() - sent  # what Ray added: all but the task's own time
            summary = done.summary.model_copy(update={"scheduling_s": round(wall - done.task_s, 3)})
            node.remember(order.pin.ref, done.warm)
            ended.append(summary)
        return ended + self._overdue()

    def _limit(self, order: RunOrder) -> float:
        """How long the driver waits for a run's task: its boot's limit, and the margin."""
        return order.cell.timeout_s + self.margin_s

    def _overdue(self) -> list[LostRun]:
        """Each run whose task is past its limit, cancelled: its node answers no more (Ray
        still counts it alive), so it is lost to the night like a dead one."""
        now = time.monotonic()
        late = [ref for ref, (o, _, sent) in self.running.items() if now >= sent + self._limit(o)]
        lost = []
        for ref in late:
            order, node, _ = self.running.pop(ref)
            node.take(needs(order.cell.gpu), -1)
            ray.cancel(ref, force=True)
            # A stopped or wedged worker cannot act on the cancel: it may live on, holding its
            # GPU in Ray, until its host recovers; the night gives that node no more runs.
            why = (
                f"timeout: no answer within {self._limit(order):g} s (the cell's timeout_s"
                f" {order.cell.timeout_s:g} + a margin of {self.margin_s:g} s); force-cancel"
                " sent to Ray"
            )
            lost.append(self._give_up(order, node, why, dead=True))
        return lost

    def _lost(self, order: RunOrder, node: _Node, exc: RayError) -> LostRun:
        """The attempt, lost; the node gets no more runs unless it only lacked a warm cache
        (the night then warms one up where it can)."""
        if isinstance(exc, RayTaskError) and isinstance(exc.cause, on_node.NotWarmHere):
            node.remember(order.pin.ref, None)
            return LostRun(order, node.name, _why_out(exc))
        return self._give_up(order, node, _why_out(exc), dead=not isinstance(exc, RayTaskError))

    def _give_up(self, order: RunOrder, node: _Node, why: str, *, dead: bool) -> LostRun:
        """The attempt, lost, and its node given no more runs (`dead`: nor an end action)."""
        node.out, node.lost = why, dead
        self.say(f"{node.name}: {why}; no more runs go there")
        return LostRun(order, node.name, why)

    def recorded(self, orders: Sequence[RunOrder]) -> list[RunSummary]:
        """Asked of every node that can run cells: a run a killed driver left may have been
        recorded on any of them. A node that cannot answer gets no run (as in a survey); the
        runs it holds are run again elsewhere."""
        self._survey_all()
        asked = {
            self._recorded.options(scheduling_strategy=self._on(n)).remote(
                n.name, self.store.location.url(), list(orders)
            ): n
            for n in self.nodes.values()
            if n.arch is not None and n.out is None
        }
        pins = {(o.cell.id, o.run, o.attempt): o.pin.ref for o in orders}
        deadline = time.monotonic() + self.margin_s
        found: list[RunSummary] = []
        for ref, node in asked.items():
            try:
                answers: list[on_node.NodeRun] = self._answer(ref, deadline)
            except RayError as exc:
                node.out = _why_out(exc)
                self.say(f"{node.name}: {node.out}; no run goes there")
                continue
            for done in answers:
                summary = done.summary
                node.remember(pins[(summary.cell, summary.run, summary.attempt)], done.warm)
                found.append(summary)
        return found

    def archive(self, boots: Mapping[str, str | None]) -> EndSummary:
        return self._end_action("archive", boots)

    def teardown(self, boots: Mapping[str, str | None]) -> EndSummary:
        return self._end_action("teardown", boots)

    def _end_action(self, action: str, boots: Mapping[str, str | None]) -> EndSummary:
        """The action on every node that ran this night's boots, each as a task pinned there.
        Where a boot ran is what the journal says (its run's summary names the node): a driver
        that resumed a killed night ran none of the boots before it. A boot whose node is
        lost, or no longer in the cluster, is named as not done."""
        by_node, gone = self._where(boots)
        done = [  # a node is lost only while it runs a run: it ran cells this night
            EndSummary(
                action=action,
                ok=False,
                detail=_not_done(node.name, LOST_NODE, by_node.get(node.id, [])),
            )
            for node in self.nodes.values()
            if node.lost
        ]
        done += [
            EndSummary(
                action=action,
                ok=False,
                detail=_not_done(name, GONE_NODE, mine) if name else _not_done(*UNPLACED, mine),
            )
            for name, mine in gone.items()
        ]
        asked = {
            self._end.options(scheduling_strategy=self._on(self.nodes[nid])).remote(
                self.nodes[nid].name, self.store.location.url(), action, mine
            ): self.nodes[nid]
            for nid, mine in by_node.items()
            if not self.nodes[nid].lost
        }
        deadline = time.monotonic() + self.margin_s
        for ref, node in asked.items():
            try:
                done.append(self._answer(ref, deadline))
            except RayError as exc:
                done.append(
                    EndSummary(action=action, ok=False, detail=f"{node.name}: {_why_out(exc)}")
                )
        if not done:
            return EndSummary(action=action, ok=True, detail="no node of this night has boots")
        return EndSummary(
            action=action,
            ok=all(d.ok for d in done),
            detail="; ".join(d.detail for d in done),
            location=self.store.location.url() if action == "archive" else None,
            caches=sum(d.caches for d in done),
            bytes=sum(d.bytes for d in done),
        )

    def _where(
        self, boots: Mapping[str, str | None]
    ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """The boots by the id of the node in the cluster now that ran them, and those whose
        node is not in it by the name the journal has (a node restarted since has a new id,
        so another name; "": the journal names none), each in the night's order."""
        by_name = {node.name: node for node in self.nodes.values()}
        by_node: dict[str, list[str]] = {}
        gone: dict[str, list[str]] = {}
        for boot_id, name in boots.items():
            if name is not None and (node := by_name.get(name)) is not None:
                by_node.setdefault(node.id, []).append(boot_id)
            else:
                gone.setdefault(name or "", []).append(boot_id)
        return by_node, gone

    def _survey_all(self) -> None:
        """Ask each node not yet asked whether it can run cells, and where its warm caches
        are; a node that cannot is named in one line and given no run."""
        asked = {
            self._survey.options(scheduling_strategy=self._on(n)).remote(
                n.name, self.store.location.url(), list(self.pins.values())
            ): n
            for n in self.nodes.values()
            if n.arch is None and n.out is None
        }
        deadline = time.monotonic() + self.margin_s
        for ref, node in asked.items():
            try:
                state: on_node.NodeState = self._answer(ref, deadline)
            except RayError as exc:
                node.out = _why_out(exc)
                self.say(f"{node.name}: {node.out}; no run goes there")
                continue
            node.arch, node.warm = state.arch, dict(state.warm)
            for line in state.settled:  # a killed driver's boots, ended where they ran
                self.say(f"{node.name}: {line}")

    def _answer(self, ref: Any, deadline: float) -> Any:
        """A survey's or end action's result; past `deadline` its task is force-cancelled and
        GetTimeoutError (a RayError, as for a lost task) raised."""
        try:
            return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except GetTimeoutError:
            ray.cancel(ref, force=True)
            raise GetTimeoutError(
                f"no answer within {self.margin_s:g} s; force-cancel sent to Ray"
            ) from None

    @staticmethod
    def _on(node: _Node) -> Any:
        return NodeAffinitySchedulingStrategy(node_id=node.id, soft=False)


def _why_out(exc: RayError) -> str:
    """One line: what the node said (NodeUnfit), or how Ray lost the attempt."""
    if isinstance(exc, GetTimeoutError):
        return f"timeout: {exc}"
    if isinstance(exc, RayTaskError):
        cause = exc.cause
        if isinstance(cause, LifecycleError):
            return str(cause)
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'lost'}"


def _not_done(node: str, why: str, boots: Sequence[str]) -> str:
    """An end action not done on a node: why, and the night's boots it leaves there."""
    if not boots:
        return f"{node}: {why}"
    return f"{node}: {why}; not done for its boots {', '.join(boots)}"
