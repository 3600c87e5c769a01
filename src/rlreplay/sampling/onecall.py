"""Uniform ``sample(B)`` in one Numba call: the small-buffer path of :meth:`ReplayBuffer.sample`.

At 10^3-10^5 stored transitions a batch's memory work is a few microseconds; what a call
costs there is fixed overhead: argument handling, the arrays of the batch, and one dispatch
per kernel or NumPy operation. Here a uniform draw with replacement costs

* one ``rng.random(B)`` (the buffer's generator, so the stream and the batch are exactly the
  general path's: :func:`rlreplay.sampling.uniform.draw_uniform` draws the same way);
* one :func:`_sample_kernel` call: positions to ``(env, t)`` (its binary search is
  ``searchsorted(cum, pos, "right")``), the n-step windows (:func:`rlreplay.assemble.transitions.
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

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from rlreplay.assemble.powers import reward_powers
from rlreplay.batch import Batch
from rlreplay.codegen import define
from rlreplay.episodes.index import EpisodeIndex
from rlreplay.errors import ConfigError
from rlreplay.sampling.batch_kernels import _prio_kernel, _sample_kernel
from rlreplay.storage.columns import Columns

__all__ = ["FastSampler", "sample_batch"]

Array = np.ndarray[Any, Any]

_log = logging.getLogger("rlreplay")
_announced = False  # the background compile is announced once per process
# Samples a plan takes through the general path before its kernel (not in Numba's cache yet)
# starts compiling in a background thread. Numba compiles under one process-wide lock, so a
# compile started at the first sample would hold up every other first-time compile of the
# caller's first steps (the general path's own small kernels, a checkpoint's): a quick
# script then waits for the whole kernel. By the time a loop has sampled this often, those
# are compiled.
_GENERAL_FIRST = 16
_compiling: set[threading.Thread] = set()  # background compiles running now


def _join_compiles() -> None:
    """Before a fork: let background compiles finish, so that no child inherits Numba's
    compiler lock held by a thread that does not exist in it (its first compile would hang)."""
    for thread in list(_compiling):
        thread.join()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_join_compiles)

_PLAIN0 = (np.zeros((1, 1), np.uint8), np.zeros((0, 1), np.uint8))
_QUAD0 = (*_PLAIN0, np.zeros((0, 1), np.uint8), np.zeros((0, 1), np.uint8))
# Prefetching a batch's rows pays off once the columns outgrow the caches; below this many
# bytes they mostly hit, and the prefetch loop only costs (about 15 ns per row measured).
_PREFETCH_ABOVE = 2 << 20
# The kernel prefetches every row of the batch before it reads any: a batch of more than
# _SMALL_BATCH rows then evicts its own early lines from L2 before they are read, which costs
# more than it saves while the columns still fit the last-level cache (measured on a 16 MB
# L3: sample(4096) at 10^5 stored 224 -> 165 us without prefetch, at 10^6 stored 540 -> 367
# us with it). Large batches prefetch only from columns above _LARGE_PREFETCH_ABOVE: half
# that L3, which other processes share.
_SMALL_BATCH = 1024
_LARGE_PREFETCH_ABOVE = 8 << 20
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
    float32 or float64 scalar, columns that are not C-contiguous); such a buffer keeps the
    general path.
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
        prioritized: bool = False,
    ) -> None:
        self.cols, self.index = cols, index
        self.prioritized = prioritized
        self.derived = len(cols.derived)
        steps = {name: np.asarray(col) for name, col in cols.steps.items()}
        derived = {name: np.asarray(col) for name, col in cols.derived.items()}
        rew = steps["reward"]
        self.eligible = (
            rew.ndim == 1 and rew.dtype in (np.float32, np.float64)
            and all(c.flags.c_contiguous for c in (*steps.values(), *derived.values()))
            and all(c.flags.c_contiguous for c in cols.finals.values())
        )  # fmt: skip
        powers = reward_powers(gamma, n_step, rew.dtype)
        # the batch's reward has the general path's dtype: a float32 reward shares the
        # float32 allocation, a float64 one gets its own
        self.groups = dict(_GROUPS)
        if rew.dtype == np.float64:
            self.groups["f32"] = (("discount", "weights"), np.dtype(np.float32))
            self.groups["f64"] = (("reward",), np.dtype(np.float64))
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
        scalar = {key: dt for keys, dt in self.groups.values() for key in keys}
        layout.append(("reward", "scalar", "", (), scalar["reward"]))
        layout += nexts
        for key in ("terminated", "truncated", "discount", "steps", "ids", "env_ids", "weights"):
            layout.append((key, "scalar", "", (), scalar[key]))
        if prioritized:  # the general path's extra keys: weights (above), probabilities
            layout.append(("probabilities", "prob", "", (), np.dtype(np.float64)))
        self.layout = layout
        self.keys = tuple(e[0] for e in layout)
        self._last_out: Any = None  # the last out= batch checked, and its arrays
        self._last_arrays: list[Array] = []
        self._scratch = [np.empty((3, 256), np.int64)]  # per row: slot, next slot, final
        self._masses = [np.empty(256, np.float64)]  # prioritized: each draw's mass
        self._capture = _Capture()
        self.run, self._types_of = self._generate(
            steps, derived, powers, n_step, frame_stack, zero_pad
        )
        #: Whether the kernel is compiled for the argument types of this plan's calls; until
        #: then :func:`sample_batch` takes the general path (same batches) while a thread
        #: compiles it (see :meth:`kernel_ready`).
        self.ready = False
        self._sig: tuple[Any, ...] | None = None
        self._general_calls = 0
        self._warming: threading.Thread | None = None

    def _generate(
        self, steps: dict[str, Array], derived: dict[str, Array], powers: Array, n: int,
        k: int, zero_pad: bool,
    ) -> tuple[Any, Any]:  # fmt: skip
        """``run(rng, B, arrays[, prio]) -> dict | None``: one sample, in straight-line code;
        and its twin that calls :class:`_Capture` instead of the kernel (the arguments a call
        would pass, from which the kernel's signature is typed without running it).

        Prioritized: ``prio`` is ``(sums, levels, min_mass, beta, stratified)`` of a sum tree
        whose total is ``> 0`` (the caller checks it).
        """
        index, cols = self.index, self.cols
        consts: dict[str, Any] = {
            "index": index, "cols": cols, "kernel": _sample_kernel, "empty": np.empty,
            "asarray": np.asarray, "nd": np.ndarray, "scratch": self._scratch,
            "i64": np.int64, "cum": np.zeros(index.num_envs, np.int64),
            "f64": np.float64, "masses": self._masses, "pkernel": _prio_kernel,
            "warm": cols.prefetch_table if cols.nbytes > _PREFETCH_ABOVE else _NO_PREFETCH,
            "warm_large": (
                cols.prefetch_table if cols.nbytes > _LARGE_PREFETCH_ABOVE else _NO_PREFETCH
            ),
            "rew": steps["reward"], "te": steps["terminated"],
            "tr": steps["truncated"], "powers": powers, "PLAIN0": _PLAIN0, "QUAD0": _QUAD0,
        }  # fmt: skip
        var = {key: f"a{j}" for j, (key, *_) in enumerate(self.layout)}
        prio = self.prioritized
        lines = [
            f"def run(rng, B, arrays{', prio' if prio else ''}):",
            "    env = index.env  # settles deferred steps",
        ]
        if prio:  # the caller checked that the sum tree's total is > 0
            pass
        elif index.num_envs == 1:
            lines += ["    if env[0, 4] <= env[0, 3]:  # HI <= LO", "        return None"]
        else:
            lines += ["    if not (env[:, 4] > env[:, 3]).any():", "        return None"]
        lines += ["    u = rng.random(B)", "    if arrays is None:"]
        for group, (keys, dt) in self.groups.items():
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
            elif role == "prob":
                lines.append(f"        a{j} = empty(B, f64)")
        lines.append("    else:")
        lines.append(f"        {', '.join(var[key] for key in self.keys)}, = arrays")

        def tup(items: list[str], empty_one: str) -> str:
            return f"({', '.join(items)},)" if items else f"({empty_one},)"

        head = ["    done = kernel(", "        u, env, cum, s, index.slot_meta, w, rew, te, tr,"]
        if prio:  # the draw's masses get scratch too; the tree's arrays come in ``prio``
            head = [
                "    m = masses[0]",
                "    if m.shape[0] < B:",
                "        m = masses[0] = empty(B, f64)",
                "    done = pkernel(",
                "        u, env, *prio, m, s, index.slot_meta, w, rew, te, tr,",
            ]
        lines += [
            f"    w = warm if B <= {_SMALL_BATCH} else warm_large",
            "    s = scratch[0]",
            "    if s.shape[1] < B:",
            "        s = scratch[0] = empty((3, B), i64)",
            *head,
            f"        {index.env_capacity}, index.finals_capacity, {n}, powers, {k}, {zero_pad},",
            f"        {tup(plain, 'PLAIN0')}, {tup(pairs, 'QUAD0')},",
            f"        {tup(stacked, 'QUAD0')}, {tup(nxt, 'PLAIN0')},",
            "        " + ", ".join(var[key] for key in (
                "env_ids", "ids", "steps", "reward", "discount", "weights", "terminated",
                "truncated")) + ",",
            f"        {var['probabilities']}," if prio else "",
            "    )",
            "    if done <= 0:",
            "        return done",
            "    return {" + ", ".join(f"{key!r}: {var[key]}" for key in self.keys) + "}",
        ]  # fmt: skip
        capture = dict(consts, kernel=self._capture, pkernel=self._capture)
        return (
            define(lines, "run", consts, "<rlreplay sample>"),
            define(lines, "run", capture, "<rlreplay sample types>"),
        )

    def kernel_ready(self, batch_size: int, arrays: Any, prio: Any = None) -> bool:
        """Whether :attr:`run` may be called now without compiling the kernel.

        The first time, the kernel's signature for this plan's calls is typed from the
        arguments a call would pass (no draw from the buffer's generator, nothing written).
        A kernel already compiled in this process, or in Numba's on-disk cache (a load of a
        few milliseconds), is ready at once. Otherwise the caller takes the general path,
        which gives the same batches from the same draws, and after :data:`_GENERAL_FIRST`
        such samples a daemon thread compiles the kernel (announced once on the ``rlreplay``
        logger); the plan switches to it when it is done. ``RLREPLAY_BACKGROUND_COMPILE=0``
        in the environment compiles it in the first call instead.
        """
        if self.ready:
            return True
        if os.environ.get("RLREPLAY_BACKGROUND_COMPILE", "1") == "0":
            self.ready = True  # compiled by the first call, in the caller's thread
            return True
        dispatcher = _prio_kernel if self.prioritized else _sample_kernel
        if self._sig is None:
            self._types_of(np.random.default_rng(0), batch_size, arrays,
                           *(() if prio is None else (prio,)))  # fmt: skip
            typeof: Any = numba.typeof
            self._sig = tuple(typeof(a) for a in self._capture.take())
            if self._sig in dispatcher.overloads or _in_disk_cache(dispatcher, self._sig):
                dispatcher.compile(self._sig)  # a load (or nothing at all)
                self.ready = True
                return True
        if self._warming is None:
            self._general_calls += 1
            if self._general_calls >= _GENERAL_FIRST:
                _announce()
                self._warming = threading.Thread(
                    target=_compile, args=(dispatcher, self._sig, self),
                    name="rlreplay-compile", daemon=True,
                )  # fmt: skip
                _compiling.add(self._warming)
                self._warming.start()
        return self.ready

    def valid_for(self, cols: Columns, index: EpisodeIndex) -> bool:
        """Whether this plan still describes the buffer's storage."""
        return cols is self.cols and index is self.index and len(cols.derived) == self.derived

    def arrays_of(self, out: Any, batch_size: int) -> list[Array]:
        """The arrays of an ``out=`` batch (in :attr:`keys` order), checked the first time."""
        if out is self._last_out and self._last_arrays[0].shape[0] == batch_size:
            return self._last_arrays
        if not isinstance(out, Mapping) or set(out) != set(self.keys):
            got = sorted(map(str, out)) if isinstance(out, Mapping) else type(out).__name__
            raise ConfigError(
                f"sample(out=...): expected a batch with keys {sorted(self.keys)}, got {got}"
            )
        arrays = []
        for key, _, _, tail, dt in self.layout:
            a = out[key]
            shape = (batch_size, *tail)
            if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape:
                what = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a)
                raise ConfigError(
                    f"sample(out=...): {key} must be a {dt}{list(shape)} ndarray, got {what}"
                )
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise ConfigError(f"sample(out=...): {key} must be C-contiguous and writable")
            arrays.append(a)
        cols = self.cols
        stored = [*cols.steps.values(), *cols.finals.values(), *cols.derived.values()]
        for j, a in enumerate(arrays):
            if any(np.may_share_memory(a, other) for other in arrays[j + 1 :] + stored):
                raise ConfigError(
                    f"sample(out=...): {self.keys[j]} shares memory with another output or "
                    "with the buffer's storage"
                )
        self._last_out, self._last_arrays = out, arrays
        return arrays


