"""The storage contract (:class:`rlreplay.storage.Storage`) as check functions.

Every check takes a *factory* ``make(schema, num_envs, env_capacity, finals_capacity)`` that
returns a fresh, empty storage, and raises ``AssertionError`` (or the storage's own error) when
the storage breaks the contract. ``storage_checks()`` lists them all, so a test module runs them
over one implementation with ``pytest.mark.parametrize`` (see ``test_storage.py``), and
``check_storage(make)`` runs them in a row (as scikit-learn's ``check_estimator``).

Values are compared bit for bit (``tobytes``): random bytes make floats with NaN payloads and
negative zeros, which a value comparison would let through.

A storage whose arrays are not NumPy arrays (tensors on a device) gives the checks three hooks,
as methods; a NumPy storage needs none, and its arrays are read and written as they are:

* ``to_numpy(array, dtype)``: a host copy of one of its arrays (a column, or what ``take``
  returned); ``dtype`` is the field's NumPy dtype (``None`` for a derived column), which it may
  use only to give the copy the byte order of ``dtype`` when its own arrays cannot hold it;
* ``assign(array, index, values)``: ``array[index] = values`` with host ``values``;
* ``column_address(array)``: ``(address of its first byte, row stride in bytes)``, what
  ``array.ctypes.data, array.strides[0]`` are for a NumPy column.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.spec.schema import Schema
from rlreplay.storage import Storage

__all__ = ["StorageFactory", "check_storage", "contract_schema", "host", "storage_checks"]

Array = np.ndarray[Any, Any]
StorageFactory = Callable[[Schema, int, int, int], Storage]


def contract_schema() -> Schema:
    """Fields of every kind a storage must keep: each numeric kind, byte orders, scalars, n-d
    rows, rows of more than 256 bytes and empty rows; three observation fields."""
    return Schema.build(
        {
            "obs": rr.Field((3,), np.float32),
            "pixels": rr.Field((2, 3), np.uint8, observation=True),
            "goal": rr.Field((), ">f8", observation=True),
            "action": rr.Field((), np.int64),
            "flags": rr.Field((4,), np.bool_),
            "reward": rr.Field((), np.float64),
            "logits": rr.Field((2,), np.float16),
            "phase": rr.Field((2,), np.complex64),
            "wide": rr.Field((40,), np.uint64),
            "empty": rr.Field((0,), np.float32),
            "small": rr.Field((), np.int8),
        }
    )


def random_rows(rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
    """Random values of ``dtype`` and ``shape``: random bytes (NaN payloads, -0.0, any integer),
    0/1 for bool (what validation leaves in a bool column)."""
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return raw.astype(np.uint8).view(dtype).reshape(shape)


def step_values(
    schema: Schema, rng: np.random.Generator, lead: tuple[int, ...]
) -> dict[str, Array]:
    """Validated write values: every field and every ``next_<obs>``, leading axes ``lead``."""
    out = {n: random_rows(rng, f.dtype, lead + f.shape) for n, f in schema.fields.items()}
    for n in schema.observation_names:
        f = schema.fields[n]
        out["next_" + n] = random_rows(rng, f.dtype, lead + f.shape)
    return out


def host(s: Storage, array: Any, dtype: np.dtype[Any] | None = None) -> Array:
    """``array`` (one of ``s``'s arrays) as a NumPy array: itself for a NumPy storage, else the
    storage's ``to_numpy`` copy (``dtype``: the field's, see the module docstring)."""
    to_numpy = getattr(s, "to_numpy", None)
    return np.asarray(array) if to_numpy is None else np.asarray(to_numpy(array, dtype))


def assign(s: Storage, array: Any, index: Any, values: Any) -> None:
    """``array[index] = values`` for one of ``s``'s arrays (through its ``assign``, if any)."""
    hook = getattr(s, "assign", None)
    if hook is None:
        array[index] = values
    else:
        hook(array, index, values)


def column_address(s: Storage, array: Any) -> tuple[int, int]:
    """``(address, row stride in bytes)`` of one of ``s``'s columns."""
    hook = getattr(s, "column_address", None)
    if hook is None:
        return array.ctypes.data, array.strides[0]
    address, stride = hook(array)
    return int(address), int(stride)


