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

from typing import Any

import numpy as np

from rlreplay.assemble.transitions import stack_pair
from rlreplay.episodes.index import COUNT, HEAD, EpisodeIndex
from rlreplay.storage.columns import Columns

__all__ = ["gather_runs", "run_lengths", "stored_ranges", "valid_sequence_starts"]

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
