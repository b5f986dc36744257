"""Checks that need more than one field's type: tuned ranges, stray secrets, an engine
argument set twice, where JIT caches are mounted and which env vars point the engine at them
(docs/manifests.md, Caches, says why); and the JIT caches every engine writes at boot
(`DEFAULT_CACHES`), so manifests need not repeat them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from itertools import combinations
from pathlib import PurePosixPath
from typing import Any

from lifecycle.manifest.model import JitCache, LadderMethod, Manifest, engine_flag
from lifecycle.manifest.source import KeyPath
from lifecycle.redact import is_sensitive_key, redact

# Each env var moves one cache root off the container's ephemeral home into a mount we track.
# FlashInfer nests `.cache/flashinfer/<version>/<arch>/` under its base; the others use the
# directory as given. Inductor's precompiled headers are off: docs/manifests.md (Caches) says why.
DEFAULT_CACHES: dict[str, dict[str, Any]] = {
    "vllm": {"path": "/var/cache/lifecycle/vllm", "env": "VLLM_CACHE_ROOT"},
    "flashinfer": {"path": "/var/cache/lifecycle/flashinfer", "env": "FLASHINFER_WORKSPACE_BASE"},
    "triton": {"path": "/var/cache/lifecycle/triton", "env": "TRITON_CACHE_DIR"},
    "inductor": {
        "path": "/var/cache/lifecycle/inductor",
        "env": "TORCHINDUCTOR_CACHE_DIR",
        "settings": {"TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"},
    },
}
# Set by `lifecycle boot` in every container (the provenance plugin logs them); a profile may
# not set them.
BOOT_ENV = ("LIFECYCLE_BOOT_ID", "LIFECYCLE_MANIFEST_DIGEST", "LIFECYCLE_IMAGE")


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

_ARG_NAME = re.compile(r"[a-z][a-z0-9_]*")
# A literal value under one of these names is a secret written into the manifest.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|CREDENTIAL", re.I)


def check_args(where: KeyPath, args: list[str]) -> Iterator[Finding]:
    """Refuse a credential in the arguments of a boot (a profile's, a night's, a ladder
    shape's): every boot's record and archive keep them as written (its spec, the manifest's
    snapshot); only the log is redacted."""
    for index, flag in _credential_args(args):
        # Worded so that stderr's redaction (a word after a credential flag) leaves it whole.
        what = f"a credential as the value of {flag}" if flag else "looks like a credential"
        yield (
            (*where, index),
            f"{what}, stored with every boot's record and archive; pass it from the host "
            "environment (list its variable under secrets:; vLLM reads VLLM_API_KEY for "
            "--api-key)",
        )


# A shell's reference to a variable (`$HF_TOKEN`, `${HF_TOKEN}`) in a `sh -c` command: its
# value comes from the environment, where a secret belongs; no credential is written here.
_VARIABLE = re.compile(r"\$(\{[A-Za-z_]\w*\}|[A-Za-z_]\w*)")


def _credential_args(args: list[str]) -> Iterator[tuple[int, str]]:
    """(index, flag) of each arg holding a credential: the value of a flag named for one
    (`--api-key KEY`, `--api-key=KEY`), or anything shaped like one (`hf_…`, a URL's
    `user:token@`); flag is '' when no flag names it."""
    for index, arg in enumerate(args):
        # Each reference read as `null`, a word the redaction knows is never a credential.
        literal = _VARIABLE.sub("null", arg)
        flag, equals, value = literal.partition("=")
        before = args[index - 1] if index else ""
        flag_before = before.startswith("-") and "=" not in before and not arg.startswith("-")
        if flag_before and literal != "null" and is_sensitive_key(before):
            yield index, before
        elif flag.startswith("-") and equals and value != "null" and is_sensitive_key(flag):
            yield index, flag
        elif redact(literal, {}) != literal:
            yield index, ""


def check_tuned(manifest: Manifest) -> Iterator[Finding]:
    """Range-check the tuned values whose meaning we know."""
    for name, tuned in manifest.tuned.items():
        if not _ARG_NAME.fullmatch(name):
            yield ("tuned", name), "must be a vLLM engine argument in snake_case"
            continue
        check = KNOWN_TUNED.get(name)
        problem = check(tuned.value) if check else None
        if problem:
            yield ("tuned", name, "value"), problem
        if tuned.measure is not None:
            yield from check_ladder(("tuned", name, "measure"), name, tuned.measure)


def check_ladder(where: KeyPath, argument: str, ladder: LadderMethod) -> Iterator[Finding]:
    """Each rung of a ladder on an argument whose range we know, checked as its value would
    be (a rung out of range would run its boots and be refused only when written); and its
    shape's args, which may not set the argument themselves: the engine would get the flag
    twice, the last one (the shape's) would win, and every rung would measure that value
    while the ladder wrote its own as validated."""
    check = KNOWN_TUNED.get(argument)
    for index, rung in enumerate(ladder.rungs):
        if check is not None and (problem := check(rung)):
            yield (*where, "rungs", index), problem
    yield from check_args((*where, "shape", "args"), ladder.shape.args)
    flag = engine_flag(argument)
    for index, arg in enumerate(ladder.shape.args):
        if arg.partition("=")[0] == flag:
            yield (
                (*where, "shape", "args", index),
                f"{flag} is the argument this ladder sets at each rung; the shape may not set it",
            )


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
        yield from check_args(("profiles", profile_name, "command"), profile.command)
        yield from check_args(("profiles", profile_name, "args"), profile.args)
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
    for name, why in manifest.engine.unconfirmed.items():
        value = getattr(manifest.engine, name)  # a PinName is the name of a pin's field
        yield ("engine", "unconfirmed", name), f"{name} {value} is not confirmed ({why})"


# The container needs these trees as the image and the kernel made them, all the way down.
_OFF_LIMITS = tuple(PurePosixPath(p) for p in ("/proc", "/sys", "/dev", "/etc"))
# A mount at one of these (or at /) hides the image's own files; a dir inside one is fine.
_SYSTEM_DIRS = frozenset(
    PurePosixPath(p)
    for p in (
        "/", "/bin", "/boot", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
        "/opt", "/root", "/run", "/sbin", "/srv", "/tmp", "/usr", "/var", "/usr/bin",
        "/usr/include", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/local/bin",
        "/usr/local/lib", "/usr/sbin", "/usr/share", "/var/cache", "/var/lib", "/var/log",
        "/var/run", "/var/tmp",
    )
)  # fmt: skip


def check_mounts(manifest: Manifest, written: Callable[[KeyPath], bool]) -> Iterator[Finding]:
    """Every active cache's path against the system, the engine and the other caches.

    `written(path)` tells a value the manifest wrote from a default (the implied caches), so
    that a conflict is reported where the user can change it."""
    caches = manifest.active_caches()
    package_dir = PurePosixPath(manifest.engine.package_dir)
    # The caches whose own place is fine: only those are compared with each other.
    placed: dict[str, JitCache] = {}
    for name, cache in caches.items():
        where = ("caches", name, "path")
        path = PurePosixPath(cache.path)
        if problem := _system_problem(path):
            yield where, problem
        elif path == package_dir or path.is_relative_to(package_dir):
            yield where, f"{cache.path!r} is inside engine.package_dir; a cache is not the engine"
        elif package_dir.is_relative_to(path):
            at = where if written(where) else ("engine", "package_dir")
            yield at, f"cache {name!r} at {cache.path!r} would hide the patched engine below it"
        else:
            placed[name] = cache
    for (first, a), (second, b) in combinations(placed.items(), 2):
        later, earlier = _reported(second, first, written)
        pa, pb = PurePosixPath(a.path), PurePosixPath(b.path)
        if pa == pb:
            yield ("caches", later, "path"), f"{a.path!r} is also the path of cache {earlier!r}"
        elif pa.is_relative_to(pb) or pb.is_relative_to(pa):
            yield ("caches", later, "path"), f"overlaps cache {earlier!r} ({a.path} and {b.path})"
    for (first, a), (second, b) in combinations(caches.items(), 2):
        if a.env == b.env:
            later, earlier = _reported(second, first, written)
            yield ("caches", later, "env"), f"cache {earlier!r} sets {a.env} too"


def check_cache_env(manifest: Manifest, written: Callable[[KeyPath], bool]) -> Iterator[Finding]:
    """A profile's env var or secret that a cache or the boot sets would silently lose.

    A secret's name taken by a cache the manifest declares is the cache's mistake, reported
    there (`written` as for check_mounts); one taken by an implied cache, at the secret."""
    setters: dict[str, tuple[str, str]] = {}  # env var -> (who sets it, what to do instead)
    declared: dict[str, KeyPath] = {}  # env var -> where a cache of the manifest sets it
    for name, cache in manifest.active_caches().items():
        setters[cache.env] = (
            f"cache {name!r} sets {cache.env} to its mount",
            "change the cache's path instead (or disable the cache)",
        )
        declared[cache.env] = ("caches", name, "env")
        for key in cache.settings:
            setters[key] = (f"cache {name!r} sets {key}", f"change caches.{name}.settings instead")
            declared[key] = ("caches", name, "settings", key)
    declared = {key: where for key, where in declared.items() if written(where)}
    for key in BOOT_ENV:
        setters[key] = (f"lifecycle boot sets {key} to the boot's own value", "remove it")
        declared.pop(key, None)
    for profile_name, profile in manifest.profiles.items():
        for key in profile.env:
            if key in setters:
                who, instead = setters[key]
                yield ("profiles", profile_name, "env", key), f"{who}; {instead}"
        for index, secret in enumerate(profile.secrets):
            if secret in declared:
                message = f"{secret} is a secret of profile {profile_name!r}; name another variable"
                yield declared[secret], message
            elif secret in setters:
                who, _ = setters[secret]
                yield ("profiles", profile_name, "secrets", index), f"{who}; it cannot be a secret"
        for index, name in enumerate(profile.from_host):
            if name in setters:
                who, _ = setters[name]
                yield ("profiles", profile_name, "from_host", index), f"{who}; remove it here"


def _system_problem(path: PurePosixPath) -> str | None:
    for tree in _OFF_LIMITS:
        if path == tree or path.is_relative_to(tree):
            return f"'{path}' is in {tree}, which the container needs as it is"
    if path in _SYSTEM_DIRS:
        return f"'{path}' is a system directory; a mount there hides the image's own files"
    return None


def _reported(second: str, first: str, written: Callable[[KeyPath], bool]) -> tuple[str, str]:
    """(the cache to report a conflict at, the other): the later one, unless only the earlier
    was written in the manifest."""
    if not written(("caches", second)) and written(("caches", first)):
        return first, second
    return second, first
