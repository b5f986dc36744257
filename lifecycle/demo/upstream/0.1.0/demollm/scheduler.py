"""Steps: the engine core fills each step with whatever requests are queued when it begins.

`--burst N`: N clients send one prompt each at once. The front end tokenizes them one after
another and queues each for the engine core, which is finishing the step in flight when the
burst arrives; that step ends somewhere in IN_FLIGHT_MS (seeded: each run differs, and a run
is reproducible). Every step begins when the one before ends and takes everything queued.

`--forced-prompts N`: one request carrying N prompts. Whatever the timing, the step that takes
it holds all N: the shape is forced.

Time here is simulated milliseconds: what is modelled is which requests a step holds.

DEMOLLM_RECORD_MEMORY_HISTORY=1 turns on the memory-history recorder (a memory-snapshot hook
attaches it): every allocation is recorded with its stack. Tokenizing allocates, so the front
end slows ~9x and the burst reaches the queue spread out: the step in flight usually ends
before all of it is queued, and the burst lands in pieces. The recorder snapshots the first
step holding DEMOLLM_MEMORY_HISTORY_TRIGGER_STEP requests, if any does.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from demollm import metrics
from demollm.logger import init_logger
from demollm.memory import MemoryPlan

logger = init_logger(__name__)

TOKENIZE_MS = 0.05  # per prompt, in the front end
RECORDING_SLOWDOWN = 9.0  # every allocation recorded with its stack
IN_FLIGHT_MS = (4.0, 44.0)
STEP_MS = 2.0  # plus 0.25 ms a prompt


@dataclass(frozen=True)
class Step:
    """One engine step: how many requests and prompts it held, and its memory margin."""

    number: int
    requests: int
    prompts: int
    margin_mib: float


class MemoryHistory:
    """The recorder a memory-snapshot hook attaches, and its snapshot trigger."""

    def __init__(self) -> None:
        self.on = os.environ.get("DEMOLLM_RECORD_MEMORY_HISTORY") == "1"
        self.trigger = int(os.environ.get("DEMOLLM_MEMORY_HISTORY_TRIGGER_STEP") or 0)
        self.fired_at: Step | None = None
        self.largest = 0
        if self.on:
            logger.info(
                "memory history: recording every allocation (snapshot trigger: a step of %d"
                " requests)",
                self.trigger,
            )

    def saw(self, step: Step) -> None:
        """Note a step as it begins; snapshot it if it matches the trigger."""
        self.largest = max(self.largest, step.requests)
        if self.on and self.fired_at is None and step.requests == self.trigger:
            self.fired_at = step
            logger.info(
                "memory history: snapshot at step %d (%d requests)", step.number, step.requests
            )

    def report(self) -> None:
        """Say whether the trigger ever fired."""
        if self.on and self.fired_at is None:
            logger.info(
                "memory history: the trigger never fired: no step held %d requests (the"
                " largest held %d)",
                self.trigger,
                self.largest,
            )


def burst(memory: MemoryPlan, clients: int, seed: int, history: MemoryHistory) -> list[Step]:
    """Serve `clients` one-prompt requests sent at once; OutOfMemory if a step does not fit."""
    rng = random.Random(seed)
    metrics.set_value("demo:burst_requests", clients)
    per_prompt = TOKENIZE_MS * (RECORDING_SLOWDOWN if history.on else 1.0)
    queued, clock = [], 0.0
    for _ in range(clients):
        clock += per_prompt * rng.uniform(0.8, 1.2)
        queued.append(clock)
    begins = rng.uniform(*IN_FLIGHT_MS)
    logger.info(
        "burst: %d requests from %d clients; the step in flight ends at %.1f ms, the last"
        " request is queued at %.1f ms",
        clients,
        clients,
        begins,
        queued[-1],
    )
    steps: list[Step] = []
    taken = 0
    while taken < clients:
        ready = sum(1 for at in queued if at <= begins) - taken
        if ready == 0:  # idle: the next step begins as the next request is queued
            begins = queued[taken]
            continue
        steps.append(_step(memory, len(steps) + 1, ready, ready, history))
        taken += ready
        begins += STEP_MS + 0.25 * ready
    logger.info(
        "burst: %d requests served in %d steps (largest %d)",
        clients,
        len(steps),
        max(s.requests for s in steps),
    )
    return steps


def forced(memory: MemoryPlan, prompts: int, history: MemoryHistory) -> Step:
    """Serve one request carrying `prompts` prompts: one step holds them all."""
    logger.info("forced shape: one request carrying %d prompts", prompts)
    metrics.set_value("demo:forced_step_prompts", prompts)
    metrics.set_value("demo:forced_step_margin_mib", round(memory.margin_mib(prompts), 1))
    step = _step(memory, 1, 1, prompts, history)
    logger.info("forced step: %d prompts served, margin %.1f MiB", prompts, step.margin_mib)
    return step


def _step(
    memory: MemoryPlan, number: int, requests: int, prompts: int, history: MemoryHistory
) -> Step:
    """Begin a step: its margin is reported (also when it does not fit), then it runs."""
    step = Step(number, requests, prompts, memory.margin_mib(prompts))
    history.saw(step)
    metrics.add("demo:steps")
    metrics.keep_max("demo:largest_step_prompts", prompts)
    metrics.keep_min("demo:worst_step_margin_mib", step.margin_mib)
    logger.info(
        "step %d: requests=%d prompts=%d margin=%.1f MiB",
        number,
        requests,
        prompts,
        step.margin_mib,
    )
    memory.run_step(prompts)
    return step
