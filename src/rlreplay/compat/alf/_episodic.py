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

from rlreplay import InvalidIdError
from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay.compat.alf._nest import flag

__all__ = [
    "Continuations",
    "CutEpisodes",
    "Disc0Segments",
    "cut_before_first",
    "cut_of",
    "first_envs",
    "joined_tails",
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


class Continuations:
    """ALF episodes that go on after a ``LAST`` that a step other than ``FIRST`` follows.

    ALF's index begins episodes only at ``FIRST`` steps ("an index of episode beginning
    indices for each element"; "the beginning point stores where episode end is", the newest
    step of the episode). So after ``LAST, MID`` the episode goes on: the ``MID``'s episode
    begins at the old ``FIRST``, and the steps before the ``LAST`` end, like it, at the
    episode's newest step. The core ended its episode at the ``LAST`` and cannot reopen it;
    the core episodes that continue one are *joined* here.

    Invariants (by slot ``env * max_length + pos % max_length``, reset when a step is
    written): ``begin[slot]`` is the ALF begin of a step of a joined core episode after the
    first (-1 for every other step, whose begin is the core's); ``joined[slot]`` is True for
    a step that continues the episode its env's previous step (a ``LAST``) ended.

    Cost: O(B) per :meth:`record`; a query is O(B) per joined core episode it follows.
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self._max_length = max_length
        self.begin = np.full(num_envs * max_length, -1, np.int64)
        self.joined = np.zeros(num_envs * max_length, np.bool_)

    def slot(self, env: Array, pos: Array) -> Array:
        out: Array = env * self._max_length + pos % self._max_length
        return out

    def record(self, core: CoreBuffer, envs: Array, t: Array, firsts: Array, floor: Array) -> None:
        """Steps ``t`` of ``envs`` were just added; ``firsts`` are the envs whose step is FIRST."""
        E = core.num_envs
        slots = self.slot(envs, t)
        first, _ = core.stored_range()
        prev = t - 1
        has = (prev >= first[envs]) & ~np.isin(envs, firsts)
        e, p = envs[has], prev[has]
        # read the previous steps before writing (with max_length=1 they share the slot)
        ended = core.steps_to_episode_end(p * E + e) == 0  # the previous step was a LAST
        carried = self.begin[self.slot(e, p)]  # its ALF begin, where the core's is not
        core_begin = np.maximum(core.episode_begin(p * E + e) // E, floor[e])
        alf_begin = np.where(carried >= 0, carried, core_begin)
        self.begin[slots] = -1
        self.joined[slots] = False
        # a continued episode: the new step begins where the previous step's episode began;
        # a running joined part: its begin goes on
        self.begin[slots[has]] = np.where(ended, alf_begin, carried)
        self.joined[slots[has]] = ended

    def begin_of(self, env: Array, pos: Array, core_begin: Array) -> Array:
        """ALF's episode begin of stored steps ``pos`` of ``env`` (``core_begin``: the core's)."""
        b = self.begin[self.slot(env, pos)]
        out: Array = np.where(b >= 0, b, core_begin)
        return out

    def end_of(self, core: CoreBuffer, env: Array, pos: Array, newest: Array) -> Array:
        """ALF's episode end of stored steps ``pos`` of ``env`` (its newest step if running).

        ``newest`` is each env's newest stored position.
        """
        E = core.num_envs
        d = core.steps_to_episode_end(pos * E + env)
        end = np.where(d < 0, newest[env], pos + d)
        follow = self.continued(env, end, newest)
        while follow.any():
            i = np.flatnonzero(follow)
            nxt = end[i] + 1
            d2 = core.steps_to_episode_end(nxt * E + env[i])
            end[i] = np.where(d2 < 0, newest[env[i]], nxt + d2)
            follow[i] = self.continued(env[i], end[i], newest)
        out: Array = end
        return out

    def continued(self, env: Array, end: Array, newest: Array) -> Array:
        """Whether stored step ``end + 1`` of ``env`` continues the episode ``end`` ended."""
        nxt = np.minimum(end + 1, newest[env])
        out: Array = (end < newest[env]) & self.joined[self.slot(env, nxt)]
        return out

    def state_dict(self) -> dict[str, Array]:
        """Copies of the arrays, as ``joined_begin`` and ``joined``."""
        return {"joined_begin": self.begin.copy(), "joined": self.joined.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (absent in older states: nothing joined)."""
        self.begin[...] = state.get("joined_begin", -1)
        self.joined[...] = state.get("joined", False)


def joined_tails(
    core: CoreBuffer, joins: Continuations, cuts: CutEpisodes, env: Array, pos: Array
) -> Array:
    """What ALF adds to the core-based returns of stored steps ``(env, pos)`` of joined episodes.

    ALF computes the returns of every step of an episode "upon episode completion", at each
    ``LAST``: after ``LAST, MID, ..., LAST`` its episode (from its ``FIRST``) completes again,
    and every step's return then runs to the newest ``LAST``. The core's return of a step runs
    to the end of its core episode ``e``; ALF's adds ``gamma^(e - pos) * X``, with ``X`` the
    discounted rewards after ``e`` up to the newest ``LAST`` of the joined core episodes that
    follow (parts still running, or cut by a ``FIRST``, add nothing).
    """
    E, gamma = core.num_envs, core.gamma
    env, pos = np.broadcast_arrays(env, pos)
    env, pos = env.reshape(-1), pos.reshape(-1)
    out = np.zeros(pos.shape[0])
    newest = core.stored_range()[1] - 1
    d = core.steps_to_episode_end(pos * E + env)
    end = pos + d
    scale = np.power(gamma, np.maximum(d, 0).astype(np.float64))
    active = (d >= 0) & joins.continued(env, end, newest)
    while active.any():
        i = np.flatnonzero(active)
        nxt = end[i] + 1
        d2 = core.steps_to_episode_end(nxt * E + env[i])
        done = (d2 >= 0) & ~cuts.of(env[i], nxt)  # the joined part ended at a LAST
        seq = core.get_sequences(nxt * E + env[i], 1, within_episode=False)
        g = seq["discounted_return"][:, 0].astype(np.float64)
        out[i] += np.where(done, scale[i] * g, 0.0)
        scale[i] *= np.power(gamma, (d2 + 1).astype(np.float64))
        end[i] = nxt + d2
        active[i] = done & joins.continued(env[i], end[i], newest)
    return out
