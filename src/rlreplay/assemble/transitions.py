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

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numba
import numpy as np

from rlreplay.assemble.powers import reward_powers
from rlreplay.assemble.stack_last import stack_frames_last
from rlreplay.codegen.prefetch import prefetch_slot
from rlreplay.episodes.index import FINAL_FID, EpisodeIndex
from rlreplay.storage.columns import Columns

__all__ = ["Window", "assemble_transitions", "nstep_window", "stack_frames", "stack_pair"]

Array = np.ndarray[Any, Any]


class Window(NamedTuple):
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


def stack_pair(a: Array, b: Array) -> Array:
    """``np.stack([a, b])`` for two arrays of one shape and dtype, without its generic overhead."""
    out = np.empty((2, *a.shape), a.dtype)
    out[0] = a
    out[1] = b
    return out


@numba.njit(cache=True)
def _window_kernel(
    rew: Array,
    te_col: Array,
    tr_col: Array,
    slot_meta: Array,
    env_ids: Array,
    t: Array,
    C: int,
    F: int,
    n: int,
    powers: Array,
    warm: Array,
    out_i: Array,
    out_r: Array,
    out_f: Array,
    out_b: Array,
) -> None:  # pragma: no cover - compiled
    """:func:`nstep_window` for a scalar float32 or float64 reward, plus the slots, in one pass.

    Per row ``i`` writes ``out_i[:, i] = (slot, next_slot, m, final_pos, id)``
    (``final_pos`` -1 unless the window reached its episode's end), ``out_r[i]`` the reward,
    ``out_f[i]`` the discount and ``out_b[:, i] = (terminated, truncated, ended)``. The reward
    sum uses the NumPy path's operations (``powers`` from
    :func:`rlreplay.assemble.powers.reward_powers`): ``float32(gamma ** j) * r`` added in
    float32 for a float32 reward, ``(gamma ** j) * r`` added in float64 for a float64 one; one
    step is the reward itself.

    First it prefetches, for every row, the lines of its step (and of the step after it) in
    every column of ``warm`` (:meth:`Columns.prefetch_table`), so that the batch's cache misses
    overlap, here and in the gathers that follow.
    """
    for i in range(t.shape[0]):
        prefetch_slot(warm, env_ids[i] * C + t[i] % C)
    E = slot_meta.shape[0] // C
    for i in range(t.shape[0]):
        e = env_ids[i]
        base = e * C
        out_i[4, i] = t[i] * E + e  # the id
        ret = powers[0, 0] - powers[0, 0]  # 0 in the reward's dtype
        m = 0
        te = False
        tr = False
        out_i[3, i] = -1
        for j in range(n):
            s = base + (t[i] + j) % C
            ret = rew[s] * powers[0, 0] if n == 1 else ret + powers[0, j] * rew[s]
            m += 1
            a, b = te_col[s], tr_col[s]
            if a or b:
                te = a
                tr = b and not a
                out_i[3, i] = e * F + slot_meta[s, FINAL_FID] % F
                break
        slot = base + t[i] % C
        out_i[0, i] = slot
        out_i[1, i] = base + (t[i] + m) % C
        out_i[2, i] = m
        out_r[i] = ret
        out_f[i] = 0.0 if te else powers[1, m]
        out_b[0, i] = te
        out_b[1, i] = tr
        out_b[2, i] = out_i[3, i] >= 0


def _fast_windows(
    cols: Columns, index: EpisodeIndex, env_ids: Array, t: Array, n: int, gamma: float
) -> tuple[Array, Window, Array, Array, Array] | None:
    """``(slots, window, final_pos, discount, ids)`` from one kernel call (``slots`` is the
    ``(2, B)`` array of each draw's slot and its next step's slot), for
    a scalar float32 or float64 reward (``None`` otherwise: the NumPy path handles any reward)."""
    rew = cols.steps["reward"]
    if rew.ndim != 1 or rew.dtype not in (np.float32, np.float64):
        return None
    B = t.shape[0]
    out_i = np.empty((5, B), np.int64)
    out_b = np.empty((3, B), np.bool_)
    if rew.dtype == np.float32:
        both = np.empty((2, B), np.float32)
        out_r, out_f = both[0], both[1]
    else:
        out_r, out_f = np.empty(B, np.float64), np.empty(B, np.float32)
    te_col, tr_col = cols.steps["terminated"], cols.steps["truncated"]
    C, F = index.env_capacity, index.finals_capacity
    _window_kernel(
        rew, te_col, tr_col, index.slot_meta, env_ids, t, C, F, n,
        _powers(float(gamma), n, rew.dtype), cols.prefetch_table, out_i, out_r, out_f, out_b,
    )  # fmt: skip
    win = Window(m=out_i[2], reward=out_r, terminated=out_b[0], truncated=out_b[1],
                 ended=out_b[2])  # fmt: skip
    return out_i[:2], win, out_i[3], out_f, out_i[4]


@functools.lru_cache(maxsize=64)
def _powers(gamma: float, n: int, dtype: np.dtype[Any]) -> Array:
    """:func:`reward_powers`, kept per ``(gamma, n, dtype)`` (read-only)."""
    out = reward_powers(gamma, n, dtype)
    out.flags.writeable = False
    return out


