"""Uniform ``sample(B)`` in one Numba call: the small-buffer path of :meth:`ReplayBuffer.sample`.

At 10^3-10^5 stored transitions a batch's memory work is a few microseconds; what a call
costs there is fixed overhead: argument handling, the arrays of the batch, and one dispatch
per kernel or NumPy operation. Here a uniform draw with replacement costs

* one ``rng.random(B)`` (the buffer's generator, so the stream and the batch are exactly the
  general path's: :func:`rlreplay.sampling.uniform.draw_uniform` draws the same way);
* one :func:`_sample_kernel` call: positions to ``(env, t)`` (its binary search is
  ``searchsorted(cum, pos, "right")``), the n-step windows (:func:`rlreplay.assemble.
  _window_kernel`'s arithmetic), ids, discounts, flags, weights, and every column's gather,
  frame stacks, next and final observations included, straight into the batch's arrays;
* a handful of allocations (one per dtype group; none with ``out=``), made by Python code
  generated once per buffer (:func:`rlreplay.codegen.define`), so a call walks no field list.

Nothing the buffer already knows is checked again (columns never move; final-observation
columns are looked up per call since they may be reallocated). An ``out=`` batch is checked
in full the first time it is seen (keys, dtypes, shapes, C order, writable, no memory shared
with another output or with the buffer) and the kernel checks every output's shape on each
call, so a reused batch can never be written out of bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numba
import numpy as np
from numba import literal_unroll

from rlreplay.batch import Batch
from rlreplay.codegen import define
from rlreplay.episodes import EpisodeIndex
from rlreplay.prefetch import prefetch_address
from rlreplay.storage.columns import Columns

__all__ = ["FastSampler", "sample_batch"]

Array = np.ndarray[Any, Any]
# Compiled without Numba's reference-counting runtime: arrays are unboxed into plain structs,
# with no meminfo or reference traffic per argument (see rlreplay.lockstep).
_NO_NRT: dict[str, Any] = {"cache": True, "_nrt": False}


@numba.njit(inline="always")
def _2d(a: Array) -> Array:  # pragma: no cover - compiled
    """``a`` as ``(rows, items per row)``: a view (C-contiguous arrays only)."""
    return a.reshape(a.shape[0], a.size // max(a.shape[0], 1))


@numba.njit(cache=True)
def _fill_powers(gamma: float, powers: Array) -> None:  # pragma: no cover - compiled
    for j in range(powers.shape[1]):
        powers[0, j] = np.float32(gamma**j)
        powers[1, j] = np.float32(gamma**j)


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
    :func:`_window_kernel`'s, operation for operation (``powers[0, j]`` is ``float32(gamma **
    j)``, ``powers[1, m]`` the discount ``float32(gamma ** m)``, both computed once by
    :func:`_fill_powers` with :func:`_window_kernel`'s expressions).
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
        s = e * C + tm
        for c in range(warm.shape[0]):
            first = warm[c, 0] + s * warm[c, 1]
            for line in range(first >> 6, ((first + 2 * warm[c, 1] - 1) >> 6) + 1):
                prefetch_address(line << 6)
    for i in range(B):
        e = env_ids[i]
        tm = scratch[1, i]
        base = e * C
        ret = np.float32(0.0)
        m = 0
        te = False
        tr = False
        for j in range(n):
            r = tm + j
            while r >= C:
                r -= C
            s = base + r
            ret = np.float32(ret + powers[0, j] * rew[s])
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
    return int(B)


_PLAIN0 = (np.zeros((1, 1), np.uint8), np.zeros((0, 1), np.uint8))
_QUAD0 = (*_PLAIN0, np.zeros((0, 1), np.uint8), np.zeros((0, 1), np.uint8))
# Prefetching a batch's rows pays off once the columns outgrow the caches; below this many
# bytes they mostly hit, and the prefetch loop only costs (about 15 ns per row measured).
_PREFETCH_ABOVE = 2 << 20
_NO_PREFETCH = np.zeros((0, 2), np.int64)
_GROUPS: dict[str, tuple[tuple[str, ...], np.dtype[Any]]] = {  # allocated together, a row each
    "i64": (("env_ids", "ids", "steps"), np.dtype(np.int64)),
    "f32": (("reward", "discount", "weights"), np.dtype(np.float32)),
    "bool": (("terminated", "truncated"), np.dtype(np.bool_)),
}


def _new_batch(data: dict[str, Array]) -> Batch:
    """``Batch(data)`` without copying ``data`` (a dict made for it)."""
    batch = object.__new__(Batch)
    object.__setattr__(batch, "_data", data)
    return batch


class FastSampler:
    """A buffer's one-kernel uniform sampler (see the module docstring).

    ``eligible`` is false for layouts the kernel does not take (a reward that is not a
    float32 scalar, columns that are not C-contiguous); such a buffer keeps the general path.
    """

    def __init__(
        self,
        cols: Columns,
        index: EpisodeIndex,
        *,
        frame_stack: int,
        zero_pad: bool,
        next_fields: tuple[str, ...],
        n_step: int,
        gamma: float,
    ) -> None:
        self.cols, self.index = cols, index
        self.derived = len(cols.derived)
        steps = {name: np.asarray(col) for name, col in cols.steps.items()}
        derived = {name: np.asarray(col) for name, col in cols.derived.items()}
        rew = steps["reward"]
        self.eligible = (
            rew.ndim == 1 and rew.dtype == np.float32
            and all(c.flags.c_contiguous for c in (*steps.values(), *derived.values()))
            and all(c.flags.c_contiguous for c in cols.finals.values())
        )  # fmt: skip
        powers = np.zeros((2, n_step + 1), np.float32)
        _fill_powers(float(gamma), powers)
        # The batch's arrays in the general path's order: (key, role, column, shape after
        # B, dtype); roles: plain, cur/nxt (observations, or the stacked obs), derived,
        # next (next_fields), and the scalar outputs.
        layout: list[tuple[str, str, str, tuple[int, ...], np.dtype[Any]]] = []
        nexts: list[tuple[str, str, str, tuple[int, ...], np.dtype[Any]]] = []
        for name, col in cols.steps.items():
            if name in ("reward", "terminated", "truncated"):
                continue
            tail = col.shape[1:]
            if name not in cols.finals:
                layout.append((name, "plain", name, tail, col.dtype))
                continue
            if name == "obs" and frame_stack > 1:
                tail = (frame_stack, *tail)
            layout.append((name, "cur", name, tail, col.dtype))
            nexts.append(("next_" + name, "nxt", name, tail, col.dtype))
        for name, col in cols.derived.items():
            layout.append((name, "derived", name, col.shape[1:], col.dtype))
        for name in next_fields:
            col = cols.steps[name]
            nexts.append(("next_" + name, "next", name, col.shape[1:], col.dtype))
        scalar = {key: dt for keys, dt in _GROUPS.values() for key in keys}
        layout.append(("reward", "scalar", "", (), scalar["reward"]))
        layout += nexts
        for key in ("terminated", "truncated", "discount", "steps", "ids", "env_ids", "weights"):
            layout.append((key, "scalar", "", (), scalar[key]))
        self.layout = layout
        self.keys = tuple(e[0] for e in layout)
        self._last_out: Any = None  # the last out= batch checked, and its arrays
        self._last_arrays: list[Array] = []
        self._scratch = [np.empty((3, 256), np.int64)]  # per row: slot, next slot, final
        self.run = self._generate(steps, derived, powers, n_step, frame_stack, zero_pad)

    def _generate(
        self, steps: dict[str, Array], derived: dict[str, Array], powers: Array, n: int,
        k: int, zero_pad: bool,
    ) -> Any:  # fmt: skip
        """``run(rng, B, arrays) -> dict | None``: one sample, in straight-line code."""
        index, cols = self.index, self.cols
        consts: dict[str, Any] = {
            "index": index, "cols": cols, "kernel": _sample_kernel, "empty": np.empty,
            "asarray": np.asarray, "nd": np.ndarray, "scratch": self._scratch,
            "i64": np.int64, "cum": np.zeros(index.num_envs, np.int64),
            "warm": cols.prefetch_table if cols.nbytes > _PREFETCH_ABOVE else _NO_PREFETCH,
            "rew": steps["reward"], "te": steps["terminated"],
            "tr": steps["truncated"], "powers": powers, "PLAIN0": _PLAIN0, "QUAD0": _QUAD0,
        }  # fmt: skip
        var = {key: f"a{j}" for j, (key, *_) in enumerate(self.layout)}
        lines = ["def run(rng, B, arrays):", "    env = index.env  # settles deferred steps"]
        if index.num_envs == 1:
            lines += ["    if env[0, 4] <= env[0, 3]:  # HI <= LO", "        return None"]
        else:
            lines += ["    if not (env[:, 4] > env[:, 3]).any():", "        return None"]
        lines += ["    u = rng.random(B)", "    if arrays is None:"]
        for group, (keys, dt) in _GROUPS.items():
            consts[f"dt_{group}"] = dt
            lines.append(f"        g = empty(({len(keys)}, B), dt_{group})")
            lines += [f"        {var[key]} = g[{r}]" for r, key in enumerate(keys)]
        plain: list[str] = []
        pairs: list[str] = []
        stacked: list[str] = []
        nxt: list[str] = []
        for j, (_, role, name, tail, dt) in enumerate(self.layout):
            consts[f"s{j}"], consts[f"d{j}"] = tail, dt
            if role in ("plain", "derived", "next"):
                lines.append(f"        a{j} = empty((B, *s{j}), d{j})")
                consts[f"c{j}"] = (derived if role == "derived" else steps)[name]
                (nxt if role == "next" else plain).append(f"(c{j}, a{j})")
            elif role == "cur":
                other = var["next_" + name]
                lines.append(f"        p = empty((2, B, *s{j}), d{j})")
                lines.append(f"        a{j} = p[0]")
                lines.append(f"        {other} = p[1]")
                consts[f"c{j}"], consts[f"n{j}"] = steps[name], name
                fin = f"cols.finals[n{j}]"
                fin = fin if type(cols.finals[name]) is np.ndarray else f"asarray({fin})"
                (stacked if k > 1 and name == "obs" else pairs).append(
                    f"(c{j}, {fin}, a{j}, {other})"
                )
        lines.append("    else:")
        lines.append(f"        {', '.join(var[key] for key in self.keys)}, = arrays")

        def tup(items: list[str], empty_one: str) -> str:
            return f"({', '.join(items)},)" if items else f"({empty_one},)"

        lines += [
            "    s = scratch[0]",
            "    if s.shape[1] < B:",
            "        s = scratch[0] = empty((3, B), i64)",
            "    done = kernel(",
            "        u, env, cum, s, index.slot_meta, warm, rew, te, tr,",
            f"        {index.env_capacity}, index.finals_capacity, {n}, powers, {k}, {zero_pad},",
            f"        {tup(plain, 'PLAIN0')}, {tup(pairs, 'QUAD0')},",
            f"        {tup(stacked, 'QUAD0')}, {tup(nxt, 'PLAIN0')},",
            "        " + ", ".join(var[key] for key in (
                "env_ids", "ids", "steps", "reward", "discount", "weights", "terminated",
                "truncated")) + ",",
            "    )",
            "    if done <= 0:",
            "        return done",
            "    return {" + ", ".join(f"{key!r}: {var[key]}" for key in self.keys) + "}",
        ]  # fmt: skip
        return define(lines, "run", consts, "<rlreplay sample>")

    def valid_for(self, cols: Columns, index: EpisodeIndex) -> bool:
        """Whether this plan still describes the buffer's storage."""
        return cols is self.cols and index is self.index and len(cols.derived) == self.derived

    def arrays_of(self, out: Any, batch_size: int) -> list[Array]:
        """The arrays of an ``out=`` batch (in :attr:`keys` order), checked the first time."""
        if out is self._last_out and self._last_arrays[0].shape[0] == batch_size:
            return self._last_arrays
        if not isinstance(out, Mapping) or set(out) != set(self.keys):
            got = sorted(out) if isinstance(out, Mapping) else type(out).__name__
            raise ValueError(
                f"sample(out=...): expected a batch with keys {sorted(self.keys)}, got {got}"
            )
        arrays = []
        for key, _, _, tail, dt in self.layout:
            a = out[key]
            shape = (batch_size, *tail)
            if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape:
                what = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a)
                raise ValueError(
                    f"sample(out=...): {key} must be a {dt}{list(shape)} ndarray, got {what}"
                )
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise ValueError(f"sample(out=...): {key} must be C-contiguous and writable")
            arrays.append(a)
        cols = self.cols
        stored = [*cols.steps.values(), *cols.finals.values(), *cols.derived.values()]
        for j, a in enumerate(arrays):
            if any(np.may_share_memory(a, other) for other in arrays[j + 1 :] + stored):
                raise ValueError(
                    f"sample(out=...): {self.keys[j]} shares memory with another output or "
                    "with the buffer's storage"
                )
        self._last_out, self._last_arrays = out, arrays
        return arrays


