"""Durations as a user writes them (`90s`, `2h`, `1d12h`): a listing's `--older-than`, a
policy's `keep_within`. Apart from the policy's models so that a listing's filter does not
import pydantic and the manifest loader for a regular expression."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from lifecycle.errors import LifecycleError, quoted

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(?:\d+[smhdw])+")


# No retention reaches a century; the bound keeps `now - duration` inside datetime's range.
_MAX_DURATION = timedelta(days=36500)


def duration_length(text: str) -> timedelta:
    """The length `text` names; ValueError says what was expected instead."""
    if not _DURATION.fullmatch(text.strip()):
        raise ValueError(f"{quoted(text)}: expected a duration such as 30m, 2h, 3d, 1d12h")
    parts = re.findall(r"(\d+)([smhdw])", text.strip())
    # A number of more digits than a century has seconds is over the bound, and int() of
    # thousands of digits would fail (or be slow) on its own.
    too_long = any(len(n.lstrip("0")) > 10 for n, _ in parts)
    seconds = 0 if too_long else sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)
    if too_long or seconds > _MAX_DURATION.total_seconds():
        raise ValueError(f"{quoted(text)}: expected a duration of at most {_MAX_DURATION.days}d")
    return timedelta(seconds=seconds)


def parse_duration(text: str, option: str = "--older-than") -> timedelta:
    """'90s', '30m', '2h', '3d', '1w', or a sum such as '1d12h' (given as `option`)."""
    try:
        return duration_length(text)
    except ValueError as error:
        raise LifecycleError(f"{option} {error}") from None


def instant(at: str) -> datetime | None:
    """The moment an ISO 8601 time with its zone names (as lifecycle writes them); None for
    anything else, as a record from outside may hold: no time, or one of no zone, which cannot
    be compared with one that has."""
    try:
        found = datetime.fromisoformat(at)
    except (ValueError, TypeError):
        return None
    return found if found.tzinfo is not None else None
