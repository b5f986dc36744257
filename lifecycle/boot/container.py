"""Run a created container to its end, streaming its log; stop it on timeout or interrupt."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lifecycle.errors import AnswerNo


class BootFailed(AnswerNo):
    """The engine's container could not be created or run."""


def run_container(
    container: Any,
    timeout_s: float | None,
    keep: Callable[[str], None],
    show: Callable[[str], None],
) -> tuple[int, bool]:
    """Start, pass each log line to `keep` and `show` until the container exits; its exit code,
    and whether we stopped it at the boot's time limit (then the code is only the signal's:
    137 or 143)."""
    container.start()
    fired = threading.Event()

    def stop_at_limit() -> None:
        fired.set()
        container.stop()

    timer = threading.Timer(timeout_s, stop_at_limit) if timeout_s else None
    if timer:
        timer.start()
    try:
        pending = b""
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                keep(text)
                show(text)
        if pending:
            keep(pending.decode(errors="replace"))
        code = int(container.wait()["StatusCode"])
        return code, fired.is_set()
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM via the hook session): the engine must not outlive us.
        container.stop(timeout=10)
        raise
    finally:
        if timer:
            timer.cancel()


def remove_container(container: Any) -> str | None:
    """Remove a stopped container; None when gone, else what dockerd said."""
    from docker.errors import APIError, NotFound

    try:
        container.remove(force=True)
    except NotFound:
        return None
    except APIError as exc:
        return f"container {container.id[:12]} not removed: {exc.explanation or exc}"
    return None