def sample_batch(buf: Any, batch_size: int, opts: Any, out: Any, uniform_type: type) -> Batch:
    """:meth:`ReplayBuffer.sample`'s draw and assembly, under the buffer's lock.

    One :class:`FastSampler` call for a uniform draw with replacement and no recency mix,
    from a buffer whose class draws and assembles as ``uniform_type`` does; the general path
    (``buf._draw`` then ``buf._batch``, copied into ``out`` if given) otherwise, and when
    nothing is sampleable (it raises the error).
    """
    fast = buf.__dict__.get("_fast_sampler")
    if fast is None or not fast.valid_for(buf._cols, buf._index):
        fast = FastSampler(
            buf._cols, buf._index, frame_stack=buf.frame_stack,
            zero_pad=buf.stack_pad == "zero", next_fields=buf.next_fields, n_step=buf.n_step,
            gamma=buf.gamma,
        )  # fmt: skip
        cls: Any = type(buf)
        base: Any = uniform_type
        fast.eligible &= cls._draw is base._draw and cls._batch is base._batch
        buf.__dict__["_fast_sampler"] = fast
    arrays = None if out is None else fast.arrays_of(out, batch_size)
    if fast.eligible and opts.recent_ratio == 0 and opts.replacement:
        try:
            data = fast.run(buf._rng, batch_size, arrays)
        except numba.core.errors.TypingError:
            if arrays is None:
                raise
            data = -1  # an out= array changed its number of dimensions since it was checked
        if type(data) is dict:
            return out if isinstance(out, Batch) else _new_batch(data)
        if data is not None and data < 0:
            raise ValueError("sample(out=...): an output's shape changed since it was checked")
    env_ids, t, extra = buf._draw(batch_size, opts)
    batch: Batch = buf._batch(env_ids, t, extra)
    if arrays is None:
        return batch
    if set(batch) != set(fast.keys):
        raise ValueError(f"sample(out=...): this buffer's batches hold {sorted(batch)}")
    for key, a in zip(fast.keys, arrays, strict=True):
        a[...] = batch[key]
    return out if isinstance(out, Batch) else _new_batch(dict(zip(fast.keys, arrays, strict=True)))
