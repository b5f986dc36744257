"""What shows how a boot's JIT work was done, from its log and from its caches' files.

`layout` knows what JIT files are, in the caches and outside them; `verdict` judges each cache
of a boot; `bundle` parses the log and writes the evidence down.
"""

from lifecycle.evidence.bundle import collect_evidence as collect_evidence