def flip_bits(s: Storage, array: Any, dtype: np.dtype[Any]) -> None:
    """Overwrite every byte of ``array`` (one of ``s``'s arrays, of a field of ``dtype``) with
    its complement (a bool with its negation)."""
    if getattr(s, "assign", None) is None:
        array.view(np.uint8)[...] ^= 0xFF
        return
    now = host(s, array, dtype)
    flipped = ~now if now.dtype == np.bool_ else (now.view(np.uint8) ^ 0xFF).view(now.dtype)
    assign(s, array, Ellipsis, flipped)


def _dtype_of(s: Storage, name: str) -> np.dtype[Any] | None:
    """The field dtype of checkpoint array ``name`` (``None`` for a derived column)."""
    kind, _, field = name.partition("/")
    return s.schema.fields[field].dtype if kind in ("steps", "finals") else None


def assert_bits(got: Any, want: Any, what: str = "") -> None:
    """Same dtype, same shape, same bytes."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.tobytes() == want.tobytes(), f"{what}: contents differ"


def snapshot(s: Storage) -> dict[str, bytes]:
    """Every column's bytes, by checkpoint name."""
    arrays = s.state_arrays().items()
    return {k: np.ascontiguousarray(host(s, v, _dtype_of(s, k))).tobytes() for k, v in arrays}


def filled(
    make: StorageFactory, E: int = 3, C: int = 5, F: int = 2, seed: int = 0
) -> tuple[Storage, dict[str, Array], dict[str, Array]]:
    """A storage whose every step and final row holds random values, with those values
    (``steps[name]`` of shape ``(E*C, ...)``, ``finals[name]`` of ``(E*F, ...)``)."""
    schema = contract_schema()
    s = make(schema, E, C, F)
    rng = np.random.default_rng(seed)
    values = step_values(schema, rng, (E * C,))
    s.write(np.arange(E * C, dtype=np.int64), values)
    steps = {n: values[n] for n in schema.fields}
    finals = step_values(schema, rng, (E * F,))
    s.write_finals(np.arange(E * F, dtype=np.int64), finals, np.arange(E * F))
    final_rows = {n: finals["next_" + n] for n in schema.observation_names}
    return s, steps, final_rows


def assert_holds(s: Storage, steps: Mapping[str, Array], finals: Mapping[str, Array]) -> None:
    """Every step and final row of ``s`` is the given values' (through ``take``, ``take_finals``
    and the live columns)."""
    for name, want in steps.items():
        rows = np.arange(want.shape[0], dtype=np.int64)
        dtype = s.schema.fields[name].dtype
        assert_bits(host(s, s.take(name, rows), dtype), want, f"take({name!r})")
        assert_bits(host(s, s.steps[name], dtype), want, f"steps[{name!r}]")
    for name, want in finals.items():
        rows = np.arange(want.shape[0], dtype=np.int64)
        dtype = s.schema.fields[name].dtype
        assert_bits(host(s, s.take_finals(name, rows), dtype), want, f"take_finals({name!r})")
        assert_bits(host(s, s.finals[name], dtype), want, f"finals[{name!r}]")


# ---------------------------------------------------------------------- the checks
def check_is_a_storage(make: StorageFactory) -> None:
    """It is a :class:`Storage` (every member present) and reports the sizes it was made with."""
    schema = contract_schema()
    s = make(schema, 3, 5, 2)
    assert isinstance(s, Storage)
    assert (s.num_envs, s.env_capacity, s.finals_capacity) == (3, 5, 2)
    assert s.schema is schema or s.schema.fields == schema.fields


def check_fresh_layout(make: StorageFactory) -> None:
    """One zero-filled step column per field ``(E*C, *shape)``, one finals column per observation
    field ``(E*F, *shape)``, in schema order, each of its field's dtype; no derived column."""
    schema = contract_schema()
    E, C, F = 3, 5, 2
    s = make(schema, E, C, F)
    assert list(s.steps) == list(schema.fields)
    assert list(s.finals) == list(schema.observation_names) == ["obs", "pixels", "goal"]
    assert dict(s.derived) == {}
    for name, f in schema.fields.items():
        zeros = np.zeros((E * C, *f.shape), f.dtype)
        assert_bits(host(s, s.steps[name], f.dtype), zeros, f"steps[{name!r}]")
    for name in schema.observation_names:
        f = schema.fields[name]
        zeros = np.zeros((E * F, *f.shape), f.dtype)
        assert_bits(host(s, s.finals[name], f.dtype), zeros, f"finals[{name!r}]")
    names = [f"steps/{n}" for n in schema.fields]
    names += [f"finals/{n}" for n in schema.observation_names]
    assert list(s.state_arrays()) == names


