"""The engine's counters, printed at exit in Prometheus' text format (as `/metrics` shows them)."""

from __future__ import annotations

import sys

_values: dict[str, float] = {}


def add(name: str, amount: float = 1.0) -> None:
    """Count `amount` more of `name`."""
    _values[name] = _values.get(name, 0.0) + amount


def set_value(name: str, value: float) -> None:
    """Set the gauge `name`."""
    _values[name] = value


def keep_max(name: str, value: float) -> None:
    """Set the gauge `name` to `value` if that is higher (or it has no value yet)."""
    _values[name] = max(value, _values.get(name, value))


def keep_min(name: str, value: float) -> None:
    """Set the gauge `name` to `value` if that is lower (or it has no value yet)."""
    _values[name] = min(value, _values.get(name, value))


def dump() -> None:
    """Every metric, one `name value` line each, after a comment naming what follows."""
    lines = ["# demollm metrics at exit"]
    lines += [f"{name} {_number(value)}" for name, value in sorted(_values.items())]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"
