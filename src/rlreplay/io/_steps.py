"""Stored steps and episodes of a buffer, read through its public API only.

Every export walks the same things: the stored steps of each env in time order (from
:meth:`~rlreplay.ReplayBuffer.stored_range`; the id of step ``t`` of env ``e`` is
``t * num_envs + e``) and the episodes they form (:meth:`~rlreplay.ReplayBuffer.episode_begin`
and :meth:`~rlreplay.ReplayBuffer.steps_to_episode_end`). Callers hold ``buf.atomic()`` so that
the steps they list are still stored when they read them.

An episode ends in one of two ways. Normally its last step is stored with ``terminated`` or
``truncated`` set (by :meth:`~rlreplay.ReplayBuffer.add`, or by
:meth:`~rlreplay.ReplayBuffer.end_episode`, which sets ``truncated``) and has a final
observation. :meth:`~rlreplay.ReplayBuffer.abandon_episode` ends it at its newest step with
neither flag and *no* final observation: an *abandoned* episode, which exports must not pass off
as complete. So a step that ends its episode (``steps_to_episode_end == 0``) with neither flag
stored ends an abandoned episode (it is also the step whose ``next_known`` is False in
:meth:`~rlreplay.ReplayBuffer.get_episode`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from rlreplay.buffer.replay import ReplayBuffer

__all__ = ["EpisodeRuns", "StoredSteps", "episode_runs", "final_observations", "stored_steps"]

Array = np.ndarray[Any, Any]


class StoredSteps(NamedTuple):
    """Every stored step, env by env in time order (int64 arrays of one length).

    Attributes:
        env_ids: The step's env.
        t: Its absolute step number in that env.
        ids: Its id (``t * num_envs + env``).
        episode_ids: The id of its episode's first step (possibly overwritten since).
        step_in_episode: Its position in its episode (0 at the episode's first step).
        to_end: Steps after it in its episode (0 at the last step, -1 while the episode runs).
        abandoned: bool: the step ends an abandoned episode (``to_end == 0`` with neither
            ``terminated`` nor ``truncated``: no final observation follows it).
    """

    env_ids: Array
    t: Array
    ids: Array
    episode_ids: Array
    step_in_episode: Array
    to_end: Array
    abandoned: Array


def stored_steps(buf: ReplayBuffer) -> StoredSteps:
    """List every stored step of ``buf`` (call under ``buf.atomic()``)."""
    first, end = buf.stored_range()
    counts = end - first
    env_ids = np.repeat(np.arange(buf.num_envs, dtype=np.int64), counts)
    # t = first[e] + (position within env e's run), vectorised over all envs.
    run_starts = np.cumsum(counts) - counts
    offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(run_starts, counts)
    t = np.repeat(first, counts) + offsets
    ids = t * buf.num_envs + env_ids
    begin = buf.episode_begin(ids) if ids.size else np.zeros(0, np.int64)
    to_end = buf.steps_to_episode_end(ids) if ids.size else np.zeros(0, np.int64)
    step = t - begin // buf.num_envs
    abandoned = to_end == 0
    if abandoned.any():
        # Only the episode ends are read: an end flagged neither way was abandoned.
        ends = ids[abandoned]
        flagged = buf.get_field("terminated", ends) | buf.get_field("truncated", ends)
        abandoned[abandoned] = ~np.asarray(flagged, bool).reshape(ends.shape)
    return StoredSteps(
        env_ids, t, ids, begin.astype(np.int64), step, to_end.astype(np.int64), abandoned
    )


def final_observations(buf: ReplayBuffer, steps: StoredSteps) -> tuple[Array, dict[str, Array]]:
    """The final observation of every episode end among ``steps`` (call under ``buf.atomic()``).

    Returns:
        ``(has_final, finals)``: ``has_final[i]`` tells whether step ``i`` ends its episode
        with a final observation (terminated or truncated; not an abandoned end), and
        ``finals[name][i]`` is that observation for every observation field ``name`` (zeros on
        the other steps), shape ``(len(steps.ids), *field_shape)``.
    """
    has_final = (steps.to_end == 0) & ~steps.abandoned
    names = buf.schema.observation_names
    finals = {
        n: np.zeros((steps.ids.size, *buf.schema.fields[n].shape), buf.schema.fields[n].dtype)
        for n in names
    }
    for i in np.flatnonzero(has_final):
        # get_episode is the public reader of final observations: its last next_<obs> is one.
        episode = buf.get_episode(int(steps.ids[i]))
        for n in names:
            finals[n][i] = episode["next_" + n][-1]
    return has_final, finals


class EpisodeRuns(NamedTuple):
    """The episodes among the stored steps, split by what an export can do with them.

    Attributes:
        complete: ``(first_id, length)`` of every episode whose steps are all stored and that
            has ended with a final observation (terminated or truncated), ordered by the id of
            its last step (the order episodes completed in, per env; envs interleave by step).
        incomplete: Episodes still running (their end is not known yet).
        overwritten: Episodes ended with a final observation whose first steps were
            overwritten.
        abandoned: Abandoned episodes (ended with no final observation, whether or not their
            first steps are still stored): not complete, and never exported as such.

    Every episode with a stored step is counted exactly once.
    """

    complete: list[tuple[int, int]]
    incomplete: int
    overwritten: int
    abandoned: int


def episode_runs(steps: StoredSteps) -> EpisodeRuns:
    """Split the stored steps into episodes (see :class:`EpisodeRuns`)."""
    starts = (
        np.flatnonzero(np.r_[True, steps.episode_ids[1:] != steps.episode_ids[:-1]])
        if steps.ids.size
        else np.zeros(0, np.int64)
    )
    complete: list[tuple[int, int, int]] = []
    incomplete = overwritten = abandoned = 0
    bounds = np.r_[starts, steps.ids.size]
    for a, b in itertools.pairwise(bounds):
        last = b - 1
        if steps.to_end[last] != 0:
            incomplete += 1
        elif steps.abandoned[last]:
            abandoned += 1
        elif steps.step_in_episode[a] != 0:
            overwritten += 1
        else:
            complete.append((int(steps.ids[last]), int(steps.ids[a]), int(b - a)))
    complete.sort()
    return EpisodeRuns([(first, n) for _, first, n in complete], incomplete, overwritten, abandoned)
