"""The kernels of the one-call samplers (:mod:`rlreplay.sampling.onecall`).

:func:`_sample_kernel` draws uniformly, :func:`_prio_kernel` by priority from a sum tree;
both then fill the batch's rows through :func:`_fill_rows` (n-step windows, ids, discounts,
flags, weights and every column's gather, frame stacks and final observations included),
straight into the batch's arrays. They are compiled without Numba's reference-counting
runtime and allocate nothing.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import literal_unroll

from rlreplay.codegen.prefetch import prefetch_slot
from rlreplay.sampling.tree_kernels import _LANE, _SHIFT, _descend_all

__all__ = ["_prio_kernel", "_sample_kernel"]

Array = np.ndarray[Any, Any]
# Compiled without Numba's reference-counting runtime: arrays are unboxed into plain structs,
# with no meminfo or reference traffic per argument (see rlreplay.writing.lockstep).
_NO_NRT: dict[str, Any] = {"cache": True, "_nrt": False}


@numba.njit(inline="always")
def _2d(a: Array) -> Array:  # pragma: no cover - compiled
    """``a`` as ``(rows, items per row)``: a view (C-contiguous arrays only)."""
    return a.reshape(a.shape[0], a.size // max(a.shape[0], 1))


@numba.njit(**_NO_NRT)
def _outputs_fit(
    B: int,
    k: int,
    plain: Any,
    pairs: Any,
    stacked: Any,
    nexts: Any,
    env_ids: Array,
    ids: Array,
    steps: Array,
    reward: Array,
    discount: Array,
    weights: Array,
    terminated: Array,
    truncated: Array,
) -> bool:  # pragma: no cover - compiled
    """Whether every output of :func:`_sample_kernel` has the shape a batch of ``B`` needs
    (its own function: Numba unrolls a heterogeneous tuple once per function)."""
    outs_ok = (
        env_ids.shape[0] == B and ids.shape[0] == B and steps.shape[0] == B
        and reward.shape[0] == B and discount.shape[0] == B and weights.shape[0] == B
        and terminated.shape[0] == B and truncated.shape[0] == B
    )  # fmt: skip
    for pair1 in literal_unroll(plain):
        src1, dst1 = _2d(pair1[0]), _2d(pair1[1])
        outs_ok &= dst1.shape[0] == 0 or (dst1.shape[0] == B and dst1.shape[1] == src1.shape[1])
    for pair2 in literal_unroll(nexts):
        src2, dst2 = _2d(pair2[0]), _2d(pair2[1])
        outs_ok &= dst2.shape[0] == 0 or (dst2.shape[0] == B and dst2.shape[1] == src2.shape[1])
    for quad3 in literal_unroll(pairs):
        src3, fin3, cur3, nxt3 = _2d(quad3[0]), _2d(quad3[1]), _2d(quad3[2]), _2d(quad3[3])
        if cur3.shape[0]:
            outs_ok &= (
                cur3.shape[0] == B and nxt3.shape[0] == B and cur3.shape[1] == src3.shape[1]
                and nxt3.shape[1] == src3.shape[1] and fin3.shape[1] == src3.shape[1]
            )  # fmt: skip
    for quad4 in literal_unroll(stacked):
        src4, fin4, cur4, nxt4 = _2d(quad4[0]), _2d(quad4[1]), _2d(quad4[2]), _2d(quad4[3])
        if cur4.shape[0]:
            outs_ok &= (
                cur4.shape[0] == B and nxt4.shape[0] == B and cur4.shape[1] == k * src4.shape[1]
                and nxt4.shape[1] == k * src4.shape[1] and fin4.shape[1] == src4.shape[1]
            )  # fmt: skip
    return bool(outs_ok)


@numba.njit(**_NO_NRT)
def _fill_rows(
    B: int,
    E: int,
    scratch: Array,
    slot_meta: Array,
    rew: Array,
    te_col: Array,
    tr_col: Array,
    C: int,
    F: int,
    n: int,
    powers: Array,
    k: int,
    zero_pad: bool,
    plain: Any,
    pairs: Any,
    stacked: Any,
    nexts: Any,
    env_ids: Array,
    ids: Array,
    steps: Array,
    reward: Array,
    discount: Array,
    weights: Array,
    terminated: Array,
    truncated: Array,
    unit_weights: bool,
) -> None:  # pragma: no cover - compiled
    """The rows of a batch whose draws are known: ``env_ids[i]``, ``ids[i]`` and
    ``scratch[1, i] = t % C`` set for each row; fills the n-step windows, flags, discounts,
    (with ``unit_weights``) weights of 1, and every column's gather (see
    :func:`_sample_kernel`)."""
    for i in range(B):
        e = env_ids[i]
        tm = scratch[1, i]
        base = e * C
        ret = powers[0, 0] - powers[0, 0]  # 0 in the reward's dtype (float32 or float64)
        m = 0
        te = False
        tr = False
        for j in range(n):
            r = tm + j
            while r >= C:
                r -= C
            s = base + r
            # one step: the reward itself (a -0.0 stays -0.0, as the NumPy path's copy)
            ret = rew[s] * powers[0, 0] if n == 1 else ret + powers[0, j] * rew[s]
            m += 1
            a, b = te_col[s], tr_col[s]
            if a or b:
                te = a
                tr = b and not a
                break
        steps[i] = m
        scratch[0, i] = base + tm  # the slot, the next step's, the final record (or -1)
        r = tm + m
        while r >= C:
            r -= C
        scratch[1, i] = base + r
        scratch[2, i] = e * F + slot_meta[s, 1] % F if te or tr else -1  # s: the window's end
        reward[i] = ret
        discount[i] = 0.0 if te else powers[1, m]
        if unit_weights:
            weights[i] = 1.0
        terminated[i] = te
        truncated[i] = tr
    # The gathers, column by column (views made once per column, not per row). Row i's
    # window ended at its episode's end exactly when one of its flags is set.
    for pair5 in literal_unroll(plain):
        src5, dst5 = _2d(pair5[0]), _2d(pair5[1])
        if dst5.shape[0]:
            for i in range(B):
                s = scratch[0, i]
                for q in range(src5.shape[1]):
                    dst5[i, q] = src5[s, q]
    for pair6 in literal_unroll(nexts):
        src6, dst6 = _2d(pair6[0]), _2d(pair6[1])
        if dst6.shape[0]:
            for i in range(B):
                s = scratch[1, i]
                ended = scratch[2, i] >= 0
                for q in range(src6.shape[1]):
                    dst6[i, q] = 0 if ended else src6[s, q]
    for quad7 in literal_unroll(pairs):
        src7, fin7, cur7, nxt7 = _2d(quad7[0]), _2d(quad7[1]), _2d(quad7[2]), _2d(quad7[3])
        if cur7.shape[0]:
            w = src7.shape[1]
            for i in range(B):
                s = scratch[0, i]
                for q in range(w):
                    cur7[i, q] = src7[s, q]
                f = scratch[2, i]
                if f >= 0:
                    for q in range(w):
                        nxt7[i, q] = fin7[f, q]
                else:
                    s = scratch[1, i]
                    for q in range(w):
                        nxt7[i, q] = src7[s, q]
    for quad8 in literal_unroll(stacked):
        src8, fin8, cur8, nxt8 = _2d(quad8[0]), _2d(quad8[1]), _2d(quad8[2]), _2d(quad8[3])
        if cur8.shape[0]:
            w = src8.shape[1]
            for i in range(B):
                base = env_ids[i] * C
                t = ids[i] // E
                first = slot_meta[scratch[0, i], 0]  # EP_START of the row's slot
                f = scratch[2, i]
                for h in range(2):
                    frames = nxt8 if h else cur8
                    last = t + (steps[i] if h else 0)
                    for j in range(k):
                        pos = last - (k - 1) + j
                        if h == 1 and j == k - 1 and f >= 0:
                            for q in range(w):
                                frames[i, j * w + q] = fin8[f, q]
                        elif pos < first and zero_pad:
                            for q in range(w):
                                frames[i, j * w + q] = 0
                        else:
                            r = base + max(pos, first) % C
                            for q in range(w):
                                frames[i, j * w + q] = src8[r, q]


@numba.njit(**_NO_NRT)
def _sample_kernel(
    u: Array,
    env: Array,
    cum: Array,
    scratch: Array,
    slot_meta: Array,
    warm: Array,
    rew: Array,
    te_col: Array,
    tr_col: Array,
    C: int,
    F: int,
    n: int,
    powers: Array,
    k: int,
    zero_pad: bool,
    plain: Any,
    pairs: Any,
    stacked: Any,
    nexts: Any,
    env_ids: Array,
    ids: Array,
    steps: Array,
    reward: Array,
    discount: Array,
    weights: Array,
    terminated: Array,
    truncated: Array,
) -> int:  # pragma: no cover - compiled
    """Fill a uniform batch; returns ``B``, 0 if nothing is sampleable, -1 if an output's
    shape does not fit (nothing is written then).

    ``u`` are the uniforms of the draw (``rng.random(B)``); ``env`` the index's per-env
    table (``cum`` scratch of its length); ``plain`` pairs ``(column, out)``, ``pairs``
    ``(column, finals, out, next_out)`` for observations, ``stacked`` the same for the
    stacked ``obs`` (outs of shape ``(B, k, ...)``), ``nexts`` pairs ``(column, out)`` of
    ``next_fields``; a tuple with nothing to do holds one placeholder with 0 output rows.
    Positions map to steps as :func:`positions_to_steps` maps them, and windows are
    :func:`_window_kernel`'s, operation for operation (``powers`` from
    :func:`rlreplay.assemble.powers.reward_powers`: row 0 multiplies the rewards, in the
    reward's dtype, row 1 holds the float32 discounts).
    """
    B = u.shape[0]
    E = env.shape[0]
    total = 0
    for e in range(E):
        total += max(env[e, 4] - env[e, 3], 0)  # HI - LO
        cum[e] = total
    if total == 0:
        return 0
    outs_ok = _outputs_fit(
        B, k, plain, pairs, stacked, nexts, env_ids, ids, steps, reward, discount, weights,
        terminated, truncated,
    )  # fmt: skip
    if not outs_ok:
        return -1
    for i in range(B):
        p = int(u[i] * total)  # what astype(int64) does to a non-negative float
        if p > total - 1:
            p = total - 1
        e = 0
        if E > 1:  # the first env whose cumulative size exceeds p (searchsorted "right")
            lo_e, hi_e = 0, E - 1
            while lo_e < hi_e:
                mid = (lo_e + hi_e) // 2
                if cum[mid] > p:
                    hi_e = mid
                else:
                    lo_e = mid + 1
            e = lo_e
            p -= cum[e] - max(env[e, 4] - env[e, 3], 0)
        t = p + env[e, 3]
        tm = t % C  # the only division of a row: later positions wrap by subtraction
        scratch[1, i] = tm
        env_ids[i] = e
        ids[i] = t * E + e
        prefetch_slot(warm, e * C + tm)
    _fill_rows(
        B, E, scratch, slot_meta, rew, te_col, tr_col, C, F, n, powers, k, zero_pad, plain,
        pairs, stacked, nexts, env_ids, ids, steps, reward, discount, weights, terminated,
        truncated, True,
    )  # fmt: skip
    return int(B)


@numba.njit(**_NO_NRT)
def _prio_kernel(
    u: Array,
    env: Array,
    sums: Array,
    levels: Array,
    min_mass: float,
    beta: float,
    stratified: bool,
    masses: Array,
    scratch: Array,
    slot_meta: Array,
    warm: Array,
    rew: Array,
    te_col: Array,
    tr_col: Array,
    C: int,
    F: int,
    n: int,
    powers: Array,
    k: int,
    zero_pad: bool,
    plain: Any,
    pairs: Any,
    stacked: Any,
    nexts: Any,
    env_ids: Array,
    ids: Array,
    steps: Array,
    reward: Array,
    discount: Array,
    weights: Array,
    terminated: Array,
    truncated: Array,
    probabilities: Array,
) -> int:  # pragma: no cover - compiled
    """Fill a batch drawn by priority; returns ``B``, or -1 if an output's shape does not fit.

    The draw is :func:`rlreplay.sampling.priority_kernels._draw_kernel`'s, operation for operation:
    masses ``(i + u_i) * (total / B)`` (stratified) or ``u_i * total`` descend the sum tree
    ``sums`` (whose total must be ``> 0``) through the same :func:`_descend_all`; slot ``s =
    e * C + r`` is env ``e``'s step ``t = lo_e + ((r - lo_e) mod C)``; ``P = m / total`` and
    ``w = (min_mass / m) ** beta``. The rows are then filled as :func:`_sample_kernel` fills
    them (:func:`_fill_rows`). ``masses`` is float64 scratch of at least ``B``.
    """
    B = u.shape[0]
    E = env.shape[0]
    outs_ok = _outputs_fit(
        B, k, plain, pairs, stacked, nexts, env_ids, ids, steps, reward, discount, weights,
        terminated, truncated,
    )  # fmt: skip
    if not outs_ok or probabilities.shape[0] != B or masses.shape[0] < B:
        return -1
    total = sums[levels[0, 0], 0]
    stratum = total / B
    rest = masses[:B]
    slots = scratch[0, :B]
    for i in range(B):
        rest[i] = (i + u[i]) * stratum if stratified else u[i] * total
    _descend_all(sums, levels, rest, slots)
    for i in range(B):
        s = slots[i]
        m = sums[s >> _SHIFT, s & _LANE]
        e = s // C
        base = env[e, 3]  # LO
        t = base + (s - e * C - base) % C
        env_ids[i] = e
        ids[i] = t * E + e
        scratch[1, i] = t % C
        probabilities[i] = m / total
        weights[i] = (min_mass / m) ** beta
        prefetch_slot(warm, e * C + t % C)
    _fill_rows(
        B, E, scratch, slot_meta, rew, te_col, tr_col, C, F, n, powers, k, zero_pad, plain,
        pairs, stacked, nexts, env_ids, ids, steps, reward, discount, weights, terminated,
        truncated, False,
    )  # fmt: skip
    return int(B)
