"""Compiled per-step writes for vector envs: one Numba call stores a lockstep step of every env.

A buffer with ``E > 1`` envs that is fed one step of every env per ``add`` (a vector env's
step) spends most of each call on Python-level work per value: a type, dtype and shape test,
then one strided slice assignment per column. :class:`LockstepKernel` does all of it in one
call of a compiled function:

* **dtype, layout:** the function is compiled for exactly the schema's arrays (each value a
  C-contiguous, writable array of its field's dtype with a leading env axis) and then closed to
  further compilation, so Numba's dispatcher, which types every argument anyway, rejects any
  other value with a ``TypeError`` before the function runs;
* **shapes:** the function compares every value's shape with its field's (``(E, *shape)``);
* **episode ends:** it scans ``terminated`` and ``truncated``;
* **writes:** only when every check passed, it copies each value's ``E`` rows to their slots
  (``e * C + t % C``) and the ids ``t * E + e`` to :attr:`LockstepKernel.ids`
  (:data:`STORED`);
* **steps that end episodes** (a kernel pointed at the final records,
  :meth:`LockstepKernel.point_finals`): first the episode index's accounting, as the general
  store does it (the index's deferred plain steps, then this step), then the same writes and
  each ending env's final observation to its record (:data:`ENDED`).

It writes nothing otherwise, and says why (:data:`ENDING`: an end it does not store;
:data:`MISMATCH`): the writer then takes its Python paths, which store such steps and name
what is wrong with a value. So the kernel accepts a subset of what the Python fast path
accepts, and stores it the same way. The step columns and the index's tables never move (see
:class:`~rlreplay.storage.columns.Columns`), so the kernel addresses them through a table of
their addresses, which keeps the call's argument list (whose unboxing is most of a call's cost)
at the values alone. The final records do move when they grow or a checkpoint is loaded; the
index counts those reallocations, and a kernel whose addresses are older declines ends until
it is pointed at the records again.

Compiling costs about 5 s the first time a schema's signature is seen and about 0.3 to 0.5 s
per process afterwards (Numba's disk cache), so the writer compiles only for a buffer that has taken
the Python fast path :data:`ACTIVATE_AFTER` times. Measured (16 envs, ``float32[4]`` obs, 1M
slots): a plain step costs about 1.2 µs in ``add`` instead of about 3.9 µs on the Python fast
path; the compiled call itself is about 0.3 µs of dispatch and argument unboxing (compiled
without Numba's reference-counting runtime, see :func:`_compiled`) and 0.2 µs of checks and
row writes. A step that ends episodes costs about 3.7 µs instead of about 13.7 µs on the general
store.
"""

from __future__ import annotations
import __future__  # the annotations feature's flag, for compile() below

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numba
import numpy as np
from numba.core import types
from numba.core.extending import intrinsic, overload

from rlreplay.codegen import define
from rlreplay.episodes.index import (
    _NCOLS,
    COUNT,
    F_COUNT,
    F_HEAD,
    P_F,
    P_G,
    EpisodeIndex,
    _advance,
    _advance_plain,
)
from rlreplay.errors import ConfigError

__all__ = [
    "ACTIVATE_AFTER", "ENDED", "ENDING", "MISMATCH", "MAX_VALUES", "STORED", "LockstepKernel",
    "unsupported",
]  # fmt: skip

Array = np.ndarray[Any, Any]

#: Python fast-path calls of a buffer before it compiles its kernel (tests lower it).
ACTIVATE_AFTER = 256
#: Most values (fields plus ``next_<obs>``) a kernel takes; longer schemas keep the Python path.
MAX_VALUES = 12
#: Most dimensions of a field's shape (after the env axis) the table describes.
MAX_DIMS = 4

# Kernel results. The checks' verdicts are ordered (the worst of the values wins); ENDED says
# that a step that ends episodes was stored with its final observations, index accounted for.
STORED, ENDING, MISMATCH, ENDED = 0, 1, 2, 3

