"""What shows how a boot's JIT work was done, from its log and from its caches' files.

`logs` reads the lines vLLM, FlashInfer and Inductor print at boot (older and newer wordings);
`layout` knows what the files of real caches are (vLLM's compile dirs, Inductor's FX graph and
AOTAutograd entries and C++ kernels, Triton's kernel dirs, FlashInfer's built ops); `verdict`
judges each cache of a boot from both; `untracked` picks the JIT output a container wrote
outside its tracked caches; `bundle` writes it all down.
"""

from lifecycle.evidence.bundle import collect_evidence as collect_evidence
