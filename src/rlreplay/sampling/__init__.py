"""Samplers and the segment trees behind prioritized sampling."""

from rlreplay.sampling.trees import MaxTree, MinTree, SumTree

__all__ = ["MaxTree", "MinTree", "SumTree"]