def check_rows_round_trip_bit_for_bit(make: StorageFactory) -> None:
    """Rows written at slots (an int, a slice, an array) are taken back bit for bit, for every
    field, dtype and shape, through slot arrays of any shape; the last write of a row wins."""
    schema = contract_schema()
    E, C = 2, 6
    s = make(schema, E, C, 2)
    rng = np.random.default_rng(1)
    want = {n: np.zeros((E * C, *f.shape), f.dtype) for n, f in schema.fields.items()}

    def write(slots: Any, lead: tuple[int, ...]) -> None:
        values = step_values(schema, rng, lead)
        s.write(slots, values)
        for n in want:
            want[n][slots] = values[n]

    write(7, ())  # one unbatched row
    write(np.array([3, 11, 0], np.int64), (3,))  # rows of both envs, out of order
    write(slice(2, None, C), (E,))  # a lockstep step: ring position 2 of every env
    write(np.array([11, 5], np.int64), (2,))  # row 11 again: the last write wins
    slots = np.array([[0, 11], [7, 7], [2, 8]], np.int64)  # 2-D, with repeats
    for name, f in schema.fields.items():
        got = host(s, s.take(name, slots), f.dtype)
        assert_bits(got, want[name][slots], f"take({name!r}, 2-D slots)")
        one = s.take(name, np.array([7], np.int64))
        assert_bits(host(s, one, f.dtype), want[name][[7]], f"take({name!r}, [7])")
        assert tuple(one.shape) == (1, *f.shape)
        assert_bits(host(s, s.steps[name], f.dtype), want[name], f"steps[{name!r}]")


def check_take_returns_fresh_arrays(make: StorageFactory) -> None:
    """Writing into what ``take``/``take_finals`` returned changes nothing stored."""
    s, steps, finals = filled(make)
    before = snapshot(s)
    for name, f in s.schema.fields.items():
        got = s.take(name, np.array([1, 4, 9], np.int64))
        if f.nbytes:
            flip_bits(s, got, f.dtype)
    for name in s.finals:
        got = s.take_finals(name, np.array([0, 5], np.int64))
        flip_bits(s, got, s.schema.fields[name].dtype)
    assert snapshot(s) == before
    assert_holds(s, steps, finals)


def check_env_rings_do_not_overlap(make: StorageFactory) -> None:
    """Env ``e`` owns step rows ``e*C .. e*C+C-1`` and final rows ``e*F .. e*F+F-1``: writing
    all of one env's rows leaves every other env's rows bit-identical."""
    E, C, F = 3, 5, 2
    s, steps, finals = filled(make, E, C, F)
    rng = np.random.default_rng(2)
    for e in range(E):
        ring = np.arange(e * C, (e + 1) * C, dtype=np.int64)
        values = step_values(s.schema, rng, (C,))
        s.write(ring, values)
        records = np.arange(e * F, (e + 1) * F, dtype=np.int64)
        fvalues = step_values(s.schema, rng, (F,))
        s.write_finals(records, fvalues, np.ones(F, np.bool_))
        for name in steps:
            steps[name][ring] = values[name]
        for name in finals:
            finals[name][records] = fvalues["next_" + name]
        assert_holds(s, steps, finals)  # the other envs' rows are what they were


