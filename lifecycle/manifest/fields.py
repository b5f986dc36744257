"""Field types the manifest and the documents beside it (night plans, ladders) share."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

_SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def version_text(value: object) -> object:
    """A version (or a release named by one) as text: YAML reads `0.30` as the float 0.3, so a
    number is refused rather than taken for the wrong release."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(
            f"YAML read this as the number {value!r}; quote the version, e.g. '0.30.0'"
        )
    return value


def matching(pattern: re.Pattern[str], expected: str) -> AfterValidator:
    """A string that must match `pattern`; else `'<value>' <expected>`."""

    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} {expected}")
        return value

    return AfterValidator(check)


Text = Annotated[str, Field(min_length=1)]
Slug = Annotated[str, matching(_SLUG, "must be lower-case letters, digits, '.', '_' or '-'")]


class Strict(BaseModel):
    """A model of our documents: unknown keys are errors, nothing is coerced, values are frozen."""

    # No .inf or .nan: no measured value is infinite, and a NaN equals nothing, itself included.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
