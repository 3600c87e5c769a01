"""The stored and returned elements of the ReAgent buffer (private to the ReAgent front-end).

ReAgent has two constructors. The documented one declares every element up front
(``observation_shape`` and the other shapes and dtypes, ``extra_storage_types``); the later
one declares none and infers them from the first ``add``: the keys ``observation``, ``action``,
``reward``, ``terminal`` and any others (the extras), each with the shape and dtype of its
first value (float64 read as float32), and from then on asserts that every value has them.
:func:`declare` records what the constructor was given, :func:`infer` completes it from the
first add, and :func:`setup` fixes the elements and builds the core. :func:`transition_specs`
is the element list of a sampled batch.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlreplay.compat.reagent import _args
from rlreplay.compat.reagent._state import BufferState, Declared, ReplayElement, shape_type
from rlreplay.spec import check_rows

_namedtuple: Any = collections.namedtuple  # element names are known only at run time

__all__ = [
    "BASE_NAMES",
    "Declared",
    "declare",
    "declared_elements",
    "from_files",
    "infer",
    "setup",
    "transition_specs",
]

BASE_NAMES = ("observation", "action", "reward", "terminal")

#: ReAgent's defaults for the declared constructor.
_DEFAULTS: dict[str, Any] = {
    "observation_dtype": np.uint8,
    "action_shape": (),
    "action_dtype": np.int32,
    "reward_shape": (),
    "reward_dtype": np.float32,
}


def declare(
    observation_shape: Any,
    extra: Sequence[Any] | None,
    reserved: set[str],
    **given: Any,
) -> Declared:
    """The declared elements; with ``observation_shape`` given, ReAgent's defaults fill in.

    Raises:
        AssertionError: ``observation_shape`` is neither a tuple nor an int (also
            :class:`rlreplay.ConfigError`).
    """
    inferring = observation_shape is None
    terminal_dtype = given.pop("terminal_dtype", None)
    if not inferring:
        observation_shape = _args.observation_shape(observation_shape)
        given = {k: _DEFAULTS[k] if v is None else v for k, v in given.items()}
    shapes: dict[str, tuple[int, ...] | None] = {
        "observation": observation_shape,
        "terminal": None if inferring else (),
    }
    if terminal_dtype is None and not inferring:
        terminal_dtype = np.uint8
    dtypes: dict[str, np.dtype[Any] | None] = {
        "terminal": None if terminal_dtype is None else np.dtype(terminal_dtype)
    }
    for name in ("action", "reward"):
        shape = given[name + "_shape"]
        shapes[name] = None if shape is None else _args.as_shape(name + "_shape", shape)
    for name in ("observation", "action", "reward"):
        dtype = given[name + "_dtype"]
        dtypes[name] = None if dtype is None else np.dtype(dtype)
    extras = None if inferring and extra is None else _args.extras(extra, reserved)
    return Declared(shapes, dtypes, extras)


def infer(
    buf: BufferState, values: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[tuple[str, tuple[int, ...], np.dtype[Any]]], frozenset[str]]:
    """Elements ``(name, shape, dtype)`` completed from a first add, and those fully inferred.

    ``values`` are the four base values; ``kwargs`` the other keyword arguments (the extras
    when none were declared).
    """
    d = buf._declared
    out = []
    inferred = set()
    for name, value in zip(BASE_NAMES, values, strict=True):
        shape, dtype = d.shapes[name], d.dtypes[name]
        if shape is None or dtype is None:
            _, got_shape, got_dtype = _args.infer_element(name, value)
            if shape is None and dtype is None:
                inferred.add(name)
            shape = got_shape if shape is None else shape
            dtype = got_dtype if dtype is None else dtype
        out.append((name, shape, dtype))
    if d.extras is not None:
        out.extend(d.extras)
    else:
        names = [k for k in kwargs if k != "priority"]
        found = [_args.infer_element(k, kwargs[k]) for k in names]
        out.extend(_args.extras(found, buf._reserved_names()))
        inferred.update(names)
    return out, frozenset(inferred)


def from_files(
    buf: BufferState, found: Sequence[tuple[str, tuple[int, ...], np.dtype[Any]]]
) -> tuple[list[tuple[str, tuple[int, ...], np.dtype[Any]]], frozenset[str]]:
    """Elements of a checkpoint's files (base four first), the declared ones kept as declared."""
    d = buf._declared
    out = []
    inferred = set()
    for name, shape, dtype in found[:4]:
        want_shape, want_dtype = d.shapes[name], d.dtypes[name]
        if want_shape is None and want_dtype is None:
            inferred.add(name)
        out.append((name, shape if want_shape is None else want_shape, want_dtype or dtype))
    if d.extras is not None:
        out.extend(d.extras)
    else:
        found_extras = [e for e in found[4:] if e[0] != "priority"]
        out.extend(_args.extras(found_extras, buf._reserved_names()))
        inferred.update(e[0] for e in found_extras)
    return out, frozenset(inferred)


