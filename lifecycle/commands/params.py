"""Parameter types the CLI declares once and every destructive verb reuses.

An option left out means "no filter" (every cache, every version, the configured archive), so
an option given with nothing in it must not silently mean the same: `--older-than ''` from an
unset shell variable would widen a teardown to every cache. Only click is imported here: the
CLI loads this module for `--help` too.
"""

from __future__ import annotations

from typing import Any

import click


class Given(click.types.StringParamType):
    """Text that says something: an empty or blank value is a usage error naming the flag.

    (An integer option needs nothing more: click's int already refuses a blank value.)"""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The text, or a usage error (exit 2) when there is nothing in it."""
        text = super().convert(value, param, ctx)
        if not text.strip():
            self.fail(f"{text!r} is empty; give a value or leave it out", param, ctx)
        return text


GIVEN = Given()