def check_final_observations_round_trip(make: StorageFactory) -> None:
    """``write_finals`` stores ``next_<obs>`` of every observation field (one unbatched step,
    rows chosen by a bool mask, or by row numbers) and nothing else; ``take_finals`` reads
    them back bit for bit."""
    E, C, F = 2, 4, 3
    s, steps, finals = filled(make, E, C, F)
    rng = np.random.default_rng(3)
    # One unbatched step ending its episode (rows=None).
    one = step_values(s.schema, rng, ())
    s.write_finals(np.array([4], np.int64), one, None)
    for name in finals:
        finals[name][4] = one["next_" + name]
    # A batch of 4 rows of which rows 1 and 3 end: by mask, then by row numbers.
    for rows in (np.array([False, True, False, True]), np.array([1, 3], np.int64)):
        batch = step_values(s.schema, rng, (4,))
        positions = np.array([5, 0], np.int64)
        s.write_finals(positions, batch, rows)
        for name in finals:
            finals[name][positions] = batch["next_" + name][[1, 3]]
        assert_holds(s, steps, finals)  # the step columns are untouched
    got = host(s, s.take_finals("pixels", np.array([[5, 0], [4, 4]], np.int64)))
    assert_bits(got, finals["pixels"][np.array([[5, 0], [4, 4]])], "take_finals(2-D)")


def check_nbytes_matches_the_arrays(make: StorageFactory) -> None:
    """``nbytes`` is the bytes of every column, ``E*C*sum(field) + E*F*sum(obs) + derived``,
    also after adding a derived column and resizing the finals (growing them: see
    :func:`check_grow_finals_keeps_contents`)."""
    schema = contract_schema()
    E, C, F = 3, 5, 2
    s = make(schema, E, C, F)

    def expected(F: int, derived: int) -> int:
        per_step = sum(f.nbytes for f in schema.fields.values())
        per_final = sum(schema.fields[n].nbytes for n in schema.observation_names)
        return E * C * per_step + E * F * per_final + derived

    def actual() -> int:
        return sum(int(a.nbytes) for a in s.state_arrays().values())

    assert s.nbytes == expected(F, 0) == actual()
    s.add_derived("discounted_return", np.dtype(np.float32), -1.0)
    assert s.nbytes == expected(F, E * C * 4) == actual()
    s.set_finals_capacity(7)
    assert s.nbytes == expected(7, E * C * 4) == actual()


def check_derived_columns(make: StorageFactory) -> None:
    """``add_derived`` allocates a live ``(E*C,)`` column of its dtype filled with ``fill``, listed
    in ``derived`` and ``state_arrays`` (``derived/<name>``); the other columns are untouched."""
    s, steps, finals = filled(make)
    col = s.add_derived("discounted_return", np.dtype(np.float32), -1000.0)
    assert_bits(host(s, col), np.full(15, -1000.0, np.float32), "derived column")
    assert s.derived["discounted_return"] is col
    assert s.state_arrays()["derived/discounted_return"] is not None
    assign(s, col, [2, 14], [0.5, -0.0])
    want = np.full(15, -1000.0, np.float32)
    want[[2, 14]] = [0.5, -0.0]
    assert_bits(host(s, s.derived["discounted_return"]), want, "derived after a write")
    state_array = s.state_arrays()["derived/discounted_return"]
    assert_bits(host(s, state_array), want, "derived state array")
    assert_holds(s, steps, finals)


def check_grow_finals_keeps_contents(make: StorageFactory) -> None:
    """``grow_finals`` moves the live records as the index moves them (``e*F + fid % F`` to
    ``e*F' + fid % F'``), zero elsewhere; the step columns keep their arrays and contents."""
    E, C, F = 3, 5, 4
    s, steps, finals = filled(make, E, C, F)
    # Live record ids per env (a window of the ring that wraps for env 1, empty for env 2).
    live = {0: range(1, 4), 1: range(6, 10), 2: range(0)}
    old_pos = np.array([e * F + fid % F for e, r in live.items() for fid in r], np.int64)
    F2 = 2 * F
    new_pos = np.array([e * F2 + fid % F2 for e, r in live.items() for fid in r], np.int64)
    step_arrays = dict(s.steps)
    nbytes = s.nbytes
    s.grow_finals(F2, old_pos, new_pos)
    assert s.finals_capacity == F2
    obs_bytes = sum(s.schema.fields[n].nbytes for n in s.finals)
    assert s.nbytes == nbytes + E * (F2 - F) * obs_bytes
    for name, old in finals.items():
        want = np.zeros((E * F2, *old.shape[1:]), old.dtype)
        want[new_pos] = old[old_pos]
        assert_bits(host(s, s.finals[name], old.dtype), want, f"finals[{name!r}] after growing")
        got = host(s, s.take_finals(name, new_pos), old.dtype)
        assert_bits(got, old[old_pos], f"take_finals({name!r}) after growing")
    for name, arr in s.steps.items():
        assert arr is step_arrays[name], f"steps[{name!r}] moved"
        got = host(s, arr, steps[name].dtype)
        assert_bits(got, steps[name], f"steps[{name!r}] after growing")


