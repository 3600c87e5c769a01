"""Runs of consecutive raw steps: sequences (R2D2 / ALF ``get_batch``), whole episodes, FIFO.

A run starts at absolute step ``t0`` of an env and has ``n_real`` real steps, padded to a common
length ``L``; ``mask[b, j]`` marks real steps (always a prefix). Per-step fields are the raw
stored ones (``obs`` is a single frame even with frame stacking), plus each step's
``next_<obs>``: the following step's observation, or the final observation where the step ends
its episode. Where neither is known (the newest step of a running episode) and on padded steps
it is zero; ``next_known`` tells which are real. Everything is one vectorised gather of
``B * L`` rows, independent of the buffer's size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.assemble.transitions import stack_pair
from rlreplay.episodes.index import COUNT, HEAD, EpisodeIndex, expand_ranges
from rlreplay.errors import EmptyBufferError
from rlreplay.sampling.uniform import draw_balanced, draw_uniform, uniform_below
from rlreplay.storage.columns import Columns

__all__ = ["draw_sequence_starts", "gather_runs", "run_lengths", "valid_sequence_starts"]

_REJECTION_ROUNDS = 32  # sequence-start redraws before the exact fallback

Array = np.ndarray[Any, Any]


def run_lengths(
    index: EpisodeIndex, env_ids: Array, t0: Array, length: int, within_episode: bool
) -> Array:
    """Real steps of runs of ``length`` from ``t0``: up to the newest stored step, and (when
    ``within_episode``) up to the last step of ``t0``'s episode."""
    count = index.env[env_ids, COUNT]
    n_real = np.minimum(length, count - t0)
    if within_episode:
        end = index.ep_end[index.slots(env_ids, t0)]
        n_real = np.where(end >= 0, np.minimum(n_real, end - t0 + 1), n_real)
    out: Array = n_real
    return out


def valid_sequence_starts(
    index: EpisodeIndex, env_ids: Array, t0: Array, length: int, within_episode: bool
) -> Array:
    """Whether runs of ``length`` from ``t0`` are all real (no padding needed)."""
    out: Array = run_lengths(index, env_ids, t0, length, within_episode) == length
    return out


def gather_runs(
    cols: Columns, index: EpisodeIndex, env_ids: Array, t0: Array, n_real: Array, length: int
) -> dict[str, Array]:
    """Raw per-step fields of runs, shaped ``(B, length, ...)``, with ``mask`` and ``next_*``.

    Args:
        cols: The buffer's columns.
        index: The buffer's episode index.
        env_ids: Env of each run.
        t0: First absolute step of each run (stored).
        n_real: Real steps of each run (``<= length``; every real step is stored).
        length: Padded length ``L``.
    """
    C = index.env_capacity
    base = (env_ids * C)[:, None]
    pos = t0[:, None] + np.arange(length)
    mask = np.arange(length)[None, :] < n_real[:, None]
    pad = ~mask
    slots = base + pos % C
    both_slots = stack_pair(slots, base + (pos + 1) % C)
    out: dict[str, Array] = {}
    nexts: dict[str, Array] = {}
    for name in cols.steps:
        if name in cols.finals:
            # An observation and the next one are gathered into one (2, B, L, ...) array: one
            # fresh allocation instead of two large ones in a row, which make glibc trim and
            # re-fault its heap on every call (see assemble_transitions). Independent halves.
            arr, nexts[name] = cols.take(name, both_slots)
        else:
            arr = cols.take(name, slots)
        arr[pad] = 0
        out[name] = arr
    for name, col in cols.derived.items():
        arr = col[slots]
        arr[pad] = 0
        out[name] = arr
    fid = index.final_fid[slots]
    ends = mask & (fid >= 0)
    # An abandoned episode's last step has no next observation (fid == ABANDONED).
    follows = mask & (fid == -1) & (pos + 1 < index.env[env_ids, COUNT][:, None])
    F = index.finals_capacity
    final_pos = (env_ids[:, None] * F + fid % F)[ends]
    for name in cols.finals:
        nxt = nexts[name]
        nxt[~follows] = 0
        nxt[ends] = cols.take_finals(name, final_pos)
        out["next_" + name] = nxt
    out["mask"] = mask
    out["next_known"] = ends | follows
    return out