# The table: a header, then one record of _W int64 per value. With _H_ENDS set, the kernel also
# stores steps that end episodes: it reaches the episode index's tables and the final records
# through the addresses in the header (finals as of generation _H_GEN, see point_finals).
# The kernel allocates nothing: it works in a scratch array (_H_SCRATCH) of _S_ROWS rows of E
# int64: the envs' done flags, _advance's (step, slot, final position) rows, 0..E-1 and the ids
# of the step stored (LockstepKernel.ids).
_H_E, _H_C, _H_ENDS, _H_ENV, _H_SLOTS, _H_PARAMS, _H_OWNER, _H_GEN, _H_SCRATCH = range(9)
_HEADER = 9
_S_DONE, _S_OUT, _S_POS, _S_ENVS, _S_IDS, _S_ROWS = 0, 1, 3, 4, 5, 6
_W = 8
_KIND, _ADDR, _PER, _SHAPE = 0, 1, 2, 3  # _SHAPE .. _SHAPE + MAX_DIMS - 1
# Value kinds: a step column, a step column that flags an episode end, a final observation.
_COLUMN, _FLAG, _FINAL = 0, 1, 2


def _pointer_at_typing(typingctx: Any, address: Any, like: Any) -> tuple[Any, Any]:
    """A pointer to ``like``'s dtype at ``address`` (an int64)."""
    sig = types.CPointer(like.dtype)(address, like)  # type: ignore[no-untyped-call]

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


_pointer_at: Any = intrinsic(_pointer_at_typing)
# ``carray(pointer, shape)`` as an intrinsic: an array over ``shape`` items at ``pointer``, no
# meminfo. (``numba.carray`` itself is a function returning an array, which Numba refuses in
# code compiled without its reference-counting runtime, as the kernel is: see _compiled.) The
# name is Numba's own, not public API (present from 0.59 to 0.68 at least): without it no kernel
# is built (unsupported() says why) and vector buffers keep the Python fast path.
try:
    from numba.np.arrayobj import get_cfarray_intrinsic

    _array_at: Any = get_cfarray_intrinsic("C", None)  # type: ignore[no-untyped-call]
except ImportError:  # pragma: no cover - depends on the Numba release
    _array_at = None


def _first_item(as_bytes: bool) -> Any:
    """An intrinsic: the pointer to the first item of (C-contiguous) ``array``; with
    ``as_bytes`` a ``uint8`` pointer (reads bool flags as 0 / 1 bytes)."""

    def typing(typingctx: Any, array: Any) -> tuple[Any, Any]:
        item = types.uint8 if as_bytes else array.dtype
        sig = types.CPointer(item)(array)  # type: ignore[no-untyped-call]

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            arr = context.make_array(signature.args[0])(context, builder, args[0])
            return builder.bitcast(arr.data, context.get_value_type(signature.return_type))

        return sig, codegen

    return intrinsic(typing)


_data_of: Any = _first_item(as_bytes=False)
_bytes_of: Any = _first_item(as_bytes=True)


@numba.njit(cache=True, inline="always")
def _copy_rows(dst: Any, src: Any, per: int, E: int, C: int, r: int) -> None:  # pragma: no cover
    """Row ``e`` of ``src`` (``per`` items each) to row ``e * C + r`` of ``dst``, every env."""
    if per == 1:
        for e in range(E):
            dst[e * C + r] = src[e]
    else:
        for e in range(E):
            o = (e * C + r) * per
            s = e * per
            for j in range(per):
                dst[o + j] = src[s + j]


@numba.njit(cache=True, inline="always")
def _check_value(table: Array, k: int, v: Any) -> int:  # pragma: no cover - compiled
    """MISMATCH if value ``k`` has the wrong shape, else ENDING if it flags an end, else 0."""
    b = _HEADER + k * _W
    E = table[_H_E]
    if v.shape[0] != E:
        return MISMATCH
    for d in range(1, v.ndim):
        if v.shape[d] != table[b + _SHAPE + d - 1]:
            return MISMATCH
    if table[b + _KIND] == _FLAG:
        p = _bytes_of(v)  # a bool flag per env: one byte each
        for e in range(E):
            if p[e] != 0:
                return ENDING
    return 0


