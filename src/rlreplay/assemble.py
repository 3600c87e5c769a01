"""Turn sampled steps into transition arrays: n-step windows, frame stacks, next observations.

Everything here is a vectorised gather over the batch; the only Python loops run over the
window length ``n`` (small and fixed), never over sampled items.

For a step ``t`` whose episode ends at step ``d`` (or has not ended), the window is
``t .. t+m-1`` with ``m = min(n, d - t + 1)``:

* ``reward = sum_{j<m} gamma^j r_{t+j}``;
* ``terminated``/``truncated``: how the episode ended inside the window (``terminated`` wins
  when a step has both flags);
* ``next_<obs> = obs_{t+m}``, or the episode's final observation when the window reached its
  end (``t + m - 1 = d``);
* ``discount = 0`` if terminated else ``gamma^m``; ``steps = m``.

Frame stacks of depth ``k`` hold frames ``tau-k+1 .. tau`` of the same episode; frames before
the episode's first step are zeros (``stack_pad="zero"``) or copies of the first frame
(``"first"``, which is exactly clamping the frame position to the episode start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.episodes import EpisodeIndex
from rlreplay.storage.columns import Columns

__all__ = ["Window", "assemble_transitions", "nstep_window", "stack_frames"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Window:
    """The n-step window of each sampled step (arrays of length ``B``)."""

    m: Array  # int64 window length
    reward: Array  # discounted reward sum, shape (B, *reward_shape)
    terminated: Array  # bool
    truncated: Array  # bool
    ended: Array  # bool: the window reached the episode's last step


def nstep_window(
    cols: Columns, index: EpisodeIndex, base: Array, t: Array, n: int, gamma: float, slot: Array
) -> Window:
    """The n-step window of steps ``t`` (stored in ``slot``) of envs starting at slot ``base``."""
    C = index.env_capacity
    rew, te_col, tr_col = cols.steps["reward"], cols.steps["terminated"], cols.steps["truncated"]
    if n == 1:
        te, tr = te_col[slot], tr_col[slot]
        return Window(
            m=np.ones(t.shape[0], np.int64),
            reward=rew[slot].astype(np.result_type(rew.dtype, np.float32), copy=False),
            terminated=te,
            truncated=tr & ~te,
            ended=te | tr,
        )
    B = t.shape[0]
    ret = np.zeros((B, *rew.shape[1:]), np.result_type(rew.dtype, np.float32))
    alive = np.ones(B, np.bool_)
    m = np.zeros(B, np.int64)
    te = np.zeros(B, np.bool_)
    tr = np.zeros(B, np.bool_)
    expand = (slice(None),) + (None,) * (rew.ndim - 1)
    for j in range(n):
        s = base + (t + j) % C
        ret += np.where(alive[expand], (gamma**j) * rew[s], 0)
        m += alive
        te_j, tr_j = te_col[s], tr_col[s]
        te |= alive & te_j
        tr |= alive & tr_j & ~te_j
        alive &= ~(te_j | tr_j)
    return Window(m=m, reward=ret, terminated=te, truncated=tr, ended=~alive)


def stack_frames(
    col: Array, base: Array, t: Array, ep_start: Array, k: int, C: int, zero_pad: bool
) -> Array:
    """Frames ``t-k+1 .. t`` of each sampled episode, shape ``t.shape + (k, *frame)``.

    ``t`` may have any shape whose last axis is the batch's (``base`` and ``ep_start`` are
    per row): ``(2, B)`` gathers the current and next stacks in one go.
    """
    pos = t[..., None] + np.arange(1 - k, 1)
    first = ep_start[:, None]
    pad = pos < first
    frames: Array = col[base[:, None] + np.maximum(pos, first) % C]
    if zero_pad and pad.any():
        frames[pad] = 0
    return frames


def assemble_transitions(
    cols: Columns,
    index: EpisodeIndex,
    env_ids: Array,
    t: Array,
    *,
    n_step: int,
    gamma: float,
    frame_stack: int,
    zero_pad: bool,
    next_fields: tuple[str, ...] = (),
) -> dict[str, Array]:
    """Gather the transitions at absolute steps ``t`` of ``env_ids`` (all sampleable).

    Returns:
        Declared fields (observation fields stacked when ``frame_stack > 1`` for ``obs``),
        ``reward``, ``next_<obs>`` per observation field, ``next_<name>`` for each of
        ``next_fields`` (the field at step ``t+m``; zeros where the window reached the episode's
        end, since no step follows it), ``terminated``, ``truncated``, ``discount``, ``steps``.
    """
    C = index.env_capacity
    base = env_ids * C
    slot = base + t % C
    win = nstep_window(cols, index, base, t, n_step, gamma, slot)
    t_next = t + 1 if n_step == 1 else t + win.m
    next_slot = base + t_next % C
    ended_rows = np.flatnonzero(win.ended)
    if ended_rows.size:
        # The final record of the episode whose last step t+m-1 the window reached.
        F = index.finals_capacity
        last_slot = base[ended_rows] + (t_next[ended_rows] - 1) % C
        final_pos = env_ids[ended_rows] * F + index.final_fid[last_slot] % F
    ep_start = index.ep_start[slot] if frame_stack > 1 else None

    out: dict[str, Array] = {}
    nexts: dict[str, Array] = {}
    for name, col in cols.steps.items():
        if name in ("reward", "terminated", "truncated"):
            continue
        if name not in cols.finals:
            out[name] = col[slot]
            continue
        # Current and next values are gathered into one (2, B, ...) array: one fancy index
        # instead of two, and one fresh allocation (two large ones in a row make glibc trim
        # and re-fault the heap on every call). Its two halves are independent arrays.
        if name == "obs" and ep_start is not None:
            both = stack_frames(
                col, base, np.stack([t, t_next]), ep_start, frame_stack, C, zero_pad
            )
            out[name], nxt = both[0], both[1]
            if ended_rows.size:
                nxt[ended_rows, -1] = cols.finals[name][final_pos]
        else:
            both = col[np.stack([slot, next_slot])]
            out[name], nxt = both[0], both[1]
            if ended_rows.size:
                nxt[ended_rows] = cols.finals[name][final_pos]
        nexts["next_" + name] = nxt
    for name, col in cols.derived.items():
        out[name] = col[slot]
    for name in next_fields:
        nxt = cols.steps[name][next_slot]
        if ended_rows.size:
            nxt[ended_rows] = 0
        nexts["next_" + name] = nxt
    out["reward"] = win.reward
    out.update(nexts)
    out["terminated"] = win.terminated
    out["truncated"] = win.truncated
    if n_step == 1:  # m = 1 everywhere: one select instead of a power, a select and a cast
        out["discount"] = np.where(win.terminated, np.float32(0.0), np.float32(gamma))
    else:
        out["discount"] = np.where(win.terminated, 0.0, np.float64(gamma) ** win.m).astype(
            np.float32
        )
    out["steps"] = win.m
    return out