def sample_batch(draws: Any, batch_size: int, opts: Any, out: Any, uniform_type: type) -> Batch:
    """:meth:`ReplayBuffer.sample`'s draw and assembly, under the buffer's lock (``draws``: the
    buffer's :class:`rlreplay.buffer.sampling.Draws` part).

    One :class:`FastSampler` call when the buffer's sampler names a kernel (its ``kernel``:
    ``"uniform"`` for a uniform draw with replacement and no recency mix, ``"prioritized"``
    when its ``fast_draw_args`` gives a tree to draw from) and the buffer assembles as
    ``uniform_type`` does (its ``batch``); the general path (``sampler.draw`` then
    ``draws.batch``, copied into ``out`` if given) otherwise, and when nothing is sampleable
    (it raises the error).
    """
    kernel = draws.sampler.kernel
    if kernel == "prioritized":
        return _sample_prioritized(draws, batch_size, opts, out, uniform_type)
    fast = draws.fast_uniform
    if fast is None or not fast.valid_for(draws.cols, draws.index):
        fast = _plan(draws, uniform_type, prioritized=False)
        fast.eligible &= kernel == "uniform"
        draws.fast_uniform = fast
    arrays = None if out is None else fast.arrays_of(out, batch_size)
    index = draws.index
    if (
        fast.eligible
        and opts.recent_ratio == 0
        and opts.replacement
        and index.fast_draws_ok(batch_size)
        and (fast.ready or fast.kernel_ready(batch_size, arrays))
    ):
        # The kernel draws over [lo, hi), holes of abandoned episodes included: a batch that
        # hits one is drawn again (so each row is uniform over the sampleable steps), at most
        # 3 times before the general path (which maps draws past the holes).
        for _ in range(3):
            try:
                data = fast.run(draws.rng, batch_size, arrays)
            except numba.core.errors.TypingError:
                if arrays is None:
                    raise
                data = -1  # an out= array changed its number of dimensions since it was checked
            if type(data) is dict:
                if index.ids_in_hole(data["ids"]):
                    continue
                return out if isinstance(out, Batch) else _new_batch(data)
            if data is not None and data < 0:
                raise ConfigError("sample(out=...): an output's shape changed since it was checked")
            break
    return _general(draws, batch_size, opts, out, arrays, fast)


