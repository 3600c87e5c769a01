"""Stand-in for the part of ``nnabla_rl.utils`` that replay-buffer users call."""

from rlreplay.compat.nnabla_rl.utils import data, reproductions

__all__ = ["data", "reproductions"]
