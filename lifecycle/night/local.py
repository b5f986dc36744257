"""The Docker engine of this host as a night's engine: each run a recorded boot with its results.

A run is `flows.boot_then_accept` (the boot, then the profile's own acceptance if it has one),
then each of the cell's checks judged on what the boot left (its redacted log, the metrics the
engine printed, its caches' files) and recorded as a result of that boot, its verdict the
result's document. A rung of a ladder runs at its value instead of the manifest's.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.run import archive_caches
from lifecycle.boot.engine import BootFailed, not_built
from lifecycle.boot.run import BootRequest, Watch
from lifecycle.build.engine import find_built
from lifecycle.build.plan import cache_key, image_tag, key_factors
from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint
from lifecycle.flows import boot_then_accept
from lifecycle.home import Home
from lifecycle.hooks import HookFailed
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    BootRecord,
    boot_by_id,
    cache_by_id,
    cache_uses,
    warm_candidates,
)
from lifecycle.ledger.results import ResultRecord, all_results, result_named
from lifecycle.manifest import LoadedManifest
from lifecycle.manifest.model import engine_flag
from lifecycle.night.checks import CheckVerdict, Finding, judge, metrics_in
from lifecycle.night.engine import (
    CheckOutcome,
    EndSummary,
    LostRun,
    Pin,
    RunOrder,
    RunSummary,
    worst,
)
from lifecycle.night.plan import Gpu
from lifecycle.results.archive import with_results
from lifecycle.results.model import ResultRequest, add_result
from lifecycle.teardown.plan import Selection
from lifecycle.teardown.removal import teardown_lock
from lifecycle.teardown.run import run_teardown
from lifecycle.teardown.survey import Services, TeardownRequest, make_plan


@dataclass
class LocalEngine:
    """This host's Docker engine, its ledger, and the S3 archive its end actions write to."""

    docker: Any
    ledger: Ledger
    home: Home
    host_env: Mapping[str, str]
    arch: str  # the GPU arch in cache keys (LIFECYCLE_GPU_ARCH)
    s3: Any | None = None
    location: ArchiveLocation | None = None
    with_content: bool = False  # whether the end's archive sends the caches' files too
    checkpoint: Checkpoint = lambda point: None  # test-only fault injection (lifecycle.faults)
    _next: list[RunOrder] = field(default_factory=list)  # the one run started, not yet run

    @property
    def where(self) -> str:
        return f"the Docker engine of {socket.gethostname()}"

    def resolve(self, ref: str, loaded: LoadedManifest, digest: str) -> Pin:
        tag = image_tag(loaded.manifest.name, loaded.manifest.engine.vllm, digest)
        built = find_built(self.docker, self.ledger, digest)
        if built is None:
            then = "then the night again (nothing was run, production untouched)"
            raise LifecycleError(not_built(self.ledger, ref, digest, then))
        return Pin(
            ref, loaded, digest, {"id": built.id, "tags": built.tags, "labels": built.labels}, tag
        )

    def start(self, order: RunOrder) -> bool:
        """One run at a time: the next is started once the last one is finished."""
        if self._next:
            return False
        self._next.append(order)
        return True

    def finished(self) -> list[RunSummary | LostRun]:
        """The started run, run now (this host runs one boot at a time)."""
        return [self.run(self._next.pop())]

    def warm_ready(self, pin: Pin, gpu: Gpu | None = None) -> bool:
        """Whether a warm boot of the pin here finds a good cache of each (this host has one
        kind of GPU: `gpu` is moot)."""
        caches = pin.loaded.manifest.active_caches()
        labels = pin.image["labels"] or {}  # the key is what the image is made of, not its id
        keys = [cache_key(key_factors(labels, name, pin.digest, self.arch)) for name in caches]
        return all(
            any(Path(c.host_path).is_dir() for c in warm_candidates(self.ledger, key))
            for key in keys
        )

    def run(self, order: RunOrder) -> RunSummary:
        cell = order.cell
        loaded, args = _as_run(order)
        request = BootRequest(
            loaded, order.pin.digest, order.pin.image, order.pin.tag, cell.boot_profile,
            cell.state == "cold", order.hooks, self.arch, self.home, cell.timeout_s, args,
        )  # fmt: skip
        pending = _pending(order, args)
        try:
            record = boot_then_accept(self.docker, self.ledger, request, self.host_env, Watch())
        except HookFailed as exc:  # recorded as aborted by the boot; no engine ran to judge
            why = f"a pre-boot hook said no: {exc.run.name} exited {exc.run.exit_code}"
            return pending.model_copy(update={"error": why})
        except BootFailed as exc:  # dockerd refused the cell's container: a failed run
            failed = boot_by_id(self.ledger, exc.boot_id) if exc.boot_id else None
            if failed is None:
                return pending.model_copy(update={"outcome": "failed", "error": str(exc)})
            record = failed  # judged as any failed boot: no check passes on it
        summary = self._judge(order, record, pending)
        self.checkpoint("night-run-recorded")
        return summary

    def recorded(self, orders: Sequence[RunOrder]) -> list[RunSummary]:
        """Those runs whose boot here recorded their results, though no summary of them reached
        the night (lifecycle.night.adopt): each one's summary, its recorded results reused.
        Found by the documents of this host's acceptance results, which name their night, cell,
        run and attempt; a run two boots recorded is its first one's."""
        wanted = {(o.night_id, o.cell.id, o.run, o.attempt): o for o in orders}
        found: dict[tuple[str, str, int, int], str] = {}
        for result in reversed(all_results(self.ledger)):  # oldest first
            document = _document(result) if result.source == "acceptance" else None
            run = _run_named(document) if document is not None else None
            if run in wanted:
                found.setdefault(run, result.boot_id)
        summaries = []
        for run, boot_id in found.items():
            order, record = wanted[run], boot_by_id(self.ledger, boot_id)
            assert record is not None, "a result's boot is in the ledger"
            summaries.append(self._judge(order, record, _pending(order, _as_run(order)[1])))
        return summaries

    def _judge(self, order: RunOrder, record: BootRecord, pending: RunSummary) -> RunSummary:
        cell = order.cell
        modes, dirs = {}, {}
        for use in cache_uses(self.ledger, boot_id=record.id):
            if (cache := cache_by_id(self.ledger, use.cache_id)) is not None:
                modes[cache.cache_name] = use.mode
                dirs[cache.cache_name] = Path(cache.host_path)
        path = record.log_path
        log = Path(path).read_text(errors="replace") if path and Path(path).is_file() else ""
        seen = _Seen(log, record.outcome == "ok", dirs)
        condition = _state_condition(cell.state, modes)
        metrics = metrics_in(seen.log)
        margin = metrics.get(cell.rung.margin_metric) if cell.rung else None
        rung: dict[str, float | str | None] = {}
        if cell.rung is not None:
            rung = {
                cell.rung.argument: cell.rung.value,
                "margin_mib": margin,
                "floor_mib": cell.rung.floor_mib,
                "cache_state": cell.state,
            }
        outcomes = []
        for check in cell.checks:
            # A check's result recorded already (its run adopted: its driver was killed before
            # the summary reached the night) is its verdict: results are never recorded twice.
            earlier = result_named(self.ledger, record.id, check.name)
            if earlier is not None and (verdict := _recorded_verdict(earlier)) is not None:
                outcomes.append(CheckOutcome(verdict=verdict, result_id=earlier.id))
                continue
            # Each verdict is a result of the boot; its findings are the result's document.
            verdict = judge(check, seen, [condition])
            document = {
                "night": order.night_id,
                "cell": cell.id,
                "run": order.run,
                "attempt": order.attempt,
                "verdict": verdict.model_dump(mode="json"),
            }
            request = ResultRequest(
                record.id, verdict.check, verdict.status, metrics=dict(rung), note=verdict.why,
                document=json.dumps(document, indent=1, sort_keys=True).encode(),
                document_where=f"the verdict of check {verdict.check}", source="acceptance",
            )  # fmt: skip
            result = earlier or add_result(self.ledger, request, datetime.now(UTC))
            outcomes.append(CheckOutcome(verdict=verdict, result_id=result.id))
        done = {
            "boot_id": record.id,
            "host": record.host,
            "outcome": record.outcome,
            "image_id": record.image_id,
            "exit_code": record.exit_code,
            "error": record.error,
            "cache_modes": modes,
            "verdict": worst([o.verdict.status for o in outcomes]),
            "checks": outcomes,
            "metrics": metrics,
            "margin_mib": margin,
            "log": record.log_path,
            "evidence": record.evidence_path,
            "started_at": record.started_at,
            "ended_at": record.ended_at,
        }
        return pending.model_copy(update=done)

    def archive(self, boots: Mapping[str, str | None]) -> EndSummary:
        """The caches those boots used and the results on them, archived (`boots`: boot id ->
        the cluster node that ran it, None for this host)."""
        if self.s3 is None or self.location is None:
            return EndSummary(action="archive", ok=False, detail="no archive location is set")
        here = [boot_id for boot_id, node in boots.items() if node is None]
        return _not_here(boots, self._archive(here, self.location))

    def _archive(self, boot_ids: list[str], location: ArchiveLocation) -> EndSummary:
        cache_ids = self._caches_of(boot_ids)
        reports = archive_caches(
            self.ledger, self.home, self.s3, location, cache_ids, host_env=self.host_env,
            with_content=self.with_content,
            dry_run=False, progress=None,
        )  # fmt: skip
        reports = with_results(self.ledger, self.s3, location, reports, None, self.host_env)
        sent = sum(r.bytes_uploaded for r in reports)
        detail = f"{len(reports)} caches and the results standing on them, verified"
        return EndSummary(
            action="archive", ok=True, detail=detail, location=location.url(),
            caches=len(reports), bytes=sent,
        )  # fmt: skip

    def teardown(self, boots: Mapping[str, str | None]) -> EndSummary:
        here = [boot_id for boot_id, node in boots.items() if node is None]
        return _not_here(boots, self._teardown(here))

    def _teardown(self, boot_ids: list[str]) -> EndSummary:
        cache_ids = self._caches_of(boot_ids)
        if not cache_ids:
            return EndSummary(action="teardown", ok=True, detail="no cache of this night is left")
        services = Services(self.docker, self.s3, self.host_env)
        request = TeardownRequest(Selection(cache_ids=tuple(cache_ids)))
        with teardown_lock(self.home):
            plan = make_plan(self.ledger, self.home, services, request)
            result = run_teardown(self.ledger, self.home, services, plan, request)
        freed = sum(o.bytes_freed for o in result.removed)
        kept = [f"{o.cache_id}: {o.problem}" for o in result.failed]
        detail = f"removed {len(result.removed)} caches after their evidence was archived"
        if kept:
            detail += f"; kept {len(kept)}: {kept[0]}"
        return EndSummary(
            action="teardown", ok=not kept and not plan.has_problems, detail=detail,
            caches=len(result.removed), bytes=freed,
        )  # fmt: skip

    def _caches_of(self, boot_ids: Iterable[str]) -> list[str]:
        """The caches those boots used that are still on this host."""
        found: dict[str, None] = {}
        for boot_id in boot_ids:
            for use in cache_uses(self.ledger, boot_id=boot_id):
                cache = cache_by_id(self.ledger, use.cache_id)
                if (
                    cache is not None
                    and cache.state in ("live", "archived")
                    and Path(cache.host_path).is_dir()
                ):
                    found[cache.id] = None
        return list(found)


