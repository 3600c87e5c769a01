"""Discount-0 segments of the ALF buffer's steps (private to the ALF front-end).

Episodes live in the core's episode index; ALF's discount-0 *segments* do not, so the adapter
keeps them here for :meth:`ReplayBuffer.get_disc_0_begin_position`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.errors import InvalidIdError

__all__ = [
    "Disc0Segments",
]

Array = np.ndarray[Any, Any]


class Disc0Segments:
    """Where the discount-0 segment of each stored step begins.

    Steps with ``discount == 0`` close segments as ``LAST`` steps close episodes: the segment
    of step ``pos`` begins right after the newest step of its env before ``pos`` whose discount
    is 0 (at 0 if there is none).

    Invariants: ``begin[env * max_length + pos % max_length]`` is the segment begin of stored
    step ``pos`` of ``env`` (its slot is written when the step is added); ``last[env]`` is the
    newest discount-0 position of ``env`` (-1 before any).

    Cost: O(B) per :meth:`record` or :meth:`begin_of` of ``B`` steps.

    Args:
        num_envs: Number of environments ``E``.
        max_length: Steps kept per environment.
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self._max_length = max_length
        self.begin = np.zeros(num_envs * max_length, np.int64)  # by slot
        self.last = np.full(num_envs, -1, np.int64)  # per env

    def record(self, envs: Array, t: Array, slots: Array, disc0: Array | None) -> None:
        """Steps ``t`` of ``envs`` were added at ``slots``; ``disc0`` marks discount 0."""
        self.begin[slots] = self.last[envs] + 1
        if disc0 is not None:
            self.last[envs[disc0]] = t[disc0]

    def begin_of(self, env: Array, p: Array, heads: Array, counts: Array) -> Array:
        """The segment begin of steps ``p`` of ``env``, each env holding ``[heads, counts)``.

        Raises:
            rlreplay.InvalidIdError: A position not stored (overwritten or never added).
        """
        bad = (p < heads[env]) | (p >= counts[env])
        if bad.any():
            raise InvalidIdError(
                f"positions {p[bad][:5].tolist()} of envs {env[bad][:5].tolist()} are not "
                "stored (overwritten or never added)"
            )
        out: Array = self.begin[env * self._max_length + p % self._max_length]
        return out

    def state_dict(self) -> dict[str, Array]:
        """Copies of the arrays, as ``disc0_begin`` and ``last_disc0``."""
        return {"disc0_begin": self.begin.copy(), "last_disc0": self.last.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (in place)."""
        self.begin[...] = state["disc0_begin"]
        self.last[...] = state["last_disc0"]