def check_set_finals_capacity_empties_the_finals(make: StorageFactory) -> None:
    """``set_finals_capacity`` leaves zero-filled finals of the new capacity and every step row."""
    E, C = 3, 5
    s, steps, _ = filled(make, E, C, 2)
    s.set_finals_capacity(6)
    assert s.finals_capacity == 6
    for name, col in s.finals.items():
        f = s.schema.fields[name]
        zeros = np.zeros((E * 6, *f.shape), f.dtype)
        assert_bits(host(s, col, f.dtype), zeros, f"finals[{name!r}]")
    assert_holds(s, steps, {})


def check_step_columns_never_move(make: StorageFactory) -> None:
    """The step and derived columns are the same arrays at the same addresses after writes,
    final writes, resizing the finals and loading a state (growing them:
    :func:`check_grow_finals_keeps_contents`); ``prefetch_table`` names step columns'
    addresses and row strides, and stays valid."""
    s, _, _ = filled(make)
    derived = s.add_derived("r", np.dtype(np.float32), 0.0)
    arrays = dict(s.steps)
    addresses = {n: column_address(s, a)[0] for n, a in arrays.items()}
    table = np.array(s.prefetch_table)
    assert table.dtype == np.int64 and table.ndim == 2 and table.shape[1] == 2
    known = {column_address(s, a) for a in arrays.values()}
    assert {(int(p), int(q)) for p, q in table} <= known
    other, _, _ = filled(make, seed=5)
    other.add_derived("r", np.dtype(np.float32), 2.0)
    state = other.state_dict()
    state["finals_capacity"] = 8  # another capacity: the finals are reallocated
    for name in s.finals:
        f = s.schema.fields[name]
        state["arrays"][f"finals/{name}"] = np.zeros((3 * 8, *f.shape), f.dtype)
    rng = np.random.default_rng(6)
    s.write(np.array([0, 14], np.int64), step_values(s.schema, rng, (2,)))
    s.write_finals(np.array([1], np.int64), step_values(s.schema, rng, ()), None)
    s.set_finals_capacity(5)
    s.load_state_dict(state)
    for name, arr in s.steps.items():
        moved = arr is not arrays[name] or column_address(s, arr)[0] != addresses[name]
        assert not moved, f"{name!r} moved"
    assert s.derived["r"] is derived
    assert_bits(s.prefetch_table, table, "prefetch_table")


def check_state_arrays_are_live_views(make: StorageFactory) -> None:
    """``state_arrays`` gives the columns themselves: a checkpoint reader that streams into
    them changes what ``take`` reads."""
    s, steps, finals = filled(make)
    rng = np.random.default_rng(7)
    arrays = s.state_arrays()
    for name in steps:
        new = random_rows(rng, steps[name].dtype, steps[name].shape)
        assign(s, arrays[f"steps/{name}"], Ellipsis, new)
        steps[name] = new
    for name in finals:
        new = random_rows(rng, finals[name].dtype, finals[name].shape)
        assign(s, arrays[f"finals/{name}"], Ellipsis, new)
        finals[name] = new
    assert_holds(s, steps, finals)


def check_state_dict_round_trips(make: StorageFactory) -> None:
    """``state_dict`` is a copy (later writes leave it unchanged); loaded into a fresh storage
    of another finals capacity, every column reads back bit for bit, as does the capacity."""
    s, steps, finals = filled(make, 3, 5, 4)
    s.add_derived("discounted_return", np.dtype(np.float32), -3.0)
    assign(s, s.derived["discounted_return"], [0, 7], [1.5, np.nan])
    state = s.state_dict()
    saved = snapshot(s)
    assert state["finals_capacity"] == 4
    assert list(state["arrays"]) == list(s.state_arrays())
    s.write(np.arange(15, dtype=np.int64), step_values(s.schema, np.random.default_rng(8), (15,)))
    assert {k: np.ascontiguousarray(v).tobytes() for k, v in state["arrays"].items()} == saved
    fresh = make(s.schema, 3, 5, 2)
    fresh.add_derived("discounted_return", np.dtype(np.float32), 0.0)
    fresh.load_state_dict(state)
    assert fresh.finals_capacity == 4
    assert snapshot(fresh) == saved
    assert_holds(fresh, steps, finals)
    assert fresh.nbytes == s.nbytes
    again = fresh.state_dict()
    assert again["finals_capacity"] == 4
    for name, arr in state["arrays"].items():
        assert_bits(again["arrays"][name], arr, name)