def _plan(draws: Any, uniform_type: type, prioritized: bool) -> FastSampler:
    fast = FastSampler(
        draws.cols, draws.index, frame_stack=draws.frame_stack,
        zero_pad=draws.stack_pad == "zero", next_fields=draws.next_fields, n_step=draws.n_step,
        gamma=draws.gamma, prioritized=prioritized,
    )  # fmt: skip
    cls: Any = type(draws)
    fast.eligible &= cls.batch is uniform_type.batch  # type: ignore[attr-defined]
    return fast


def _sample_prioritized(
    draws: Any, batch_size: int, opts: Any, out: Any, uniform_type: type
) -> Batch:
    """The prioritized twin of :func:`sample_batch`: one :func:`_prio_kernel` call when the
    sampler's ``fast_draw_args`` gives a tree to draw from (``None``: the general path, which
    raises what it must), then its ``drawn()`` (the beta schedule's step)."""
    fast = draws.fast_prio
    if fast is None or not fast.valid_for(draws.cols, draws.index):
        fast = draws.fast_prio = _plan(draws, uniform_type, prioritized=True)
    arrays = None if out is None else fast.arrays_of(out, batch_size)
    if fast.eligible and opts.recent_ratio == 0 and opts.replacement:
        sampler = draws.sampler
        prio = sampler.fast_draw_args(draws.index)
        if prio is not None and (fast.ready or fast.kernel_ready(batch_size, arrays, prio)):
            try:
                data = fast.run(draws.rng, batch_size, arrays, prio)
            except numba.core.errors.TypingError:
                if arrays is None:
                    raise
                data = -1
            if type(data) is dict:
                sampler.drawn()
                return out if isinstance(out, Batch) else _new_batch(data)
            raise ConfigError("sample(out=...): an output's shape changed since it was checked")
    return _general(draws, batch_size, opts, out, arrays, fast)