def stored_ranges(index: EpisodeIndex, env_ids: Array) -> tuple[Array, Array]:
    """``(head, count)`` of the given envs: stored steps are ``[head, count)``."""
    return index.env[env_ids, HEAD].copy(), index.env[env_ids, COUNT].copy()


def draw_sequence_starts(
    index: EpisodeIndex,
    rng: np.random.Generator,
    batch_size: int,
    length: int,
    *,
    within_episode: bool,
    pad: bool,
    balance_envs: bool,
) -> tuple[Array, Array]:
    """Starts of sequences: uniform over stored steps, or env-balanced (ALF ``get_batch``).

    With ``pad=False`` only starts whose ``length`` steps are all real qualify: drawn from the
    steps that fit before each env's cursor, then (``within_episode``) by rejection of runs that
    cross an episode end, with an exact fallback when such starts are rare.

    Returns:
        ``(env_ids, t0)``; ordered by env when ``balance_envs``.

    Raises:
        EmptyBufferError: No start qualifies.
    """
    heads = index.env[:, HEAD]
    stored = index.stored_per_env()
    if not pad:
        stored = np.maximum(stored - length + 1, 0)  # runs must fit before the cursor
    if not stored.any():
        raise EmptyBufferError(
            f"sample_sequences: no start for {length} steps ({index.stored} stored steps)"
        )

    def draw(n: int) -> tuple[Array, Array]:
        if balance_envs:
            return draw_balanced(heads, stored, n, rng)
        return draw_uniform(heads, stored, n, rng)

    env_ids, t0 = draw(batch_size)
    if not pad and within_episode:
        env_ids, t0 = _reject_crossing(index, rng, env_ids, t0, stored, length, draw, balance_envs)
    if balance_envs:
        order = np.argsort(env_ids, kind="stable")
        env_ids, t0 = env_ids[order], t0[order]
    return env_ids, t0


def _reject_crossing(
    index: EpisodeIndex,
    rng: np.random.Generator,
    env_ids: Array,
    t0: Array,
    sizes: Array,
    length: int,
    draw: Callable[[int], tuple[Array, Array]],
    balance_envs: bool,
) -> tuple[Array, Array]:
    """Redraw starts whose run crosses an episode end, until none does.

    With ``balance_envs`` a redraw keeps the row's env (the env was chosen uniformly; only its
    start is redrawn), so every env with a valid start keeps the same mass.
    """
    heads = index.env[:, HEAD]
    for _ in range(_REJECTION_ROUNDS):
        bad = ~valid_sequence_starts(index, env_ids, t0, length, True)
        if not bad.any():
            return env_ids, t0
        if balance_envs:
            e = env_ids[bad]
            t0[bad] = heads[e] + uniform_below(sizes[e], rng)
        else:
            env_ids[bad], t0[bad] = draw(int(bad.sum()))
    # Such starts are rare: enumerate them once and draw among them exactly.
    all_env, all_t = expand_ranges(heads, sizes)
    ok = valid_sequence_starts(index, all_env, all_t, length, True)
    if not ok.any():
        raise EmptyBufferError(
            f"sample_sequences: no episode has {length} consecutive stored steps (pad=False)"
        )
    cand_env, cand_t = all_env[ok], all_t[ok]  # grouped by env
    bad = ~valid_sequence_starts(index, env_ids, t0, length, True)
    if balance_envs:
        per_env = np.bincount(cand_env, minlength=index.num_envs)
        e = env_ids[bad]
        lost = per_env[e] == 0  # envs without any valid start: choose among the others
        valid_envs = np.flatnonzero(per_env)
        e[lost] = valid_envs[rng.integers(0, valid_envs.shape[0], int(lost.sum()))]
        pick = (np.cumsum(per_env) - per_env)[e] + uniform_below(per_env[e], rng)
    else:
        pick = rng.integers(0, cand_env.shape[0], size=int(bad.sum()))
    env_ids[bad], t0[bad] = cand_env[pick], cand_t[pick]
    return env_ids, t0
