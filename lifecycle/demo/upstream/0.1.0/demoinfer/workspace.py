"""What the kernel library costs on the GPU, as the engine's memory model reads it.

The workspace is allocated when the library loads, outside the memory the engine plans with;
the attention activations grow with the prompts a step holds.
"""

from __future__ import annotations

WORKSPACE_MIB = 256.0  # resident from load to exit
PROMPT_ACTIVATION_MIB = 100.0  # one prompt's attention activations within a step


def step_activation_mib(prompts: int) -> float:
    """The activation memory a step holding `prompts` prompts needs."""
    return prompts * PROMPT_ACTIVATION_MIB