def _general(
    draws: Any, batch_size: int, opts: Any, out: Any, arrays: Any, fast: FastSampler
) -> Batch:
    """The general path (``sampler.draw`` then ``draws.batch``), copied into ``out`` if given."""
    drawn = draws.sampler.draw(draws.index, batch_size, draws.rng, opts)
    batch: Batch = draws.batch(drawn.env_ids, drawn.t, drawn.extra())
    if arrays is None:
        return batch
    if set(batch) != set(fast.keys):
        raise ConfigError(f"sample(out=...): this buffer's batches hold {sorted(batch)}")
    for key, a in zip(fast.keys, arrays, strict=True):
        a[...] = batch[key]
    return out if isinstance(out, Batch) else _new_batch(dict(zip(fast.keys, arrays, strict=True)))


class _Capture:
    """Stands in for a kernel: keeps the arguments of the call and returns 0 (no batch)."""

    def __init__(self) -> None:
        self._args: tuple[Any, ...] = ()

    def __call__(self, *args: Any) -> int:
        self._args = args
        return 0

    def take(self) -> tuple[Any, ...]:
        args, self._args = self._args, ()
        return args


def _compile(dispatcher: Any, sig: tuple[Any, ...], fast: FastSampler) -> None:
    """Compile (or load from the cache) ``dispatcher`` for ``sig``, then mark ``fast`` ready.

    A failure is left to the first real call, which compiles again and raises where the
    caller sees it.
    """
    try:
        dispatcher.compile(sig)
    except Exception:  # raised again by the next call that dispatches
        pass
    finally:
        fast.ready = True
        _compiling.discard(threading.current_thread())


def _in_disk_cache(dispatcher: Any, sig: tuple[Any, ...]) -> bool:
    """Whether Numba's on-disk cache holds ``dispatcher`` compiled for ``sig`` (read through
    the dispatcher's cache object; any change of that internal reads as "no", and the kernel
    is then compiled in the background as for a cold cache)."""
    try:
        return dispatcher._cache.load_overload(sig, dispatcher.targetctx) is not None
    except Exception:  # an internal API of Numba: a miss, never an error
        return False


def _announce() -> None:
    global _announced
    if not _announced:
        _announced = True
        _log.info(
            "rlreplay: compiling the one-call sampling kernel for this buffer's fields in the "
            "background (first use; cached on disk afterwards); samples take the NumPy path, "
            "with the same results, until it is ready"
        )