@numba.njit(cache=True, inline="always")
def _store_value(table: Array, k: int, v: Any, r: int) -> None:  # pragma: no cover - compiled
    """Copy value ``k``'s rows to their slots (final observations are not stored here)."""
    b = _HEADER + k * _W
    if table[b + _KIND] != _FINAL:
        dst = _pointer_at(table[b + _ADDR], v)
        _copy_rows(dst, _data_of(v), table[b + _PER], table[_H_E], table[_H_C], r)


@numba.njit(cache=True, inline="always")
def _mark_ends(table: Array, k: int, v: Any, scratch: Any) -> None:  # pragma: no cover
    """Set env ``e``'s done flag in ``scratch`` (a pointer to the scratch array) where value
    ``k`` flags an episode end of env ``e`` (flag values only)."""
    if table[_HEADER + k * _W + _KIND] == _FLAG:
        E = table[_H_E]
        p = _bytes_of(v)
        for e in range(E):
            if p[e] != 0:
                scratch[_S_DONE * E + e] = 1


@numba.njit(cache=True, inline="always")
def _store_final(table: Array, k: int, v: Any, scratch: Any) -> None:  # pragma: no cover
    """Copy row ``e`` of value ``k`` (a final observation) to its record in its finals column,
    for every env ``e`` whose step ends its episode (``scratch``: a pointer to the scratch
    array, which holds the done flags and the records' positions)."""
    b = _HEADER + k * _W
    if table[b + _KIND] == _FINAL:
        E = table[_H_E]
        dst = _pointer_at(table[b + _ADDR], v)
        src = _data_of(v)
        per = table[b + _PER]
        for e in range(E):
            if scratch[_S_DONE * E + e]:
                o = scratch[_S_POS * E + e] * per
                s = e * per
                for j in range(per):
                    dst[o + j] = src[s + j]


@numba.njit(cache=True)
def _account_ending_step(table: Array, t: int) -> bool:  # pragma: no cover - compiled
    """The episode index's accounting of lockstep step ``t`` of every env, some ending.

    First the index's deferred plain steps (``t`` minus the envs' counter of them, as
    :meth:`EpisodeIndex.settle`), then the step (as :meth:`EpisodeIndex.advance`), which leaves
    each row's final-record position in ``out[2]``. Returns ``False``, having changed nothing,
    when the general store must take the step: the final records moved since the kernel was
    pointed at them, some env has no free final record, or the envs are not in lockstep.
    """
    E, C = table[_H_E], table[_H_C]
    scratch = _array_at(_pointer_at(table[_H_SCRATCH], table), (_S_ROWS, E))
    done, out = scratch[_S_DONE], scratch[_S_OUT : _S_OUT + 3]
    params = _array_at(_pointer_at(table[_H_PARAMS], table), (P_G + 1,))
    if params[P_G] != table[_H_GEN]:
        return False
    F = params[P_F]
    env = _array_at(_pointer_at(table[_H_ENV], table), (E, _NCOLS))
    n = t - env[0, COUNT]
    if n < 0:
        return False
    for e in range(E):
        # Room for one more record (before the deferred steps free dead ones: conservative).
        if env[e, COUNT] != env[0, COUNT] or (done[e] and env[e, F_COUNT] - env[e, F_HEAD] >= F):
            return False
    slot_meta = _array_at(_pointer_at(table[_H_SLOTS], table), (E * C, 3))
    owner = _array_at(_pointer_at(table[_H_OWNER], table), (E * F,))
    if n > 0:
        _advance_plain(env, slot_meta, owner, params, n)
    _advance(env, slot_meta, owner, scratch[_S_ENVS], done, params, out)
    return True


def _lockstep_step(table: Array, t: int, values: Any) -> int:
    """Check and store step ``t`` of every env (see the module docstring).

    Compiled per tuple of value types by :func:`_lockstep_step_impl`, with one explicit check
    and one explicit store per value (``literal_unroll`` costs about 0.25 µs more per call).
    """
    raise NotImplementedError("called from compiled code only")  # pragma: no cover