def declared_elements(d: Declared) -> list[tuple[str, tuple[int, ...], np.dtype[Any]]]:
    """The declared elements, with ``()`` / float32 standing in for what is to be inferred."""
    out = [(n, d.shapes[n] or (), d.dtypes[n] or np.dtype(np.float32)) for n in BASE_NAMES]
    return out + list(d.extras or [])


def setup(
    buf: BufferState,
    elements: Sequence[tuple[str, tuple[int, ...], Any]],
    inferred: frozenset[str],
    *,
    final: bool,
) -> None:
    """Fix the buffer's elements (base four, then extras).

    With ``final`` the elements are the buffer's for good (the core is built from them);
    otherwise they are placeholders until an inferring buffer's first add.
    """
    (_, buf._observation_shape, obs_dtype) = elements[0]
    (_, buf._action_shape, action_dtype) = elements[1]
    (_, buf._reward_shape, reward_dtype) = elements[2]
    buf._observation_dtype = np.dtype(obs_dtype)
    buf._action_dtype = np.dtype(action_dtype)
    buf._reward_dtype = np.dtype(reward_dtype)
    buf._terminal_dtype = np.dtype(elements[3][2])
    buf._extra_storage_types = [ReplayElement(*e) for e in elements[4:]]
    buf._storage_signature = None  # get_storage_signature makes it again from these
    buf._inferred = inferred
    buf._state_shape = (*buf._observation_shape, buf._stack_size)
    buf._blank_obs = np.zeros(buf._observation_shape, buf._observation_dtype)
    names = [e.name for e in buf._transition_specs(buf._batch_size)]
    buf._batch_type = _namedtuple("batch_type" if buf._inferring else "filler", names)
    buf._row_bytes = None  # the elements changed: batch_size_of sums them again
    buf._initialized = final


def transition_specs(buf: BufferState, b: int) -> list[shape_type]:
    """ReAgent's transition elements with nominal shapes, for batch size ``b``.

    In order: ``state``, ``action``, ``reward``, ``next_state``, ``next_action``,
    ``next_reward``, ``terminal``, ``indices``, ``step``, then ``<x>``, ``next_<x>`` per extra.
    States end in a ``stack_size`` axis; every other element is declared unstacked, with
    ``return_everything_as_stack`` too, as ReAgent declares it. ``terminal`` has
    the stored dtype (uint8) and ``indices`` int32, as ReAgent declares them.
    """
    # ReAgent declares every element but the states unstacked, return_everything_as_stack
    # or not (its batches then carry a stack axis that the signature does not show).
    a = (b, *buf._action_shape)
    r = (b, *buf._reward_shape)
    elements = [
        ReplayElement("state", (b, *buf._state_shape), buf._observation_dtype),
        ReplayElement("action", a, buf._action_dtype),
        ReplayElement("reward", r, buf._reward_dtype),
        ReplayElement("next_state", (b, *buf._state_shape), buf._observation_dtype),
        ReplayElement("next_action", a, buf._action_dtype),
        ReplayElement("next_reward", r, buf._reward_dtype),
        ReplayElement("terminal", (b,), buf._terminal_dtype),
        ReplayElement("indices", (b,), np.dtype(np.int32)),
        ReplayElement("step", (b,), np.dtype(np.int64)),
    ]
    for e in buf._extra_storage_types:
        for prefix in ("", "next_"):
            elements.append(ReplayElement(prefix + e.name, (b, *e.shape), e.type))
    return elements


def batch_size_of(buf: BufferState, value: Any, what: str) -> int:
    """A batch size (an int ``>= 0``, as :func:`_args.positive_int` takes it) whose batch fits
    the size budget (:func:`rlreplay.spec.check_rows`), checked before anything is drawn.

    A row's bytes are those of one transition's elements (:func:`transition_specs`), times
    ``stack_size`` when everything is returned as stacks, plus the draw's own 64 (a buffer
    that has not inferred its shapes yet holds nothing to draw). Above the budget: a
    :class:`rlreplay.ConfigError` (a ``ValueError``, as NumPy's refusal of such a size).
    """
    b = _args.positive_int("batch_size", value, 0)
    row = getattr(buf, "_row_bytes", None)  # (summed once per set of elements)
    if row is None:
        row = 64
        try:  # (shapes still unknown before an inferring buffer's first add)
            specs = transition_specs(buf, 1)
        except (AttributeError, TypeError):
            specs = []
        for e in specs:  # Python ints: exact
            row += math.prod(int(d) for d in e.shape[1:]) * np.dtype(e.type).itemsize
        if buf._return_everything_as_stack:
            row *= max(1, buf._stack_size)
        if specs:
            buf._row_bytes = row
    check_rows("batch_size", b, b, row, what)
    return b