def _as_run(order: RunOrder) -> tuple[LoadedManifest, tuple[str, ...]]:
    """The manifest and engine args the run boots with: a rung's at its value, not the
    manifest's."""
    cell = order.cell
    loaded, args = order.pin.loaded, cell.args_of_run(order.run)
    if cell.rung is not None:
        tuned = {k: v for k, v in loaded.manifest.tuned.items() if k != cell.rung.argument}
        loaded = replace(loaded, manifest=loaded.manifest.model_copy(update={"tuned": tuned}))
        args = (engine_flag(cell.rung.argument), f"{cell.rung.value:g}", *args)
    return loaded, args


def _pending(order: RunOrder, args: tuple[str, ...]) -> RunSummary:
    """The run's summary as known before its boot; the boot and its checks fill in the rest."""
    cell = order.cell
    return RunSummary(
        cell=cell.id, run=order.run, attempt=order.attempt, boot_id=None,
        host=socket.gethostname(), outcome="aborted", exit_code=None,
        instrumented=cell.instrumented, hooks=[h.name for h in order.hooks],
        args=list(args), verdict="inconclusive", checks=[],
    )  # fmt: skip


def _document(result: ResultRecord) -> dict[str, Any] | None:
    """The JSON object a result's document holds (a night's: its run and verdict), if readable."""
    try:
        document = json.loads(Path(result.document_path or "").read_bytes())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _run_named(document: dict[str, Any]) -> tuple[str, str, int, int] | None:
    """(night, cell, run, attempt) a night's result document names; None: no night's."""
    try:
        night, cell = str(document["night"]), str(document["cell"])
        return night, cell, int(document["run"]), int(document["attempt"])
    except (KeyError, TypeError, ValueError):
        return None