@overload(_lockstep_step)
def _lockstep_step_impl(table: Any, t: Any, values: Any) -> Any:
    n = len(values)
    # The same parameters as this function, annotations included (Numba compares them).
    lines = ["def impl(table: Any, t: Any, values: Any):", "    verdict = 0"]
    lines += [f"    verdict = max(verdict, check(table, {k}, values[{k}]))" for k in range(n)]
    lines += [
        "    if verdict:",
        f"        if verdict != {ENDING} or table[{_H_ENDS}] == 0:",
        "            return verdict  # MISMATCH outranks ENDING",
        f"        scratch = pointer_at(table[{_H_SCRATCH}], table)",
        f"        for e in range(table[{_H_E}]):  # row {_S_DONE}: the done flags",
        f"            scratch[{_S_DONE} * table[{_H_E}] + e] = 0",
    ]
    lines += [f"        mark(table, {k}, values[{k}], scratch)" for k in range(n)]
    lines += [
        "        if not account(table, t):",
        f"            return {ENDING}",
    ]
    lines += [f"        store_final(table, {k}, values[{k}], scratch)" for k in range(n)]
    lines += [f"    r = t % table[{_H_C}]"]
    lines += [f"    store(table, {k}, values[{k}], r)" for k in range(n)]
    lines += [
        f"    E = table[{_H_E}]",
        f"    scratch = pointer_at(table[{_H_SCRATCH}], table)",
        "    for e in range(E):",
        f"        scratch[{_S_IDS} * E + e] = t * E + e",
    ]
    lines += [f"    return {ENDED} if verdict else {STORED}"]
    scope: dict[str, Any] = {
        "check": _check_value, "store": _store_value, "max": max, "mark": _mark_ends,
        "account": _account_ending_step, "store_final": _store_final,
        "pointer_at": _pointer_at,
    }  # fmt: skip
    flags = __future__.annotations.compiler_flag  # string annotations, as in this module
    return define(lines, "impl", scope, "<rlreplay lockstep>", flags)


# One entry point per number of values: Numba's dispatcher types separate arguments in C, but a
# ``*values`` tuple in Python (about twice the cost per call).
def _step1(table: Array, t: int, a: Array) -> int:
    return _lockstep_step(table, t, (a,))


def _step2(table: Array, t: int, a: Array, b: Array) -> int:
    return _lockstep_step(table, t, (a, b))


def _step3(table: Array, t: int, a: Array, b: Array, c: Array) -> int:
    return _lockstep_step(table, t, (a, b, c))


def _step4(table: Array, t: int, a: Array, b: Array, c: Array, d: Array) -> int:
    return _lockstep_step(table, t, (a, b, c, d))


def _step5(table: Array, t: int, a: Array, b: Array, c: Array, d: Array, e: Array) -> int:
    return _lockstep_step(table, t, (a, b, c, d, e))


def _step6(table: Array, t: int, a: Array, b: Array, c: Array, d: Array, e: Array, f: Array) -> int:
    return _lockstep_step(table, t, (a, b, c, d, e, f))


def _step7(
    table: Array, t: int,
    a: Array, b: Array, c: Array, d: Array, e: Array, f: Array, g: Array,
) -> int:  # fmt: skip
    return _lockstep_step(table, t, (a, b, c, d, e, f, g))


def _step8(
    table: Array, t: int,
    a: Array, b: Array, c: Array, d: Array, e: Array, f: Array, g: Array, h: Array,
) -> int:  # fmt: skip
    return _lockstep_step(table, t, (a, b, c, d, e, f, g, h))


def _step9(
    table: Array, t: int,
    a: Array, b: Array, c: Array, d: Array, e: Array, f: Array, g: Array, h: Array, i: Array,
) -> int:  # fmt: skip
    return _lockstep_step(table, t, (a, b, c, d, e, f, g, h, i))


