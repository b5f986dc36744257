"""Checks that need more than one field's type: tuned ranges, stray secrets, an engine
argument set twice."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from lifecycle.manifest.model import Manifest, engine_flag
from lifecycle.manifest.source import KeyPath

Finding = tuple[KeyPath, str]


def _fraction(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        return f"must be a number in (0, 1], got {value!r}"
    return None


def _positive_int(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"must be an integer > 0, got {value!r}"
    return None


def _non_negative(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return f"must be a number >= 0, got {value!r}"
    return None


# vLLM engine arguments whose meaning fixes a range; others are recorded as given.
KNOWN_TUNED: dict[str, Callable[[object], str | None]] = {
    "gpu_memory_utilization": _fraction,
    "max_num_seqs": _positive_int,
    "max_model_len": _positive_int,
    "max_num_batched_tokens": _positive_int,
    "tensor_parallel_size": _positive_int,
    "pipeline_parallel_size": _positive_int,
    "data_parallel_size": _positive_int,
    "block_size": _positive_int,
    "swap_space": _non_negative,
    "cpu_offload_gb": _non_negative,
    "kv_cache_memory_bytes": _positive_int,
}

_ARG_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# A literal value under one of these names is a secret written into the manifest.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|CREDENTIAL", re.I)


def check_tuned(manifest: Manifest) -> Iterator[Finding]:
    """Range-check the tuned values whose meaning we know."""
    for name, tuned in manifest.tuned.items():
        if not _ARG_NAME.match(name):
            yield ("tuned", name), "must be a vLLM engine argument in snake_case"
            continue
        check = KNOWN_TUNED.get(name)
        problem = check(tuned.value) if check else None
        if problem:
            yield ("tuned", name, "value"), problem


def check_profiles(manifest: Manifest) -> Iterator[Finding]:
    """Refuse secret values written into a profile's env (they belong in `secrets` by name),
    and a name both in env and in secrets (one of the two values would silently win)."""
    for profile_name, profile in manifest.profiles.items():
        for key in profile.env:
            if _SECRET_NAME.search(key):
                yield (
                    ("profiles", profile_name, "env", key),
                    f"looks like a secret; list {key!r} under secrets: so it is passed "
                    "by name from the host environment and never stored",
                )
        for index, name in enumerate(profile.from_host):
            where = ("profiles", profile_name, "from_host", index)
            if _SECRET_NAME.search(name):
                yield (
                    where,
                    f"looks like a secret; list {name!r} under secrets (from_host is recorded)",
                )
            elif name in profile.env or name in profile.secrets:
                yield where, f"{name} is also set in env or secrets; name it in one place"
        for index, name in enumerate(profile.secrets):
            where = ("profiles", profile_name, "secrets", index)
            if name in profile.env:
                yield (
                    where,
                    (
                        f"{name} is also set in env; a name is either written here (env) or "
                        "passed from the host (secrets), not both"
                    ),
                )
            elif name in profile.secrets[:index]:
                yield where, f"{name} is listed twice"


def check_tuned_in_args(manifest: Manifest) -> Iterator[Finding]:
    """Refuse an engine profile's arg that a tuned value appends too (`--flag` or
    `--flag=VALUE`): the engine would get it twice, and which one wins is its parser's choice.
    A profile that runs another program may use the flag for its own purposes."""
    flags = {engine_flag(name): name for name in manifest.tuned}
    for profile_name, profile in manifest.profiles.items():
        if not profile.engine:
            continue
        for index, arg in enumerate(profile.args):
            name = flags.get(arg.partition("=")[0])
            if name is not None:
                yield (
                    ("profiles", profile_name, "args", index),
                    f"{engine_flag(name)} is also tuned.{name}, which boot appends to this "
                    "engine profile; keep one (or say engine: false if it runs another program)",
                )


def unconfirmed_pins(manifest: Manifest) -> Iterator[Finding]:
    """The pins listed under `engine.unconfirmed`: `validate` warns, `build` refuses."""
    for name, value, why in manifest.engine.unconfirmed_pins():
        yield ("engine", "unconfirmed", name), f"{name} {value} is not confirmed ({why})"
