"""ALF's episode bookkeeping beside the core's (private to the ALF front-end).

Episodes live in the core's episode index; ALF's discount-0 *segments* do not, so the adapter
keeps them here for :meth:`ReplayBuffer.get_disc_0_begin_position`. Episodes that ALF begins
at a ``FIRST`` without a ``LAST`` before it are ended in the core here
(:func:`cut_before_first`), and their steps marked (:class:`CutEpisodes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.buffer import ReplayBuffer as CoreBuffer
from rlreplay.compat.alf._nest import flag
from rlreplay.errors import InvalidIdError

__all__ = [
    "CutEpisodes",
    "Disc0Segments",
    "cut_before_first",
    "cut_of",
    "first_envs",
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


class CutEpisodes:
    """Which stored steps belong to an episode that a ``FIRST`` cut before its ``LAST``.

    ALF indexes episodes by their ``FIRST`` steps: a ``FIRST`` that follows a non-``LAST`` step
    begins a new episode, and the one before never completes. ALF computes returns "upon
    episode completion" and gives the steps of incomplete episodes ``default_return``; the
    core ends such an episode (``end_episode``, truncated) and would record returns for it,
    so these steps are marked here and read as ``default_return``.

    Invariants: ``cut[env * max_length + pos % max_length]`` is True exactly for stored steps
    of cut episodes (a slot is cleared when a new step is written to it).

    Cost: O(episode length) per cut (each step is marked at most once), O(B) per write.
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self._max_length = max_length
        self.cut = np.zeros(num_envs * max_length, np.bool_)

    def written(self, slots: Array) -> None:
        """New steps were written to ``slots``."""
        self.cut[slots] = False

    def mark(self, env: int, begin: int, end: int) -> None:
        """Steps ``begin .. end - 1`` of ``env`` form a cut episode."""
        pos = np.arange(begin, end, dtype=np.int64)
        self.cut[env * self._max_length + pos % self._max_length] = True

    def of(self, env: Array, pos: Array) -> Array:
        """Whether steps ``pos`` of ``env`` (stored, broadcast together) are cut."""
        out: Array = self.cut[env * self._max_length + pos % self._max_length]
        return out

    def state_dict(self) -> dict[str, Array]:
        """A copy of the marks, as ``cut_episodes``."""
        return {"cut_episodes": self.cut.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (in place; absent in older states: nothing cut)."""
        self.cut[...] = state.get("cut_episodes", False)


def cut_before_first(
    core: CoreBuffer, envs: Array, final: Mapping[str, Any], cuts: CutEpisodes | None
) -> Array:
    """End the running episodes of ``envs``, whose next step is a ``FIRST``, as ALF's index does.

    ALF builds "an index of episode beginning indices for each element": a ``FIRST`` step
    begins an episode whatever came before it, and the episode it interrupts ends at its
    newest step (the end its beginning point stores). The core's episode of such an env is
    ended there (``end_episode``, truncated; ``final`` is the placeholder next observation)
    and, with ``cuts``, its stored steps are marked as an incomplete episode.

    Returns:
        The envs of ``envs`` that store no step: there the core cannot end the episode, so the
        caller records the ``FIRST``'s position as the begin of every later stored step.
    """
    first, end = core.stored_range()
    has = end[envs] > first[envs]
    live = envs[has]
    if live.size:
        E = core.num_envs
        newest = (end[live] - 1) * E + live
        running = core.steps_to_episode_end(newest) < 0
        if running.any():
            begins = np.maximum(core.episode_begin(newest[running]) // E, first[live[running]])
            for e, b in zip(live[running].tolist(), begins.tolist(), strict=True):
                core.end_episode(e, **final)
                if cuts is not None:
                    cuts.mark(e, b, int(end[e]))
    out: Array = envs[~has]
    return out


FIRST = 0  # ALF's StepType.FIRST


def first_envs(values: dict[str, Any], step_type: str | None, envs: Array, num_envs: int) -> Array:
    """The envs whose step in ``values`` (the core ``add`` arguments) is a ``FIRST``.

    Nothing when there is no ``step_type`` field, or when ``envs`` are not valid (out of
    range or repeated: the core's ``add`` raises for them).
    """
    ok = envs.size == 0 or (
        envs.min() >= 0 and envs.max() < num_envs and np.unique(envs).size == envs.size
    )
    if step_type is None or not ok:
        return envs[:0]
    out: Array = envs[flag(values, step_type, envs.shape[0]) == FIRST]
    return out


def cut_of(cuts: CutEpisodes | None, env: Array, start: Array, length: int) -> Array:
    """``(len(env), length)``: steps ``start ..`` of ``env`` are in an episode cut by FIRST."""
    pos = start[:, None] + np.arange(length)
    if cuts is None:
        return np.zeros(pos.shape, np.bool_)
    return cuts.of(env[:, None], pos)
