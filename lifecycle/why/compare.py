"""Two boots side by side: what each was, and which factor deciding JIT cache reuse changed.

A boot's facts are read from the ledger and its evidence dir (`spec.json`, `evidence.json`,
vLLM's `cache_key_factors.json`). Changes are listed in the order a cache is lost: lifecycle's
cache key (not the image id, which a rebuild changes), the manifest, vLLM's compile dir and its
hashes, their raw factors, the rest of the env (unhashed), then writes outside the caches.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifecycle.errors import LifecycleError
from lifecycle.evidence.layout import UntrackedSummary, summarize
from lifecycle.evidence.verdict import RecordedUse, recorded_uses, recorded_warmth
from lifecycle.home import read_record
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    BootRecord,
    CacheDamage,
    CacheRecord,
    CacheUse,
    baked_uses,
    cache_by_id,
    cache_uses,
    damage_found_by,
    untracked_writes,
)
from lifecycle.table import count_of, human_bytes

# Per boot, never a cause: its own id, and where its caches are mounted from on this host.
_PER_BOOT_ENV = frozenset({"LIFECYCLE_BOOT_ID"})
_KEY = "manifest, base image, pins, arch"
_DIR_HASH = "vLLM's cache dir hash"
# The four hashes vLLM folds into its compile dir's: (key in its log line, name shown).
_HASHES = (("env", "env"), ("cfg", "config"), ("comp", "compiler"), ("code", "code"))


@dataclass(frozen=True)
class Change:
    """One factor that differs between the boot asked about (`now`) and the other (`then`)."""

    kind: str  # image | manifest | arch | profile | compile-dir | hash | factor | env | untracked
    name: str
    then: Any
    now: Any
    note: str = ""

    def line(self) -> str:
        """`env VLLM_X: 10.0.0.7 → 10.0.0.9 (in vLLM's env hash)`."""
        note = f" ({self.note})" if self.note else ""
        return f"{self.kind} {self.name}: {_shown(self.then)} → {_shown(self.now)}{note}"


def compare(now: BootFacts, then: BootFacts) -> tuple[list[Change], list[str]]:
    """(what changed, the names of what was compared and found the same)."""
    pairs = list(_all(now, then))
    return [c for c, _ in pairs if c is not None], [label for c, label in pairs if c is None]


def _all(now: BootFacts, then: BootFacts) -> Iterator[tuple[Change | None, str]]:
    old, new = then.boot, now.boot
    hashes_then, hashes_now = _hashes(then), _hashes(now)
    folded = "folded into vLLM's cache dir hash"
    rows = [  # label: kind, name, then, now, note
        ("image", "image", "id", old.image_id, new.image_id, "not in the cache key"),
        ("lifecycle cache key", "key", "lifecycle", _keys(then), _keys(now), _KEY),
        ("GPU arch", "arch", "GPU", _archs(then), _archs(now), "in lifecycle's cache key"),
        ("manifest digest", "manifest", "digest", old.manifest_digest, new.manifest_digest, ""),
        ("profile", "profile", "name", old.profile, new.profile, ""),
        ("vLLM compile dir", "compile-dir", "vLLM", _dirs(then), _dirs(now), _DIR_HASH),
        *(
            (f"{label} hash", "hash", label, hashes_then.get(key), hashes_now.get(key), folded)
            for key, label in _HASHES
        ),
    ]
    for label, kind, name, before, after, note in rows:
        if before is None and after is None:
            continue  # seen in neither boot (an engine that logs no compile dir): not "the same"
        yield _differs(kind, name, before, after, note), label
    yield from _factor_changes(then, now)
    yield from _env_changes(then, now)
    yield _untracked(then, now), "writes outside tracked caches"
    yield from _cache_changes(then, now)


def _cache_changes(then: BootFacts, now: BootFacts) -> Iterator[tuple[Change | None, str]]:
    """Each cache whose verdict differs, with what lifecycle saw and did about it."""
    before = {r.name: r for r in then.recorded}
    for use in now.recorded:
        other = before.get(use.name)
        if other is None:
            continue
        if other.verdict == use.verdict:  # the same verdict, from a layer or from a host dir
            if use.mode != other.mode and "baked" in (use.mode, other.mode):
                source = "a layer of the image" if use.mode == "baked" else "a dir of this host"
                yield Change("cache", use.name, other.mode, use.mode, f"read from {source}"), ""
            continue
        mine, theirs = now.caches.get(use.name), then.caches.get(use.name)
        if use.mode in ("warm", "baked"):
            note = _warm_note(use)
        elif (damage := now.passed_over.get(use.name)) is not None:
            note = (
                f"{damage.cache_id} was passed over, changed behind lifecycle's back since its"
                f" last scan ({damage.described}): this boot started the cache cold"
            )
        elif mine and theirs and mine.id == theirs.id:
            note = "this boot created the cache the other reused: a first boot is cold"
        elif mine and theirs and mine.cache_key == theirs.cache_key:
            note = "same cache key: started cold by --cold, or no good cache had it then"
        else:
            note = "a new cache: lifecycle's cache key (manifest, base image, pins, arch) differs"
        yield Change("cache", use.name, other.verdict, use.verdict, note), ""


def _warm_note(use: RecordedUse) -> str:
    """What the engine did with a cache mounted warm (or baked), as its verdict was judged."""
    read = f"{count_of(use.read, 'file')} read" if use.read is not None else "reads not observed"
    how = "baked into the image" if use.mode == "baked" else "mounted warm"
    if use.verdict == "mounted-but-missed":
        written = count_of(use.written, "file")
        return f"{how}, and the engine compiled {written} into it ({read})"
    if use.verdict == "unused":
        return f"{how}, and the engine opened none of its files ({read})"
    if use.verdict == "warm-hit":
        return f"{how} and reused: {read}, nothing compiled into it"
    return f"{how}; {count_of(use.written, 'file')} written, {read}"


def missed(facts: BootFacts) -> list[RecordedUse]:
    """The caches the boot compiled into although they were mounted warm."""
    return [r for r in facts.recorded if r.verdict == "mounted-but-missed"]


def _differs(kind: str, name: str, then: Any, now: Any, note: str = "") -> Change | None:
    return None if then == now else Change(kind, name, then, now, note)


def _keys(facts: BootFacts) -> str | None:
    """Each cache's lifecycle key, shortened: `flashinfer 0123456789ab, …`."""
    keys = [f"{name} {cache.cache_key[:12]}" for name, cache in sorted(facts.caches.items())]
    return ", ".join(keys) if keys else None


