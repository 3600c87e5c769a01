"""Samplers and the segment trees behind prioritized sampling."""

from rlreplay.sampling.trees import MaxTree, MinTree, SumTree
from rlreplay.sampling.uniform import draw_mixed

__all__ = ["MaxTree", "MinTree", "SumTree", "draw_mixed"]