def _step10(
    table: Array, t: int,
    a: Array, b: Array, c: Array, d: Array, e: Array, f: Array, g: Array, h: Array, i: Array,
    j: Array,
) -> int:  # fmt: skip
    return _lockstep_step(table, t, (a, b, c, d, e, f, g, h, i, j))


def _step11(
    table: Array, t: int,
    a: Array, b: Array, c: Array, d: Array, e: Array, f: Array, g: Array, h: Array, i: Array,
    j: Array, k: Array,
) -> int:  # fmt: skip
    return _lockstep_step(table, t, (a, b, c, d, e, f, g, h, i, j, k))


def _step12(
    table: Array, t: int,
    a: Array, b: Array, c: Array, d: Array, e: Array, f: Array, g: Array, h: Array, i: Array,
    j: Array, k: Array, m: Array,
) -> int:  # fmt: skip
    return _lockstep_step(table, t, (a, b, c, d, e, f, g, h, i, j, k, m))


_ENTRIES: tuple[Callable[..., int], ...] = (
    _step1, _step2, _step3, _step4, _step5, _step6,
    _step7, _step8, _step9, _step10, _step11, _step12,
)  # fmt: skip
assert len(_ENTRIES) == MAX_VALUES

# Compiled entry points by (number of values, value types): shared by buffers of one schema.
_COMPILED: dict[tuple[Any, ...], Any] = {}


def _compiled(examples: Sequence[Array]) -> Any:
    """The entry point for values like ``examples``, compiled for exactly their types."""
    arg_types = tuple(numba.typeof(x) for x in examples)  # type: ignore[no-untyped-call]
    key = (len(examples), arg_types)
    fn = _COMPILED.get(key)
    if fn is None:
        # Without Numba's reference-counting runtime (NRT): the wrapper then unboxes each array
        # into a plain struct instead of allocating a meminfo for it and freeing it on return,
        # and the body takes and drops no references. A 9-argument call costs about 0.4 µs
        # instead of about 1.0 µs. The kernel allocates nothing and returns an int, so it needs
        # no runtime (a function that allocated an array would not compile).
        options: dict[str, Any] = {"cache": True, "_nrt": False}  # _nrt: not in the stubs
        fn = numba.njit(**options)(_ENTRIES[len(examples) - 1])
        # Compile by calling with a table of zero envs: every shape check fails, nothing is
        # written. Then close the dispatcher: other types raise TypeError, never compile.
        probe = np.zeros(_HEADER + _W * len(examples), np.int64)
        fn(probe, 0, *examples)
        fn.disable_compile()
        _COMPILED[key] = fn
    return fn


def unsupported(
    names: Sequence[str],
    fields: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
    columns: dict[str, Array | None],
) -> str | None:
    """Why a kernel cannot take these values (too many, too many dimensions, a column that is
    not a C-contiguous array of its field's dtype), or ``None`` if it can (see
    :class:`LockstepKernel` for the arguments)."""
    if _array_at is None:
        return f"numba {numba.__version__}: no numba.np.arrayobj.get_cfarray_intrinsic"
    if not 0 < len(names) <= MAX_VALUES:
        return f"names: expected 1 to {MAX_VALUES} values, got {len(names)}"
    for name in names:
        dtype, shape = fields[name]
        if len(shape) > MAX_DIMS:
            return f"{name}: at most {MAX_DIMS} dimensions, got shape {shape}"
        col = columns[name]
        if col is not None and (not col.flags.c_contiguous or col.dtype != dtype):
            return f"{name}: the column is not a C-contiguous {dtype} array"
    return None


