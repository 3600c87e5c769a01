"""Transitions from stored steps: n-step windows, discounts, next and final observations, frame
stacks, as the NumPy core's assembler builds them (:mod:`rlreplay.assemble.transitions`).

For a step ``t`` whose episode ends at step ``d`` (or runs on), the window is ``t .. t+m-1``
with ``m = min(n, d - t + 1)``: ``reward = sum_{j<m} gamma^j r_{t+j}``, ``next_<obs> =
obs_{t+m}`` or the episode's final observation when the window reached its end, ``discount =
0`` if terminated else ``gamma^m``. Frame stacks hold frames ``tau-k+1 .. tau`` of the same
episode, padded before its first step with zeros or the first frame.

Bit for bit: the rewards are multiplied by the NumPy core's powers of ``gamma`` (the same
numbers, :func:`rlreplay.assemble.powers.reward_powers` for a scalar reward) and summed in the
same order and dtype. XLA fuses ``a + b * c`` into one fused multiply-add, which rounds once
where NumPy rounds twice; each product is therefore passed through an integer XOR with a zero
that XLA cannot see is zero (:func:`_rounded`), which keeps the product's own rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.assemble.powers import reward_powers
from rlreplay.jax._lib import jnp, lax
from rlreplay.jax.config import BufferConfig
from rlreplay.jax.state import BufferState

__all__ = ["transitions"]


def _powers(config: BufferConfig) -> tuple[list[Any], Any]:
    """``(reward multipliers, discount table)`` exactly as the NumPy core computes them: its
    one-call kernel for a scalar reward, its general path for any other shape."""
    n, gamma = config.n_step, config.gamma
    dtype = config.stored["reward"]
    if config.schema.fields["reward"].shape == ():
        table = reward_powers(gamma, n, dtype)
        return [dtype.type(table[0, j]) for j in range(n)], table[1].astype(np.float32)
    # NumPy multiplies by the Python float gamma ** j, which it rounds to the reward's dtype.
    mults = [dtype.type(gamma**j) for j in range(n)]
    discounts = (np.float64(gamma) ** np.arange(n + 1)).astype(np.float32)
    return mults, discounts


def _rounded(x: Any, zero: Any) -> Any:
    """``x`` itself, but as a value XLA must materialise (no fused multiply-add through it)."""
    bits = lax.bitcast_convert_type(x, zero.dtype) ^ zero
    return lax.bitcast_convert_type(bits, x.dtype)


class _Rows:
    """Rows of steps ``t + j`` for small offsets ``-C < j < C``, from one remainder per step:
    ``t % C + j`` wraps at most once, so compares and selects replace the integer division
    that :func:`rlreplay.jax.ring.rows_of` would repeat (and that XLA recomputes in every
    fused consumer).
    """

    def __init__(self, config: BufferConfig, env: Any, t: Any) -> None:
        self.C, self.E, self.env = config.env_capacity, config.num_envs, env
        self.tc = lax.rem(jnp.maximum(t, 0), self.C)  # (t >= 0 for any issued id)

    def at(self, j: Any, *, back: bool = False) -> Any:
        """Rows of ``t + j`` (``back``: ``j`` may be negative); ``j`` of shape ``(B,)`` or
        ``(B, k)``."""
        stacked = jnp.ndim(j) == 2
        tc = self.tc[:, None] if stacked else self.tc
        env = self.env[:, None] if stacked else self.env
        r = tc + j
        r = jnp.where(r >= self.C, r - self.C, r)
        if back:
            r = jnp.where(r < 0, r + self.C, r)
        return r * self.E + env


def _window(
    config: BufferConfig, state: BufferState, rows: _Rows, t: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """``(m, reward, terminated, truncated, ended)`` of the windows at steps ``t``."""
    cols = state.columns
    rew, te_col, tr_col = cols["reward"], cols["terminated"], cols["truncated"]
    n = config.n_step
    if n == 1:
        slot = rows.at(0)
        te, tr = te_col[slot], tr_col[slot]
        return jnp.ones_like(t), rew[slot], te, tr & ~te, te | tr
    mults, _ = _powers(config)
    int_type = jnp.int64 if rew.dtype == jnp.float64 else jnp.int32
    # The sign bit of the (non-negative) step counter: 0, but only known when the program runs.
    sign = state.count.dtype.itemsize * 8 - 1
    zero = lax.shift_right_logical(state.count, state.count.dtype.type(sign)).astype(int_type)
    scalar = rew.ndim == 1
    ret = jnp.zeros((t.shape[0], *rew.shape[1:]), rew.dtype)
    alive = jnp.ones(t.shape, bool)
    m = jnp.zeros_like(t)
    te = jnp.zeros(t.shape, bool)
    tr = jnp.zeros(t.shape, bool)
    expand = (slice(None),) + (None,) * (rew.ndim - 1)
    for j in range(n):
        s = rows.at(j)
        r = rew[s]
        if scalar:  # the core's kernel: ret + p_j * r while the window runs
            ret = jnp.where(alive, ret + _rounded(mults[j] * r, zero), ret)
        else:  # the core's general path: ret + where(alive, p_j * r, 0)
            ret = ret + _rounded(jnp.where(alive[expand], mults[j] * r, 0), zero)
        m = m + alive
        a, b = te_col[s], tr_col[s]
        te = te | (alive & a)
        tr = tr | (alive & b & ~a)
        alive = alive & ~(a | b)
    return m, ret, te, tr, ~alive


def transitions(config: BufferConfig, state: BufferState, env: Any, t: Any) -> dict[str, Any]:
    """The transitions at steps ``t`` of envs ``env`` (assumed sampleable).

    Returns:
        The keys of :meth:`rlreplay.ReplayBuffer.get_transitions` in its order, without
        ``weights``: declared fields (``obs`` stacked to ``(B, k, *frame)`` when ``k > 1``),
        ``reward``, ``next_<obs>`` per observation field, ``next_<name>`` per ``next_fields``,
        ``terminated``, ``truncated``, ``discount``, ``steps``, ``ids``, ``env_ids``.
    """
    E, F, k = config.num_envs, config.finals_per_env, config.frame_stack
    cols = state.columns
    rows = _Rows(config, env, t)
    slot = rows.at(0)
    m, reward, te, tr, ended = _window(config, state, rows, t)
    next_row = rows.at(m)
    # The final record of the episode whose last step t+m-1 the window reached.
    fid = state.final_fid[rows.at(m - 1)]
    final_pos = env * F + lax.rem(jnp.maximum(fid, 0), F)
    first = state.ep_start[slot][:, None] if k > 1 else None
    lanes = jnp.arange(1 - k, 1, dtype=t.dtype)

    def stack(col: Any, last: Any) -> Any:
        """Frames ``last-k+1 .. last`` of each row's episode."""
        pos = last[:, None] + lanes
        offset = jnp.maximum(pos, first) - t[:, None]  # in [1 - k, n_step]
        frames = col[rows.at(offset, back=True)]
        if config.stack_pad == "zero":
            pad = (pos < first).reshape(pos.shape + (1,) * (col.ndim - 1))
            frames = jnp.where(pad, jnp.zeros((), col.dtype), frames)
        return frames

    out: dict[str, Any] = {}
    nexts: dict[str, Any] = {}
    builtin = ("reward", "terminated", "truncated")
    for name in config.schema.fields:  # (the state's dicts come back from jit key-sorted)
        if name in builtin:
            continue
        col = cols[name]
        if name not in state.finals:
            out[name] = col[slot]
            continue
        final = state.finals[name][final_pos]
        ended_rows = ended.reshape(ended.shape + (1,) * (col.ndim - 1))
        if name == "obs" and k > 1:
            out[name] = stack(col, t)
            nxt = stack(col, t + m)
            nxt = nxt.at[:, -1].set(jnp.where(ended_rows, final, nxt[:, -1]))
        else:
            out[name] = col[slot]
            nxt = jnp.where(ended_rows, final, col[next_row])
        nexts["next_" + name] = nxt
    for name in config.next_fields:
        col = cols[name]
        ended_rows = ended.reshape(ended.shape + (1,) * (col.ndim - 1))
        nexts["next_" + name] = jnp.where(ended_rows, jnp.zeros((), col.dtype), col[next_row])
    _, discounts = _powers(config)
    out["reward"] = reward
    out.update(nexts)
    out["terminated"] = te
    out["truncated"] = tr
    out["discount"] = jnp.where(te, jnp.float32(0.0), jnp.asarray(discounts)[m])
    out["steps"] = m
    out["ids"] = t * E + env
    out["env_ids"] = env
    return out
