"""Writing steps: checks and casts by schema, the per-step fast path (generated code and the
lockstep kernel for vector envs), and the discounted returns recorded when episodes end.

Produces rows for storage and events for the episode index (and, through it, the sampler).
Knows nothing of sampling.
"""

from rlreplay.writing.writer import ReturnsConfig, StepWriter

__all__ = ["ReturnsConfig", "StepWriter"]