class LockstepKernel:
    """A compiled, checked write of one step of every env, for one buffer's schema.

    Args:
        names: The values the kernel takes, in argument order (fields, then ``next_<obs>``).
        fields: ``name -> (dtype, shape)`` of every value.
        columns: ``name -> column`` for values stored in a step column (``None``: final
            observations, which the kernel only checks).
        num_envs: ``E``.
        env_capacity: ``C``.

    Raises:
        ConfigError: A schema the kernel does not cover (too many values or dimensions, a
            column that is not a C-contiguous array of its field's dtype).
    """

    def __init__(
        self,
        names: Sequence[str],
        fields: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
        columns: dict[str, Array | None],
        num_envs: int,
        env_capacity: int,
    ) -> None:
        why = unsupported(names, fields, columns)
        if why is not None:
            raise ConfigError(why)
        self.names = tuple(names)
        table = np.zeros(_HEADER + _W * len(names), np.int64)
        table[_H_E], table[_H_C] = num_envs, env_capacity
        examples = []
        self._dtypes = [fields[name][0] for name in names]
        for k, name in enumerate(names):
            dtype, shape = fields[name]
            col = columns[name]
            b = _HEADER + k * _W
            if col is None:
                table[b + _KIND] = _FINAL
            else:
                table[b + _KIND] = _FLAG if name in ("terminated", "truncated") else _COLUMN
                table[b + _ADDR] = col.ctypes.data
            table[b + _PER] = int(np.prod(shape, dtype=np.int64))
            table[b + _SHAPE : b + _SHAPE + len(shape)] = shape
            examples.append(np.zeros((num_envs, *shape), dtype))
        self._scratch = np.zeros((_S_ROWS, num_envs), np.int64)
        self._scratch[_S_ENVS] = np.arange(num_envs)
        table[_H_SCRATCH] = self._scratch.ctypes.data
        self.table = table
        self.columns = columns  # keeps the addressed arrays alive with the table
        self._finals: tuple[Any, ...] = ()  # ... and those of point_finals
        self.ids = self._scratch[_S_IDS]  # the ids of the step the last STORED/ENDED call stored
        self.call = _compiled(examples)

    @property
    def stores_ends(self) -> bool:
        """Whether the kernel also stores steps that end episodes (see :meth:`point_finals`)."""
        return bool(self.table[_H_ENDS])

    def point_finals(self, index: EpisodeIndex, finals: Mapping[str, Array]) -> None:
        """Let the kernel store steps that end episodes, with their final observations.

        The kernel then accounts for them in ``index`` itself (the deferred plain steps first),
        writes each ending env's ``next_<obs>`` row to its record in ``finals[<obs>]`` and
        returns :data:`ENDED`; the caller resets the index's deferral counters. Call again
        whenever the final records were reallocated: until then the kernel sees the changed
        generation (``params[P_G]``) and answers :data:`ENDING` for such steps.

        Args:
            index: The episode index of the columns the kernel writes.
            finals: ``obs name -> finals column``, for every ``next_<obs>`` the kernel takes.

        Raises:
            ConfigError: The kernel takes no ``next_<obs>`` for some observation, or a finals
                column is not a C-contiguous array of its value's dtype.
        """
        table = self.table
        addresses: list[tuple[int, int]] = []
        for k, name in enumerate(self.names):
            b = _HEADER + k * _W
            if table[b + _KIND] != _FINAL:
                continue
            col = finals.get(name.removeprefix("next_"))
            if col is None or not col.flags.c_contiguous or col.dtype != self._dtypes[k]:
                raise ConfigError(f"{name}: no C-contiguous {self._dtypes[k]} finals column")
            addresses.append((b + _ADDR, col.ctypes.data))
        if len(addresses) != len(finals):
            raise ConfigError(
                f"names: a kernel that stores episode ends takes every next_<obs>, got "
                f"{[n for n in self.names if n.startswith('next_')]} for finals {sorted(finals)}"
            )
        env, slot_meta, owner, params = index.raw_tables()
        for pos, address in addresses:
            table[pos] = address
        table[_H_ENV], table[_H_SLOTS] = env.ctypes.data, slot_meta.ctypes.data
        table[_H_PARAMS], table[_H_OWNER] = params.ctypes.data, owner.ctypes.data
        table[_H_GEN] = params[P_G]
        table[_H_ENDS] = 1
        self._finals = (env, slot_meta, owner, params, dict(finals))
