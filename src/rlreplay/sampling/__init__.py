"""The sampler part: which sampleable transitions a batch holds.

Owns the laws (uniform with recency mix and draws without replacement; prioritized,
proportional and rank-based, over Numba segment trees; sequence starts), their parameters and
per-transition state, and the one-call kernels that draw and assemble a plain batch together.
:class:`Sampler` is the contract a buffer's sampler meets (``ReplayBuffer(..., sampler=...)``).

Knows nothing of how a transition is assembled or stored, beyond the kernels' reading of the
columns and the index.
"""

from rlreplay.sampling.base import Draw, Sampler
from rlreplay.sampling.prioritized import PrioritizedSampler, PriorityMass, PriorityStarts
from rlreplay.sampling.registry import register_sampler, sampler_from_config
from rlreplay.sampling.trees import MaxTree, MinTree, SumTree
from rlreplay.sampling.uniform import DrawOptions, draw_mixed
from rlreplay.sampling.uniform_sampler import UniformSampler

__all__ = [
    "Draw",
    "DrawOptions",
    "MaxTree",
    "MinTree",
    "PrioritizedSampler",
    "PriorityMass",
    "PriorityStarts",
    "Sampler",
    "SumTree",
    "UniformSampler",
    "draw_mixed",
    "register_sampler",
    "sampler_from_config",
]