def _recorded_verdict(result: ResultRecord) -> CheckVerdict | None:
    """The verdict a night's result was recorded with (its document's); None if unreadable."""
    document = _document(result)
    try:
        return CheckVerdict.model_validate(document["verdict"]) if document else None
    except (KeyError, ValidationError):
        return None


@dataclass(frozen=True)
class _Seen:
    """What a local boot left: its log, and its caches' dirs by name."""

    log: str
    boot_ok: bool
    dirs: dict[str, Path]

    def files(self, cache: str, glob: str) -> list[str]:
        root = self.dirs.get(cache)
        return sorted(str(p.relative_to(root)) for p in root.glob(glob)) if root else []


def _state_condition(state: str, modes: dict[str, str]) -> Finding:
    """The cell's cache state, met or not: a warm cell whose caches started cold measured a
    cold boot."""
    other = sorted(name for name, mode in modes.items() if mode != state)
    seen = f"{', '.join(other)} started {'cold' if state == 'warm' else 'warm'}" if other else None
    return Finding(kind="condition", what=f"every cache {state}", observed=not other, seen=seen)


def _not_here(boots: Mapping[str, str | None], done: EndSummary) -> EndSummary:
    """`done` on this host's boots, not done for the boots a cluster node ran (a night begun
    with `--engine ray`, resumed here): their caches are on those nodes, out of this reach."""
    elsewhere = sorted({node for node in boots.values() if node is not None})
    if not elsewhere:
        return done
    detail = f"{done.detail}; not done on {', '.join(elsewhere)}, which ran boots of this night"
    return done.model_copy(update={"ok": False, "detail": detail + ": resume it with --engine ray"})