def _archs(facts: BootFacts) -> str | None:
    archs = sorted({c.arch for c in facts.caches.values()})
    return ", ".join(archs) if archs else None


def _dirs(facts: BootFacts) -> str | None:
    """The hash part of vLLM's compile dir(s): torch_compile_cache/<hash10>/…"""
    found = []
    for path in facts.compile_dirs:
        parts = path.split("/")
        if "torch_compile_cache" in parts and parts.index("torch_compile_cache") + 1 < len(parts):
            found.append(parts[parts.index("torch_compile_cache") + 1])
    return ", ".join(sorted(set(found))) or None


def _hashes(facts: BootFacts) -> dict[str, str]:
    last = facts.factor_hashes[-1] if facts.factor_hashes else {}
    return {k: v for k, v in last.items() if k != "dir"}


def _one_factors(facts: BootFacts) -> dict[str, Any]:
    """The factors of the compile dir the boot used (its log names it); the cache may hold
    other boots' dirs too."""
    used = facts.compile_dirs[-1].rstrip("/") if facts.compile_dirs else None
    for relative, factors in sorted(facts.factors.items()):
        if used is not None and used.endswith("/" + relative):
            return factors
    return facts.factors[sorted(facts.factors)[-1]] if len(facts.factors) == 1 else {}


def _factor_changes(then: BootFacts, now: BootFacts) -> Iterator[tuple[Change | None, str]]:
    before, after = _one_factors(then), _one_factors(now)
    if not before or not after:
        return
    env_before, env_after = before.get("env", {}), after.get("env", {})
    if isinstance(env_before, Mapping) and isinstance(env_after, Mapping):
        names = sorted(set(env_before) | set(env_after))
        same = f"the {len(names)} env vars of vLLM's env hash"
        yield from _env_diff(env_before, env_after, names, "in vLLM's env hash", same)
    for key in sorted((set(before) | set(after)) - {"env"}):
        yield (
            _differs("factor", key, before.get(key), after.get(key), "in cache_key_factors.json"),
            key,
        )