def check_load_state_dict_refuses_malformed_states(make: StorageFactory) -> None:
    """A state with a missing, unexpected, mistyped or misshapen array, or a bad capacity, is
    refused with ``CheckpointError`` and changes nothing."""
    s, _, _ = filled(make)
    good = filled(make, seed=9)[0].state_dict()
    before = snapshot(s)

    def variant(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        state = {"finals_capacity": good["finals_capacity"], "arrays": dict(good["arrays"])}
        change(state)
        return state

    def drop(state: dict[str, Any]) -> None:
        del state["arrays"]["steps/action"]

    def extra(state: dict[str, Any]) -> None:
        state["arrays"]["steps/other"] = np.zeros(15)

    def dtype(state: dict[str, Any]) -> None:
        state["arrays"]["steps/goal"] = np.zeros(15, np.float64)  # "<f8", the field is ">f8"

    def shape(state: dict[str, Any]) -> None:
        state["arrays"]["steps/obs"] = np.zeros((15, 4), np.float32)

    def finals_shape(state: dict[str, Any]) -> None:
        state["arrays"]["finals/obs"] = np.zeros((3 * 5, 3), np.float32)  # not E * F rows

    def not_an_array(state: dict[str, Any]) -> None:
        state["arrays"]["steps/small"] = [0] * 15

    def capacity(state: dict[str, Any]) -> None:
        state["finals_capacity"] = 0

    def missing_key(state: dict[str, Any]) -> None:
        del state["finals_capacity"]

    for change in (drop, extra, dtype, shape, finals_shape, not_an_array, capacity, missing_key):
        with pytest.raises(rr.CheckpointError):
            s.load_state_dict(variant(change))
        assert snapshot(s) == before, change.__name__
        assert s.finals_capacity == 2


# A slow, obviously correct model: a list of row bytes per column.
class _Model:
    def __init__(self, schema: Schema, E: int, C: int, F: int) -> None:
        self.schema, self.E, self.C, self.F = schema, E, C, F
        self.steps = {n: [bytes(f.nbytes)] * (E * C) for n, f in schema.fields.items()}
        self.finals = {
            n: [bytes(schema.fields[n].nbytes)] * (E * F) for n in schema.observation_names
        }

    def write(self, slots: list[int], values: Mapping[str, Array]) -> None:
        for i, slot in enumerate(slots):
            for n in self.steps:
                self.steps[n][slot] = np.ascontiguousarray(values[n][i]).tobytes()

    def write_finals(
        self, positions: list[int], rows: list[int], values: Mapping[str, Array]
    ) -> None:
        for pos, row in zip(positions, rows, strict=True):
            for n in self.finals:
                self.finals[n][pos] = np.ascontiguousarray(values["next_" + n][row]).tobytes()

    def grow(self, F2: int, moves: list[tuple[int, int]]) -> None:
        for n, rows in self.finals.items():
            new = [bytes(self.schema.fields[n].nbytes)] * (self.E * F2)
            for old, to in moves:
                new[to] = rows[old]
            self.finals[n] = new
        self.F = F2


@st.composite
def _programs(draw: st.DrawFn, grow: bool) -> list[tuple[Any, ...]]:
    """Operations on a storage of 3 envs x 4 slots, 2 final records per env at first."""
    ops: list[tuple[Any, ...]] = []
    F = 2
    kinds = ["rows", "one", "lockstep", "finals"] + (["grow"] if grow else [])
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(kinds))
        if kind == "rows":
            ops.append(
                ("rows", draw(st.lists(st.integers(0, 11), min_size=1, max_size=6, unique=True)))
            )
        elif kind == "one":
            ops.append(("one", draw(st.integers(0, 11))))
        elif kind == "lockstep":
            ops.append(("lockstep", draw(st.integers(0, 3))))
        elif kind == "finals":
            n = draw(st.integers(1, 4))
            rows = sorted(
                draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
            )
            pos = draw(
                st.lists(
                    st.integers(0, 3 * F - 1), min_size=len(rows), max_size=len(rows), unique=True
                )
            )
            ops.append(("finals", n, rows, pos, draw(st.booleans())))
        else:
            # Per env, a window of live record ids [first, first + size) with size <= F.
            windows = [(draw(st.integers(0, 20)), draw(st.integers(0, F))) for _ in range(3)]
            ops.append(("grow", F, windows))
            F *= 2
    return ops


