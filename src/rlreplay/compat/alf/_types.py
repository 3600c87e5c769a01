"""ALF's ``StepType`` and ``BatchInfo`` (private to ALF's front-end; exported by ``replay_buffer``).

They live here so that the buffer's parts (``_sampling``) and ``replay_buffer`` share them
without an import cycle; ``rlreplay.compat.alf.replay_buffer`` re-exports both.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["BatchInfo", "StepType"]


class StepType:
    """ALF's step types (``alf.data_structures.StepType``)."""

    FIRST = 0
    MID = 1
    LAST = 2


class BatchInfo(NamedTuple):
    """Information about a batch; a field that does not apply is ``()``, as in ALF.

    Attributes:
        env_ids: int64 ``[B]``: the env of each sequence.
        positions: int64 ``[B]``: the position of each sequence's first step.
        importance_weights: float32 ``[B]`` with prioritized sampling: priority divided by the
            average of the non-zero priorities among the possible starts (``N * P(i)``).
        replay_buffer: The buffer the batch came from.
        discounted_return: float32 ``[B, T]`` with ``record_episodic_return``.
    """

    env_ids: Any = ()
    positions: Any = ()
    importance_weights: Any = ()
    replay_buffer: Any = ()
    discounted_return: Any = ()
