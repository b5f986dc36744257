"""The GPU memory the engine plans with: the KV pool at start-up, and the margin of each step.

`--gpu-memory-utilization` is the share of the GPU the engine may plan with: the weights, the
activation peak its profile run measured (at PROFILE_PROMPTS prompts a step), and the KV pool
share it. Outside that share sit the CUDA context and the kernel library's workspace. A step
holding more prompts than the profile run needs more activation memory than was set aside and
takes it from what is left outside; when that is not enough, the step does not fit and the
engine dies with CUDA out of memory.

A cold boot compiles while it profiles: the compiler's scratch counts in the profiled peak, so
its KV pool comes out COLD_SCRATCH_SHARE smaller than a warm boot's of the same build, and
the graphs it captured for freshly compiled shapes stay resident (COLD_GRAPH_POOL_MIB).
"""

from __future__ import annotations

from dataclasses import dataclass

from demoinfer import workspace

PROFILE_PROMPTS = 8  # the profile run's batch: the activation peak the engine sets aside
NON_TORCH_MIB = 627.6  # CUDA context, cuBLAS and communication buffers
COLD_SCRATCH_SHARE = 0.05
COLD_GRAPH_POOL_MIB = 24.0
BLOCK_TOKENS = 16  # tokens per KV block
MIB = 1 << 20


class OutOfMemory(RuntimeError):
    """A step that does not fit on the GPU, worded as torch words it."""


@dataclass(frozen=True)
class Gpu:
    """The device and the model's fixed costs."""

    total_mib: float
    weights_mib: float
    kv_bytes_per_token: int


@dataclass(frozen=True)
class MemoryPlan:
    """What one boot set aside, and what is left for the steps it will run."""

    gpu: Gpu
    utilization: float
    cold: bool
    kv_mib: float

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV pool holds."""
        return int(self.kv_mib * MIB // self.gpu.kv_bytes_per_token)

    @property
    def kv_blocks(self) -> int:
        """KV blocks of BLOCK_TOKENS tokens the pool holds."""
        return self.kv_tokens // BLOCK_TOKENS

    def margin_mib(self, prompts: int) -> float:
        """Free GPU memory at the peak of a step holding `prompts` prompts (< 0: no fit)."""
        outside = NON_TORCH_MIB + workspace.WORKSPACE_MIB
        outside += COLD_GRAPH_POOL_MIB if self.cold else 0.0
        beyond_profile = workspace.step_activation_mib(prompts) - _profiled_peak_mib()
        return (1 - self.utilization) * self.gpu.total_mib - outside - max(beyond_profile, 0.0)

    def run_step(self, prompts: int) -> float:
        """The step's margin; OutOfMemory when it does not fit."""
        margin = self.margin_mib(prompts)
        if margin < 0:
            need = workspace.step_activation_mib(prompts) - _profiled_peak_mib()
            raise OutOfMemory(
                f"CUDA out of memory. Tried to allocate {need:.2f} MiB. GPU 0 has a total "
                f"capacity of {self.gpu.total_mib / 1024:.2f} GiB of which {need + margin:.2f}"
                " MiB is free."
            )
        return margin


def plan(
    gpu: Gpu, utilization: float, *, cold: bool, max_model_len: int | None = None
) -> MemoryPlan:
    """Size the KV pool from what the weights, the profiled peak and (cold) the compiler's
    scratch leave of the engine's share; refuse a pool that holds nothing or too little."""
    share = utilization * gpu.total_mib - gpu.weights_mib - _profiled_peak_mib()
    kv_mib = share * (1 - COLD_SCRATCH_SHARE) if cold else share
    if kv_mib <= 0:
        raise RuntimeError(
            "No available memory for the cache blocks. "
            "Try increasing `gpu_memory_utilization` when initializing the engine."
        )
    memory = MemoryPlan(gpu, utilization, cold, kv_mib)
    if max_model_len is not None and memory.kv_tokens < max_model_len:
        raise RuntimeError(
            f"The model's max seq len ({max_model_len}) is larger than the maximum number of "
            f"tokens that can be stored in KV cache ({memory.kv_tokens}). "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`."
        )
    return memory


def _profiled_peak_mib() -> float:
    return workspace.step_activation_mib(PROFILE_PROMPTS)
