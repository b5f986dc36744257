"""A check's verdict on one boot, from what was observed, never from what was not.

First `path`, what makes the check's path run: any of it absent makes the verdict
`inconclusive`, whatever else the log says (a CPU-tier test whose tier was never asked measured
only the GPU). Then `fail_when` (anything observed fails), then `pass_when` (all observed on a
boot that ended ok passes). A log line or metric not found in a log that lifecycle cut (an
engine flooding its output: lifecycle.kept_log) neither passes nor fails: it is inconclusive.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Protocol

from lifecycle.kept_log import is_cut, latest_part
from lifecycle.manifest.model import CACHE_FILE, CONDITION, Evidence
from lifecycle.night.plan import Check, Frozen

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
# A metric as Prometheus' text format prints it: `name{labels} value`, alone on its line.
_METRIC_LINE = re.compile(
    r"(?m)^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?[ \t]+"
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)[ \t]*$"
)


class Observed(Protocol):
    """What a boot left to look at; the engine that ran it provides it (lifecycle.night.engine)."""

    @property
    def log(self) -> str:
        """The boot's (redacted) log."""
        ...

    @property
    def boot_ok(self) -> bool:
        """Whether the engine ended ok."""
        ...

    def files(self, cache: str, glob: str) -> list[str]:
        """Paths matching `glob` in the boot's cache named `cache` (empty: none, or no cache)."""
        ...


class Finding(Frozen):
    """One piece of evidence, looked for: observed or not, and what was seen instead."""

    kind: str  # log | metric | file | condition
    what: str
    observed: bool
    seen: str | None = None  # the matching line, the metric's value, the files found


class CheckVerdict(Frozen):
    """A check's verdict on one boot, with every finding it rests on."""

    check: str
    status: str  # pass | fail | inconclusive
    why: str
    creates: list[str]
    path: list[Finding]
    failed: list[Finding]  # the fail_when findings
    passed: list[Finding]  # the pass_when findings


def metrics_in(log: str) -> dict[str, float]:
    """The engine's metrics printed in its log; the last value of each name (of a log cut by
    lifecycle.boot.log, from its tail only: a value in its head may be out of date)."""
    return {m["name"]: float(m["value"]) for m in _METRIC_LINE.finditer(latest_part(log))}


def judge(check: Check, seen: Observed, preconditions: Sequence[Finding] = ()) -> CheckVerdict:
    """The check's verdict. `preconditions` are conditions the cell itself must have met (the
    cache state it asked for); one not met makes the verdict inconclusive like a missing path."""
    metrics = metrics_in(seen.log)
    path = [*preconditions, *look(check.path, seen, metrics)]
    failed = look(check.fail_when, seen, metrics)
    passed = look(check.pass_when, seen, metrics)
    creates = [c.what for c in check.creates]
    missing = [f for f in path if not f.observed]
    if missing:
        status, why = "inconclusive", "the path never ran: " + "; ".join(_missing(missing))
        if creates:
            why += f" (the check created: {', '.join(creates)})"
    elif hits := [f for f in failed if f.observed]:
        status, why = "fail", "observed: " + "; ".join(_seen(f) for f in hits)
    elif not seen.boot_ok:
        status, why = "fail", "the boot did not end ok"
    elif unsure := _unseen_in_cut_log(seen.log, [*failed, *passed]):
        status, why = (
            "inconclusive",
            "the log was cut: not seen in what was kept: " + "; ".join(_missing(unsure)),
        )
    elif absent := [f for f in passed if not f.observed]:
        status, why = "fail", "not observed: " + "; ".join(_missing(absent))
    else:
        status, why = "pass", "observed: " + "; ".join(_seen(f) for f in passed)
    return CheckVerdict(
        check=check.name,
        status=status,
        why=why,
        creates=creates,
        path=path,
        failed=failed,
        passed=passed,
    )


def look(evidence: Evidence, seen: Observed, metrics: dict[str, float]) -> list[Finding]:
    """Each piece of `evidence`, looked for in what the boot left."""
    found = []
    for kind, what in evidence.items():
        if kind == "log":
            match = re.search(what, seen.log, re.MULTILINE)
            line = _line_of(seen.log, match.start()) if match else None
            found.append(Finding(kind=kind, what=what, observed=match is not None, seen=line))
        elif kind == "metric":
            found.append(_metric(what, metrics))
        else:
            spec = CACHE_FILE.fullmatch(what)
            assert spec is not None, "the plan checked the form"
            files = seen.files(spec["cache"], spec["glob"])
            shown = ", ".join(files[:3]) + (" …" if len(files) > 3 else "") if files else None
            found.append(Finding(kind=kind, what=what, observed=bool(files), seen=shown))
    return found


def _metric(condition: str, metrics: dict[str, float]) -> Finding:
    parts = CONDITION.match(condition)
    assert parts is not None, "the plan checked the form"
    value = metrics.get(parts["name"])
    if value is None:
        return Finding(kind="metric", what=condition, observed=False)
    holds = _OPERATORS[parts["op"]](value, float(parts["value"]))
    return Finding(kind="metric", what=condition, observed=holds, seen=f"{parts['name']}={value:g}")


def _unseen_in_cut_log(log: str, findings: list[Finding]) -> list[Finding]:
    """The log lines and metrics not found at all in a log that lifecycle cut: they may be in
    what was left out (a metric found with a value that fails its condition was seen)."""
    if not is_cut(log):
        return []
    return [f for f in findings if f.kind in ("log", "metric") and f.seen is None]


def _line_of(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end != -1 else len(text)].strip()[:300]


def _missing(findings: list[Finding]) -> list[str]:
    texts = []
    for f in findings:
        label = {"log": "log line", "metric": "metric", "file": "cache file"}.get(f.kind, f.kind)
        also = f" ({f.seen})" if f.seen else ""
        texts.append(f"{label} {f.what!r}{also}")
    return texts


def _seen(finding: Finding) -> str:
    return finding.seen or finding.what