def check_random_writes_match_a_reference(make: StorageFactory) -> None:
    """Random sequences of writes (arrays of slots, one slot, lockstep slices) and final writes
    read back, after every operation, exactly what a list-of-bytes model holds."""
    _random_operations(make, grow=False)


def check_random_writes_and_growth_match_a_reference(make: StorageFactory) -> None:
    """:func:`check_random_writes_match_a_reference` with the finals growing in between."""
    _random_operations(make, grow=True)


def _random_operations(make: StorageFactory, grow: bool) -> None:
    schema = contract_schema()
    E, C = 3, 4

    @settings(max_examples=20, deadline=None)
    @given(_programs(grow), st.integers(0, 2**32 - 1))
    def run(program: list[tuple[Any, ...]], seed: int) -> None:
        rng = np.random.default_rng(seed)
        s = make(schema, E, C, 2)
        model = _Model(schema, E, C, 2)
        for op in program:
            if op[0] == "rows":
                values = step_values(schema, rng, (len(op[1]),))
                s.write(np.array(op[1], np.int64), values)
                model.write(op[1], values)
            elif op[0] == "one":
                values = step_values(schema, rng, ())
                s.write(op[1], values)
                model.write([op[1]], {n: v[None] for n, v in values.items()})
            elif op[0] == "lockstep":
                values = step_values(schema, rng, (E,))
                s.write(slice(op[1], None, C), values)
                model.write([e * C + op[1] for e in range(E)], values)
            elif op[0] == "finals":
                _, n, rows, pos, by_mask = op
                values = step_values(schema, rng, (n,))
                which = np.isin(np.arange(n), rows) if by_mask else np.array(rows, np.int64)
                s.write_finals(np.array(pos, np.int64), values, which)
                model.write_finals(pos, rows, values)
            else:
                _, F, windows = op
                F2 = 2 * F
                moves = [
                    (e * F + fid % F, e * F2 + fid % F2)
                    for e, (first, size) in enumerate(windows)
                    for fid in range(first, first + size)
                ]
                old = np.array([m[0] for m in moves], np.int64)
                new = np.array([m[1] for m in moves], np.int64)
                s.grow_finals(F2, old, new)
                model.grow(F2, moves)
            assert s.finals_capacity == model.F
            for name, rows in model.steps.items():
                got = s.take(name, np.arange(E * C, dtype=np.int64))
                got = host(s, got, schema.fields[name].dtype)
                assert [r.tobytes() for r in got] == rows, name
            for name, rows in model.finals.items():
                got = s.take_finals(name, np.arange(E * model.F, dtype=np.int64))
                got = host(s, got, schema.fields[name].dtype)
                assert [r.tobytes() for r in got] == rows, name

    run()


def storage_checks() -> list[Callable[[StorageFactory], None]]:
    """Every check of the storage contract."""
    return [
        check_is_a_storage,
        check_fresh_layout,
        check_rows_round_trip_bit_for_bit,
        check_take_returns_fresh_arrays,
        check_env_rings_do_not_overlap,
        check_final_observations_round_trip,
        check_nbytes_matches_the_arrays,
        check_derived_columns,
        check_grow_finals_keeps_contents,
        check_set_finals_capacity_empties_the_finals,
        check_step_columns_never_move,
        check_state_arrays_are_live_views,
        check_state_dict_round_trips,
        check_load_state_dict_refuses_malformed_states,
        check_random_writes_match_a_reference,
        check_random_writes_and_growth_match_a_reference,
    ]


def check_storage(make: StorageFactory) -> None:
    """Run every check of the storage contract on storages from ``make``."""
    for check in storage_checks():
        check(make)