def stack_frames(
    take: Callable[[Array], Array],
    base: Array,
    t: Array,
    ep_start: Array,
    k: int,
    C: int,
    zero_pad: bool,
) -> Array:
    """Frames ``t-k+1 .. t`` per sampled row, shape ``t.shape + (k, *frame)``.

    ``take(rows)`` gathers rows of the frame column (e.g. ``col.__getitem__``). ``t`` may have
    any shape whose last axis is the batch's (``base`` and ``ep_start`` are per row):
    ``(2, B)`` gathers the current and next stacks in one go.
    """
    pos = t[..., None] + np.arange(1 - k, 1)
    first = ep_start[:, None]
    pad = pos < first
    frames: Array = take(base[:, None] + np.maximum(pos, first) % C)
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
    stack_last: bool = False,
) -> dict[str, Array]:
    """Gather the transitions at absolute steps ``t`` of ``env_ids`` (all sampleable).

    ``stack_last``: the ``obs`` and ``next_obs`` stacks (``frame_stack > 1``) are laid out
    ``(B, *frame, frame_stack)``, C-contiguous (:func:`rlreplay.assemble.stack_frames_last`),
    instead of ``(B, frame_stack, *frame)``; the same values.

    Returns:
        Declared fields (observation fields stacked when ``frame_stack > 1`` for ``obs``),
        ``reward``, ``next_<obs>`` per observation field, ``next_<name>`` for each of
        ``next_fields`` (the field at step ``t+m``; zeros where the window reached the episode's
        end, since no step follows it), ``terminated``, ``truncated``, ``discount``, ``steps``,
        ``ids``.
    """
    C = index.env_capacity
    base = env_ids * C if frame_stack > 1 else None
    fast = _fast_windows(cols, index, env_ids, t, n_step, gamma)
    discount = None
    if fast is not None:
        pair, win, final_pos, discount, ids = fast
        slot, next_slot = pair
        ended_rows = win.ended.nonzero()[0]
        final_pos = final_pos[ended_rows]
    else:
        ids = index.ids(env_ids, t)
        base = env_ids * C
        slot = base + t % C
        win = nstep_window(cols, index, base, t, n_step, gamma, slot)
        t_next = t + 1 if n_step == 1 else t + win.m
        next_slot = base + t_next % C
        pair = stack_pair(slot, next_slot)
        ended_rows = win.ended.nonzero()[0]
        if ended_rows.size:
            # The final record of the episode whose last step t+m-1 the window reached.
            F = index.finals_capacity
            last_slot = base[ended_rows] + (t_next[ended_rows] - 1) % C
            final_pos = env_ids[ended_rows] * F + index.final_fid[last_slot] % F
    ep_start = index.ep_start[slot] if frame_stack > 1 else None

    out: dict[str, Array] = {}
    nexts: dict[str, Array] = {}
    for name in cols.steps:
        if name in ("reward", "terminated", "truncated"):
            continue
        if name not in cols.finals:
            out[name] = cols.take(name, slot)
            continue
        # Current and next values are gathered into one (2, B, ...) array: one fancy index
        # instead of two, and one fresh allocation (two large ones in a row make glibc trim
        # and re-fault the heap on every call). Its two halves are independent arrays.
        if name == "obs" and ep_start is not None and base is not None:
            steps = stack_pair(t, t + win.m)  # the current and next steps
            if stack_last:
                col = cols.steps[name]
                both = stack_frames_last(col, base, steps, ep_start, frame_stack, C, zero_pad)
            else:
                take = functools.partial(cols.take, name)
                both = stack_frames(take, base, steps, ep_start, frame_stack, C, zero_pad)
            out[name], nxt = both[0], both[1]
            if ended_rows.size:
                finals = cols.take_finals(name, final_pos)
                if stack_last:
                    nxt[ended_rows, ..., -1] = finals
                else:
                    nxt[ended_rows, -1] = finals
        else:
            both = cols.take(name, pair)
            out[name], nxt = both[0], both[1]
            if ended_rows.size:
                nxt[ended_rows] = cols.take_finals(name, final_pos)
        nexts["next_" + name] = nxt
    for name, col in cols.derived.items():
        out[name] = col[slot]
    for name in next_fields:
        nxt = cols.take(name, next_slot)
        if ended_rows.size:
            nxt[ended_rows] = 0
        nexts["next_" + name] = nxt
    out["reward"] = win.reward
    out.update(nexts)
    out["terminated"] = win.terminated
    out["truncated"] = win.truncated
    if discount is not None:
        out["discount"] = discount
    elif n_step == 1:  # m = 1 everywhere: one select instead of a power, a select and a cast
        out["discount"] = np.where(win.terminated, np.float32(0.0), np.float32(gamma))
    else:
        out["discount"] = np.where(win.terminated, 0.0, np.float64(gamma) ** win.m).astype(
            np.float32
        )
    out["steps"] = win.m
    out["ids"] = ids
    return out
