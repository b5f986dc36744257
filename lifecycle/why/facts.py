"""What one boot was, as `why` compares it: its record, its caches and how it used them, its
environment, the engine's cache key factors, its verdicts and its writes outside the caches.

Read from this host's ledger and the boot's evidence dir (`spec.json`, the bundle's
`evidence.json` and its copies of vLLM's `cache_key_factors.json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifecycle.evidence.layout import UntrackedSummary, summarize
from lifecycle.evidence.verdict import RecordedUse, recorded_uses, recorded_warmth
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    BootRecord,
    CacheRecord,
    CacheUse,
    cache_by_id,
    cache_uses,
    untracked_writes,
)


@dataclass(frozen=True)
class BootFacts:
    """One boot, as far as its warmth goes."""

    boot: BootRecord
    uses: tuple[CacheUse, ...]
    caches: dict[str, CacheRecord]  # cache name -> the cache the boot mounted
    env: dict[str, str] | None  # None: recorded before boots kept their spec
    factors: dict[str, dict[str, Any]]  # compile dir (relative to the cache) -> factors
    factor_hashes: list[dict[str, str]]  # the "torch.compile cache factors" lines
    compile_dirs: list[str]  # "Using cache directory" of the log
    untracked: UntrackedSummary | None
    writes: list[tuple[str, int | None]]  # (path, bytes) written outside the caches

    @property
    def verdict(self) -> str:
        """The boot's verdict (cold-compiled, warm-hit, partial, …); `unknown` for a boot
        recorded before verdicts were."""
        return recorded_warmth(self.recorded, self.writes)[0]

    @property
    def warmth(self) -> str:
        """The boot's warmth in a phrase, as `lifecycle boots` shows it."""
        return recorded_warmth(self.recorded, self.writes)[1]

    @property
    def recorded(self) -> list[RecordedUse]:
        """Its cache uses, as judged at the end of the boot."""
        return recorded_uses(self.uses)


def boot_facts(ledger: Ledger, boot: BootRecord) -> BootFacts:
    """Everything `why` compares, for one boot."""
    uses = tuple(cache_uses(ledger, boot_id=boot.id))
    caches = {}
    for use in uses:
        cache = cache_by_id(ledger, use.cache_id)
        if cache is not None:
            caches[cache.cache_name] = cache
    writes = untracked_writes(ledger, boot.id)
    evidence = Path(boot.evidence_path) if boot.evidence_path else None
    summary = _read_json(evidence, "bundle/evidence.json") or {}
    log = summary.get("log", {})
    spec = _read_json(evidence, "spec.json")
    return BootFacts(
        boot=boot,
        uses=uses,
        caches=caches,
        env=spec.get("environment", {}) if spec is not None else None,
        factors=_factors(evidence, summary),
        factor_hashes=list(log.get("compile_factors", [])),
        compile_dirs=[log["compile_cache_dir"]] if log.get("compile_cache_dir") else [],
        untracked=summarize([(w.path, w.bytes) for w in writes]) if writes else None,
        writes=[(w.path, w.bytes) for w in writes],
    )


def _read_json(evidence: Path | None, name: str) -> dict[str, Any] | None:
    path = evidence / name if evidence else None
    if path is None or not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _factors(evidence: Path | None, summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each copied `cache_key_factors.json` of the bundle, by its compile dir."""
    found: dict[str, dict[str, Any]] = {}
    if evidence is None:
        return found
    for name, cache in summary.get("caches", {}).items():
        for entry in cache.get("evidence", []):
            if not entry["path"].endswith("cache_key_factors.json") or not entry["copied"]:
                continue
            copy = evidence / "bundle" / name / entry["path"]
            try:
                found[str(Path(entry["path"]).parent)] = json.loads(copy.read_text())
            except (OSError, ValueError):
                continue  # a copy that is not JSON (redacted, cut) says nothing comparable
    return found