def _env_changes(then: BootFacts, now: BootFacts) -> Iterator[tuple[Change | None, str]]:
    if then.env is None or now.env is None:
        return
    hashed = set(_one_factors(now).get("env") or {}) | set(_one_factors(then).get("env") or {})
    names = sorted((set(then.env) | set(now.env)) - _PER_BOOT_ENV - hashed)
    yield from _env_diff(
        then.env, now.env, names, _env_note(now, bool(hashed)), "the container's other env"
    )


def _env_note(now: BootFacts, factors_known: bool) -> str:
    """What a changed env var outside vLLM's env hash means for this boot: the likely cause
    when the engine then compiled into a cache mounted warm (whatever keys it uses: Inductor,
    Triton and FlashInfer hash env and config of their own), else a change without effect."""
    compiled = missed(now)
    if compiled:
        where = ", ".join(f"{r.written} files into {r.name}" for r in compiled)
        return f"the likely cause: after it changed, the engine compiled {where}"
    if factors_known:
        return "not in vLLM's env hash, and no cache was compiled into after it changed"
    return "no cache was compiled into after it changed"


def _env_diff(
    then: Mapping[str, Any], now: Mapping[str, Any], names: list[str], note: str, same: str
) -> Iterator[tuple[Change | None, str]]:
    """A change for each of `names` whose value differs; else one `same` row."""
    changed = [
        Change("env", n, then.get(n), now.get(n), note) for n in names if then.get(n) != now.get(n)
    ]
    for change in changed:
        yield change, ""
    if not changed:
        yield None, same


def _untracked(then: BootFacts, now: BootFacts) -> Change | None:
    def text(facts: BootFacts) -> str:
        u = facts.untracked
        return f"{human_bytes(u.bytes)} in {u.files} files" if u and u.files else "none"

    if now.untracked is None or not now.untracked.files:
        return _differs("untracked", "writes", text(then), text(now))
    where = ", ".join(d for d, _, _ in now.untracked.roots[:3])
    return Change("untracked", "writes", text(then), text(now), f"lost with the container: {where}")


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
    text = str(value)
    return text if len(text) <= 72 else text[:12] + "…" + text[-8:]


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
    passed_over: dict[str, CacheDamage]  # cache name -> the cache it found changed, not mounted

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


def boot_uses(ledger: Ledger, boot_id: str) -> tuple[CacheUse, ...]:
    """A boot's cache uses, a baked cache as a use of mode `baked`."""
    baked = (use.as_use() for use in baked_uses(ledger, boot_id))
    return (*cache_uses(ledger, boot_id=boot_id), *baked)


def boot_verdict(ledger: Ledger, boot_id: str) -> str:
    """A boot's verdict, as `BootFacts.verdict` says it, from the ledger alone."""
    writes = [(w.path, w.bytes) for w in untracked_writes(ledger, boot_id)]
    return recorded_warmth(recorded_uses(boot_uses(ledger, boot_id)), writes)[0]


def boot_facts(ledger: Ledger, boot: BootRecord) -> BootFacts:
    """Everything `why` compares, for one boot (a baked cache as a use of mode `baked`)."""
    uses = boot_uses(ledger, boot.id)
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
        passed_over={
            cache.cache_name: damage
            for damage in damage_found_by(ledger, boot.id)
            if (cache := cache_by_id(ledger, damage.cache_id)) is not None
        },
    )


def _read_json(evidence: Path | None, name: str) -> dict[str, Any] | None:
    """A record of the boot's evidence dir, None when it has none; a damaged one is named."""
    if evidence is None:
        return None
    path = evidence / name
    try:
        data = read_record(path)
        if data is not None and not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise LifecycleError(f"{path}: damaged evidence of boot {evidence.name}: {exc}") from None
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
                factors = read_record(copy)  # bounded: a copy may be anything by now
            except (OSError, ValueError):
                continue  # a copy that is not JSON (redacted, cut) says nothing comparable
            if isinstance(factors, dict):
                found[str(Path(entry["path"]).parent)] = factors
    return found
