"""The write side of a buffer: validate environment steps, then store them.

Writing is split in two so that a blocking ``add`` can wait for room between them, and so that
a rejected call leaves the buffer untouched:

1. :meth:`StepWriter.prepare` checks names, shapes and dtypes (NumPy ``same_kind`` casts, the
   weak-scalar rule for Python scalars) and finds which rows end their episode. It writes
   nothing.
2. :meth:`StepWriter.store` advances the episode index (which gives each row its slot), then
   writes the columns, the final observations of ended episodes and, when recorded, the
   discounted returns. Nothing in it can fail on user input.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple
from weakref import WeakMethod

import numpy as np

from rlreplay.codegen import define
from rlreplay.episodes.index import COUNT, HEAD, EpisodeIndex
from rlreplay.errors import FieldError, InvalidIdError, PerformanceWarning, ShapeError
from rlreplay.spec.schema import ENDING, PLAIN, Schema
from rlreplay.storage.columns import Columns
from rlreplay.writing import lockstep
from rlreplay.writing.returns import record_returns
from rlreplay.writing.step_check import none_is_missing, step_check_source

__all__ = ["MISSING", "Prepared", "ReturnsConfig", "StepWriter"]

Array = np.ndarray[Any, Any]


class _Missing:
    """The marker of a value not given (an ``add`` keyword left out)."""

    def __repr__(self) -> str:
        return "MISSING"


#: What :attr:`StepWriter.add_plain` gets for a name the call did not give.
MISSING: Any = _Missing()


class ReturnsConfig(NamedTuple):
    """How per-step discounted returns are recorded (``record_episodic_return``)."""

    column: Array
    gamma: float
    reward_clip: tuple[float, float] | None
    default: float


class Prepared(NamedTuple):
    """A validated call: rows (env of each step), which rows end an episode, the values."""

    rows_env: Array
    rows_done: Array
    values: dict[str, Any]
    single: bool  # one unbatched step of env 0: scalar slot writes
    ending: bool  # some row ends its episode


class StepWriter:
    """Validates and stores steps for one buffer's schema, index and columns.

    Cost: a plain step of every env (values as stored, no episode end) takes the generated
    :attr:`add_plain`: a type and dtype/shape or range test per value, one assignment per
    column, and the index's accounting deferred (about 1.4 µs in ``add`` for one env; 16 envs
    take the lockstep kernel, about 1.2 µs). Other calls: one cached validation lookup per value
    (a full check the first time a (field, dtype, shape) combination is seen), one Numba call
    for the index, one assignment per column.
    """

    def __init__(
        self,
        schema: Schema,
        index: EpisodeIndex,
        cols: Columns,
        returns: ReturnsConfig | None,
        observed: bool = False,
    ) -> None:
        self.schema = schema
        # The buffer hears about every store that ends an episode (``_commit``): such steps
        # must then go through the general store, never the lockstep kernel.
        self.observed = observed
        self.index = index
        self.cols = cols
        self.returns = returns
        self.num_envs = index.num_envs
        self.env_capacity = index.env_capacity
        self.all_envs = np.arange(self.num_envs, dtype=np.int64)
        self._one_env = np.zeros(1, np.int64)
        self._done_row = np.ones(1, np.bool_)
        self._not_done_row = np.zeros(1, np.bool_)
        self._scratch = np.empty((3, 1), np.int64)  # advance() results, one-env steps
        self._scratch_envs = np.empty((3, self.num_envs), np.int64)  # ... and all-env steps
        self._plain_keys = frozenset(schema.fields)
        self._next_names = frozenset(schema.next_names())
        self._full_keys = self._plain_keys | self._next_names
        # The lockstep kernel (vector envs): compiled after this many Python fast-path calls.
        self.lockstep_kernel: lockstep.LockstepKernel | None = None
        self._backoff = lockstep.ACTIVATE_AFTER
        self._countdown = [self._backoff]
        # Called when add_plain changes (see store_source); must not hold the buffer strongly.
        self.on_change: Callable[[], None] | None = None
        self._init_plain_path()

    def _init_plain_path(self) -> None:
        """Compile :attr:`add_plain`, the per-step fast path, for this schema and layout.

        ``add_plain(*args)`` takes one value per name of :attr:`arg_names` (the fields, then
        every ``next_<obs>``), :data:`MISSING` for a name not given, and handles one step of
        every env whose values need no conversion: exactly the fields (and every or no
        ``next_<obs>``), each already of the field's dtype and shape: NumPy arrays, or for a
        one-env buffer Python scalars that fit, or the field's NumPy scalar type
        (:meth:`Schema.plain_check_source`). When no row ends its episode and the envs are in
        lockstep it writes the columns in place (``E`` rows through one strided slice per
        column), leaves the index's accounting for later (:meth:`EpisodeIndex.defer_plain`:
        no kernel call, no temporary objects) and returns the ids. Otherwise it changes
        nothing and returns what the values are: :data:`ENDING` (some row ends its episode,
        every ``next_<obs>`` given) or :data:`PLAIN` (envs not in lockstep) for :meth:`store`
        of :meth:`prepared_plain`; or 0 for the general path (:meth:`prepare_step`), which
        converts and validates in full and names what is wrong. So the fast path accepts a
        subset of what the general path accepts, and stores it the same way.

        Like :meth:`Schema.plain_check` the function is straight-line Python generated once:
        the checks, then one assignment per column, with no loop and no second lookup.
        """
        E, C, schema = self.num_envs, self.env_capacity, self.schema
        self._single = E == 1
        lead = () if E == 1 else (E,)
        self._one_id = np.zeros(1, np.int64)
        self._no_rows_done = np.zeros(E, np.bool_)
        fields = tuple(schema.fields)
        self.arg_names, check, consts = step_check_source(schema, lead)
        consts["MISSING"] = MISSING
        lines = [f"def add_plain({', '.join(f'v{i}' for i in range(len(self.arg_names)))}):"]
        lines += check
        lines += [f"    if kind != {PLAIN}:", "        return kind"]
        if E > 1 and self._lockstep_eligible():  # count down to compiling the lockstep kernel
            # Weak: the writer holds this function, which must not hold the writer (a cycle
            # would keep the columns alive after the buffer is dropped, until the collector).
            consts.update(countdown=self._countdown, activate=WeakMethod(self._activate_lockstep))
            lines += ["    countdown[0] -= 1", "    if countdown[0] == 0:", "        activate()()"]
        lines += ["    t = defer()", "    if t < 0:", f"        return {PLAIN}"]
        consts.update(defer=self.index.defer_plain, np=np, one_id=self._one_id)
        where = "r" if E == 1 else "rows"
        lines.append(f"    r = t % {C}")
        if E > 1:
            lines.append(f"    rows = slice(r, None, {C})  # env e's step t is row e * C + t % C")
        for i, (name, col) in enumerate(self.cols.steps.items()):
            consts[f"col{i}"] = col
            lines.append(f"    col{i}[{where}] = v{fields.index(name)}")
        if self.returns is not None:
            consts["ret"], consts["ret_default"] = self.returns.column, self.returns.default
            lines.append(f"    ret[{where}] = ret_default")
        if E == 1:
            lines += ["    ids = one_id.copy()", "    ids[0] = t", "    return ids"]
        else:
            lines.append(f"    return np.arange(t * {E}, t * {E} + {E}, dtype=np.int64)")
        self.add_plain: Callable[..., Array | int] = define(
            lines, "add_plain", consts, "<rlreplay add_plain>"
        )
        self._add_plain_python = self.add_plain
        self._inline_consts: dict[str, Any] = {}

    # ------------------------------------------------------------------ lockstep kernel
    def _lockstep_values(
        self, names: tuple[str, ...]
    ) -> tuple[dict[str, tuple[np.dtype[Any], tuple[int, ...]]], dict[str, Array | None]]:
        """What a :class:`lockstep.LockstepKernel` taking ``names`` needs: each value's
        (dtype, shape), and its step column (``None`` for a ``next_<obs>``)."""
        lookup = self.schema.lookup  # next_<obs> -> its observation field
        fields = {name: (lookup(name).dtype, lookup(name).shape) for name in names}
        return fields, {name: self.cols.steps.get(name) for name in names}

    def _lockstep_eligible(self) -> bool:
        """Whether this buffer's vector steps can take a :class:`lockstep.LockstepKernel`."""
        names = (*self.schema.fields, *self.schema.next_names())
        return (
            self.num_envs > 1
            and self.returns is None
            and lockstep.unsupported(names, *self._lockstep_values(names)) is None
        )

    def _activate_lockstep(self) -> None:
        """Compile the lockstep kernel for this schema; route :attr:`add_plain` to it.

        The kernel takes the values of a plain step of every env (as :attr:`add_plain` would
        store them) and answers for everything else, which the Python fast path then handles.
        It takes every ``next_<obs>``: a call that gives none passes zero placeholders of their
        shape instead, with a table that keeps episode ends out of the kernel (such an end
        needs its final observations: the general path names them). A call that gives them
        all uses the kernel's own table, with which, unless a hook observes the store
        (``observed``), the kernel also stores steps that end episodes: final observations and
        the index's accounting, after which the index's deferral counters restart as after
        :meth:`EpisodeIndex.settle`. A value the kernel's dispatcher rejects (another dtype, a
        non-contiguous or read-only array) sends the buffer back to the Python path until it
        has again taken that path twice as many times as before. A kernel Numba cannot build
        leaves the buffer on the Python path for good, with a :class:`PerformanceWarning`.
        """
        names, nf = self.arg_names, len(self.schema.fields)
        specs, columns = self._lockstep_values(names)
        try:
            kernel = lockstep.LockstepKernel(
                names, specs, columns, self.num_envs, self.env_capacity
            )
        except Exception as exc:  # the kernel is an optimisation, never a need
            # Numba could not build it (a release without the internals it uses, a compiler
            # error): this buffer keeps the Python fast path, which stores the same steps. Its
            # countdown, now at zero, goes on below it: no second try.
            warnings.warn(
                f"rlreplay: the lockstep kernel for {self.num_envs} envs could not be compiled "
                f"({type(exc).__name__}: {exc}); vector steps keep the Python fast path "
                "(about 3.9 µs instead of about 1.2 µs per 16-env step)",
                PerformanceWarning,
                stacklevel=4,  # the caller of add (add -> add_plain -> this method)
            )
            return
        plain_table = kernel.table.copy()  # before point_finals: never stores an end
        index = self.index
        if not self.observed and len(names) > nf:  # the kernel stores steps that end episodes
            kernel.point_finals(index, self.cols.finals)
        consts: dict[str, Any] = {
            "_w_call": kernel.call, "_w_table": kernel.table, "_w_plain_table": plain_table,
            "_w_ids": kernel.ids, "_w_index": index, "_w_python": self._add_plain_python,
            "_w_settle": index.settle, "_w_MISSING": MISSING, "_w_cols": self.cols,
            "_w_rejected": WeakMethod(self._lockstep_rejected), "_w_repoint": kernel.point_finals,
        }  # fmt: skip
        for i in range(nf, len(names)):  # placeholders for next_<obs> not given
            dtype, shape = specs[names[i]]
            consts[f"_w_p{i}"] = np.zeros((self.num_envs, *shape), dtype)
        self.lockstep_kernel = kernel
        self._inline_consts = consts
        params = [f"v{i}" for i in range(len(names))]
        lines = [f"def add_lockstep({', '.join(params)}):"]
        lines += ["    " + x for x in self._lockstep_lines(params, "_w_out")]
        lines.append("    return _w_out")
        self.add_plain = define(lines, "add_lockstep", dict(consts), "<rlreplay add_lockstep>")
        self._changed()

    def _lockstep_lines(self, args: Sequence[str], out: str) -> list[str]:
        """The lockstep path as lines that set ``out`` (see :meth:`store_source`), for the
        values named ``args``; its constants are :attr:`_inline_consts` (names ``_w_*``)."""
        kernel = self.lockstep_kernel
        assert kernel is not None
        nf, n = len(self.schema.fields), len(args)
        values = ", ".join(args)
        given = " and ".join(f"{v} is not _w_MISSING" for v in args[nf:]) or "True"
        none = " and ".join(f"{v} is _w_MISSING" for v in args[nf:]) or "False"
        placeholders = ", ".join([*args[:nf], *(f"_w_p{i}" for i in range(nf, n))])
        # A lockstep step that ends an episode and that the kernel did not store goes to the
        # general store (ENDING) when every next_<obs> was given, else the general path names
        # what is missing (0). A kernel that stores ends declines one when the final records
        # moved (or are full): it is pointed at them again before the general store runs.
        ending = [f"    {out} = {ENDING}"]
        if kernel.stores_ends:
            ending.insert(0, "    _w_repoint(_w_index, _w_cols.finals)")
        return [
            *none_is_missing(args[nf:], "_w_MISSING"),
            "_w_t = _w_index._next_t",
            "if _w_t < 0:",
            "    _w_t = _w_index._lockstep",
            "_w_v = -1  # not called: the Python checks",
            "if _w_t >= 0:",
            "    try:",
            f"        if {given}:",
            f"            _w_v = _w_call(_w_table, _w_t, {values})",
            f"        elif {none}:",
            f"            _w_v = _w_call(_w_plain_table, _w_t, {placeholders})",
            "    except (TypeError, ValueError):  # not the compiled types: no call took place",
            "        _w_rejected()()  # weak, as `activate` in add_plain",
            f"if _w_v == {lockstep.STORED}:",  # EpisodeIndex.defer_plain, inlined
            "    _w_index._next_t = _w_t + 1",
            "    _w_n = _w_index._pending + 1",
            "    _w_index._pending = _w_n",
            "    if _w_n >= _w_index._max_pending:",
            "        _w_settle()",
            f"    {out} = _w_ids.copy()",
            f"elif _w_v == {lockstep.ENDED}:  # index settled and advanced by the kernel",
            "    _w_index._pending = 0",
            "    _w_index._next_t = -1",
            "    _w_index._lockstep = _w_t + 1",
            f"    {out} = _w_ids.copy()",
            f"elif _w_v == {lockstep.ENDING} and {given}:",
            *ending,
            f"elif _w_v == {lockstep.ENDING}:",
            f"    {out} = 0",
            "else:  # not called, or a shape the kernel does not take: the Python checks",
            f"    {out} = _w_python({values})",
        ]

    def store_source(self, args: Sequence[str], out: str) -> tuple[list[str], dict[str, Any]]:
        """Source that stores a plain step as :attr:`add_plain` does, for inlining in ``add``.

        Args:
            args: The names holding the values, in :attr:`arg_names` order (:data:`MISSING`
                for a value not given). They must not start with ``_w_``.
            out: The name to set to what :attr:`add_plain` would return.

        Returns:
            The lines (unindented) and the constants they name (all starting with ``_w_``).
            They hold while the writer keeps its path: :attr:`on_change` is called when it
            takes another (the lockstep kernel compiled, or given up).
        """
        if self.add_plain is self._add_plain_python:
            # next_<obs>=None is "not given" here already, so that the values handed on to
            # prepared_plain (named by ``args``) hold no None either.
            nexts = args[len(self.schema.fields) :]
            lines = none_is_missing(nexts, "_w_MISSING")
            lines.append(f"{out} = _w_path({', '.join(args)})")
            return lines, {"_w_path": self.add_plain, "_w_MISSING": MISSING}
        return self._lockstep_lines(args, out), dict(self._inline_consts)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _lockstep_rejected(self) -> None:
        """Back to the Python fast path, with twice the countdown to the next try."""
        self.add_plain = self._add_plain_python
        self._backoff *= 2
        self._countdown[0] = self._backoff
        self._changed()

    # ------------------------------------------------------------------ validation
    def prepare_step(self, values: dict[str, Any], env_ids: Any) -> Prepared:
        """Validate one step of every env, of the envs in ``env_ids``, or (one env) unbatched."""
        values = self._given(values)
        if env_ids is not None:
            rows_env = self.check_env_ids(env_ids)
            return self._prepare(rows_env, values, (rows_env.shape[0],))
        if self.num_envs > 1:
            return self._prepare(self.all_envs, values, (self.num_envs,))
        return self._prepare(self._one_env, values, ())

    def prepare_extend(self, values: dict[str, Any], env_id: Any) -> Prepared:
        """Validate ``T`` consecutive steps of one env (leading axis ``T``)."""
        env = self.check_env_ids([env_id], name="env_id")[0]
        values = self._given(values)
        if "terminated" not in values:
            self.schema.check_keys(values, ending=False)  # names what is missing
        shape = np.shape(values["terminated"])
        if len(shape) != 1:
            raise ShapeError(f"terminated: extend expects shape (T,), got {shape}")
        return self._prepare(np.full(shape[0], env, np.int64), values, (shape[0],))

    def _given(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` without the ``next_<obs>`` given as ``None`` (which means "not given")."""
        if any(values.get(name, MISSING) is None for name in self._next_names):
            return {k: v for k, v in values.items() if v is not None or k not in self._next_names}
        return values

    def _prepare(self, rows_env: Array, values: dict[str, Any], lead: tuple[int, ...]) -> Prepared:
        schema = self.schema
        keys = values.keys()
        full = keys == self._full_keys
        if not full and keys != self._plain_keys:
            schema.check_keys(keys, ending=False)  # unknown/missing names; next_* checked below
        converted = schema.convert_all(values, lead)
        if lead:
            rows_done = np.logical_or(converted["terminated"], converted["truncated"])
            ending = bool(rows_done.any())
        else:
            ending = bool(converted["terminated"]) or bool(converted["truncated"])
            rows_done = self._done_row if ending else self._not_done_row
        if ending and not full:
            schema.check_keys(keys, ending=True)  # names the missing next_<obs>
        return Prepared(rows_env, rows_done, converted, not lead, ending)

    def check_env_ids(self, env_ids: Any, name: str = "env_ids") -> Array:
        """``env_ids`` as unique int64 env numbers in ``[0, num_envs)``."""
        arr = np.asarray(env_ids)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise InvalidIdError(
                f"{name}: expected a 1-D sequence of ints, got {arr.dtype} with shape {arr.shape}"
            )
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_envs):
            bad = arr[(arr < 0) | (arr >= self.num_envs)]
            raise InvalidIdError(
                f"{name}: expected values in [0, {self.num_envs}), got {bad.tolist()}"
            )
        if np.unique(arr).size != arr.size:
            raise InvalidIdError(f"{name}: expected unique env ids, got {arr.tolist()}")
        return arr

    def end_episode(self, env_id: Any, values: dict[str, Any]) -> Array:
        """Truncate env ``env_id``'s running episode at its newest step (see the buffer)."""
        e = int(self.check_env_ids([env_id], name="env_id")[0])
        expected = set(self.schema.next_names())
        if set(self._given(values)) != expected:
            raise FieldError(
                f"end_episode: expected exactly {sorted(expected)} (the final observation), "
                f"got {sorted(self._given(values))} (None counts as not given)"
            )
        converted = self.schema.convert_all(values, ())
        row_env = np.array([e], np.int64)
        done = np.ones(1, np.bool_)
        if self.index.env[e, COUNT] > self.index.env[e, HEAD]:  # reserve only if a step exists
            self._reserve_finals(row_env, done)
        t, slot, pos = self.index.end_running(e)
        self.cols.steps["truncated"][slot] = True
        self.cols.write_finals(np.array([pos]), converted, rows=None)
        self._record_returns(row_env, np.array([t]), done)
        return np.array([t * self.num_envs + e], np.int64)

    def prepared_plain(self, values: dict[str, Any], kind: int) -> Prepared:
        """The :class:`Prepared` of values :attr:`add_plain` passed as ``kind`` (no copies)."""
        if self._single:
            return Prepared(self._one_env, self._done_row if kind == ENDING else
                            self._not_done_row, values, True, kind == ENDING)  # fmt: skip
        if kind == ENDING:
            rows_done = np.logical_or(values["terminated"], values["truncated"])
        else:
            rows_done = self._no_rows_done
        return Prepared(self.all_envs, rows_done, values, False, kind == ENDING)

    # ------------------------------------------------------------------ storing
    def store(self, prep: Prepared) -> Array:
        """Store a prepared call; returns the ids of its rows (``t * E + env``)."""
        rows_env, rows_done, values, single, ending = prep
        C = self.env_capacity
        if not single and rows_env.shape[0] > C and np.all(rows_env == rows_env[0]):
            # extend() longer than the ring: write in chunks of at most C rows, so no slot is
            # written twice in one fancy assignment (whose order NumPy does not define).
            return np.concatenate(
                [
                    self._store(
                        rows_env[s : s + C],
                        rows_done[s : s + C],
                        {k: np.asarray(v)[s : s + C] for k, v in values.items()},
                        False,
                        bool(rows_done[s : s + C].any()),
                    )
                    for s in range(0, rows_env.shape[0], C)
                ]
            )
        return self._store(rows_env, rows_done, values, single, ending)

    def _store(
        self, rows_env: Array, rows_done: Array, values: dict[str, Any], single: bool, ending: bool
    ) -> Array:
        if ending:
            self._reserve_finals(rows_env, rows_done)
        lockstep = rows_env is self.all_envs  # one row per env: reuse the result array
        out = self._scratch if single else self._scratch_envs if lockstep else None
        t, slots, fpos, same_t = self.index.advance(rows_env, rows_done, out)
        E = self.num_envs
        if single:
            self.cols.write(int(slots[0]), values)
            if ending:
                self.cols.write_finals(fpos, values, rows=None)
            ids = t.copy()  # one env: the id is the step
        else:
            if lockstep and same_t:  # env e's row is e * C + t % C: a strided slice
                t0 = int(t[0])
                self.cols.write(slice(int(slots[0]), None, self.env_capacity), values)
                ids = np.arange(t0 * E, t0 * E + E, dtype=np.int64)
            else:
                self.cols.write(slots, values)
                ids = t * E + rows_env
            if ending:
                which = rows_done.nonzero()[0]
                self.cols.write_finals(fpos[which], values, rows=which)
        self._record_returns(rows_env, t, rows_done)
        return ids

    def _reserve_finals(self, rows_env: Array, rows_done: Array) -> None:
        """Room for the final records of ending rows (the columns follow a doubling)."""
        moved = self.index.reserve_finals(rows_env, rows_done)
        if moved is not None:
            self.cols.grow_finals(self.index.finals_capacity, *moved)

    def _record_returns(self, rows_env: Array, rows_t: Array, rows_done: Array) -> None:
        if self.returns is not None:
            r = self.returns
            record_returns(
                r.column, self.cols.steps["reward"], self.index, rows_env, rows_t, rows_done,
                r.gamma, r.reward_clip, r.default,
            )  # fmt: skip
