"""Checks of the ReAgent buffer's user arguments (private to the ReAgent front-end).

Constructor options, gym spaces and the values of one ``add`` are checked here, before the
buffer changes, as ReAgent checks them: a bad option raises :class:`rlreplay.ConfigError` (a
``ValueError``, or also an ``AssertionError`` where ReAgent asserts), a bad ``add`` a
:class:`rlreplay.ShapeError` or :class:`rlreplay.FieldError`. Values are cast as NumPy
assignment into ReAgent's arrays casts them (:func:`cast`), never refused for their dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay import ConfigError, FieldError, ShapeError
from rlreplay.compat.reagent._assembly import EXTRA
from rlreplay.compat.reagent._errors import (
    ConfigAssertionError,
    ConfigTypeError,
    ElementAssertionError,
)
from rlreplay.compat.reagent._state import shape_type

if TYPE_CHECKING:
    from rlreplay.spec import Schema

__all__ = [
    "as_shape",
    "cast",
    "check_inferred",
    "convert_step",
    "env_elements",
    "extras",
    "infer_element",
    "inferred_dtype",
    "observation_shape",
    "parse_add_args",
    "reagent_shape",
    "positive_int",
    "seed",
    "space_shape_dtype",
]

Array = np.ndarray[Any, Any]
Element = tuple[str, tuple[int, ...], np.dtype[Any]]


# ---------------------------------------------------------------------- constructor options
def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum`` (bools refused).

    Raises:
        TypeError: Not an int, as ReAgent's arrays and ``range`` refuse a float size
            (:class:`ConfigTypeError`, also a :class:`rlreplay.ConfigError`).
        ValueError: Below ``minimum`` (:class:`rlreplay.ConfigError`).
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigTypeError(f"{name}: expected an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


def as_shape(name: str, value: Any) -> tuple[int, ...]:
    """``value`` as a shape: a tuple of non-negative ints."""
    try:
        shape = tuple(int(s) for s in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected a tuple of ints, got {value!r}") from None
    if any(s < 0 for s in shape):
        raise ConfigError(f"{name}: expected non-negative sizes, got {shape}")
    return shape


def observation_shape(value: Any) -> tuple[int, ...]:
    """ReAgent's ``assert isinstance(observation_shape, tuple)``, then :func:`as_shape`.

    An int ``n`` (later ReAgent versions take one) is the shape ``(n,)``; a bool is not.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = (int(value),)
    if not isinstance(value, tuple):
        raise ConfigAssertionError(
            "observation_shape: expected a tuple or an int (ReAgent asserts a tuple), "
            f"got {value!r}"
        )
    return as_shape("observation_shape", value)


def extras(extra: Sequence[Any] | None, reserved: set[str]) -> list[Element]:
    """The ``(name, shape, dtype)`` of each extra storage element, checked in order.

    A name must be an identifier (a field of the batch namedtuple) and give no batch element
    twice (``x`` and ``next_x`` together, a reserved name, a repeat).
    """
    out: list[Element] = []
    seen: set[str] = set()
    for e in extra or []:
        try:
            name, shape, dtype = e
        except (TypeError, ValueError):
            raise ConfigError(
                f"extra_storage_types: expected ReplayElement(name, shape, type), got {e!r}"
            ) from None
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"extra_storage_types: {name!r} is not a usable element name")
        if name in reserved or name in seen or f"next_{name}" in seen | reserved:
            raise ConfigError(f"extra_storage_types: the name {name!r} is taken")
        if name.startswith("next_") and name[5:] in seen:
            # Its batch element would be the next_<x> of extra <x>: ReAgent's namedtuple of
            # elements refuses the duplicate name with a ValueError too.
            raise ConfigError(f"extra_storage_types: the name {name!r} is taken")
        seen.add(name)
        out.append((name, as_shape(f"extra_storage_types[{name}]", shape), np.dtype(dtype)))
    return out


def seed(value: int | None) -> int | None:
    """The sampler's seed: ``value`` checked (``None``: draw as reagent 0.1, see ``_draws``)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0
    ):
        raise ConfigError(f"seed: expected a non-negative int or None, got {value!r}")
    return None if value is None else int(value)


def space_shape_dtype(name: str, space: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Shape and dtype of a gym ``Box`` or ``Discrete`` space (``Discrete``: a scalar)."""
    kind = type(space).__name__
    if kind == "Discrete":
        return (), np.dtype(space.dtype)
    if kind == "Box":
        return tuple(space.shape), np.dtype(space.dtype)
    raise ConfigError(f"{name}: {kind} not supported; expected a Box or Discrete space")


def env_elements(env: Any) -> dict[str, Any]:
    """Constructor arguments for an env's observation and action spaces (float32 rewards)."""
    obs_shape, obs_dtype = space_shape_dtype("observation_space", env.observation_space)
    action_shape, action_dtype = space_shape_dtype("action_space", env.action_space)
    return {
        "observation_shape": obs_shape,
        "observation_dtype": obs_dtype,
        "action_shape": action_shape,
        "action_dtype": action_dtype,
        "reward_shape": (),
        "reward_dtype": np.float32,
    }


# ---------------------------------------------------------------------- add
def reagent_shape(value: Any) -> tuple[int, ...]:
    """The shape ReAgent's ``_check_add_types`` sees: arrays and lists have one, else ``()``."""
    if isinstance(value, np.ndarray):
        return tuple(value.shape)
    if isinstance(value, tuple | list):
        return tuple(np.array(value).shape)
    return ()  # ReAgent: "Assume it is scalar."


def parse_add_args(
    signature: Sequence[shape_type],
    given: tuple[Any, ...],
    kwargs: dict[str, Any],
    inferred: frozenset[str] = frozenset(),
) -> list[Any]:
    """The add arguments in signature order, with ReAgent's count and shape checks.

    A declared element (its shape given to the constructor) is checked as ReAgent's
    ``_check_add_types`` checks it (``ValueError`` on a shape mismatch: arrays, lists and tuples
    have a shape, anything else, a tensor too, counts as a scalar). An element
    named in ``inferred`` is checked as ReAgent's later ``DenseMetadata.validate`` checks it:
    same shape and dtype as at the first add, else ``AssertionError``.
    """
    if len(given) + len(kwargs) != len(signature):
        raise ShapeError(
            f"Add expects {len(signature)} elements ({[e.name for e in signature]}), "
            f"received {len(given) + len(kwargs)}"
        )
    # ReAgent checks the positional values first, then looks each other element up by name
    # (a missing one raises KeyError there).
    values = list(given)
    for i, element in enumerate(signature):
        if i >= len(given):
            if element.name not in kwargs:
                raise FieldError(f"add: missing {element.name!r}; given by name: {sorted(kwargs)}")
            values.append(kwargs[element.name])
        _check_value(values[i], element, inferred)
    return values


def _check_value(value: Any, element: shape_type, inferred: frozenset[str]) -> None:
    if element.name == "priority" and value is None:
        return
    expected = tuple(element.shape)
    if element.name in inferred:
        check_inferred(element.name, value, expected, np.dtype(element.type))
    elif reagent_shape(value) != expected:
        got = reagent_shape(value)
        raise ShapeError(f"arg {element.name} has shape {got}, expected {expected}")


def cast(value: Any, shape: tuple[int, ...], dtype: Any) -> Array:
    """``value`` stored as ReAgent stores it: ``row[...] = value`` into a ``dtype`` row.

    This is NumPy's assignment, with its unsafe casting (float64 zeros into uint8, 1.7 into
    an int32 action as 1), so the core gets exactly what ReAgent's arrays would hold.
    """
    row = np.empty((1, *shape), dtype)
    row[0] = value
    out: Array = row[0, ...]
    return out


# ---------------------------------------------------------------------- inferred elements
def inferred_dtype(value: Any) -> np.dtype[Any]:
    """The dtype ReAgent's later buffer infers: the array's, float64 read as float32."""
    dtype = np.array(value).dtype
    return np.dtype(np.float32) if dtype == np.float64 else dtype


def infer_element(name: str, value: Any) -> Element:
    """``(name, shape, dtype)`` of an element first added as ``value`` (ReAgent's later API)."""
    _refuse_unsupported(name, value)
    arr = np.array(value)
    if arr.dtype.kind not in "biufc":
        raise ElementAssertionError(f"{name}: cannot store {type(value).__name__} {value!r}")
    return name, tuple(arr.shape), inferred_dtype(arr)


def check_inferred(name: str, value: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
    """ReAgent's ``DenseMetadata.validate``: the shape and dtype of the first add, or assert."""
    _refuse_unsupported(name, value)
    got_shape, got_dtype = np.shape(value), inferred_dtype(value)
    if got_shape != shape or got_dtype != dtype:
        raise ElementAssertionError(
            f"{name}: Expected {shape} {dtype}, got {got_shape} {got_dtype}"
        )


def _refuse_unsupported(name: str, value: Any) -> None:
    if isinstance(value, dict):
        raise ElementAssertionError(
            f"{name}: sparse (dict) features are not supported by rlreplay; got {value!r}"
        )
    if hasattr(value, "detach"):
        # ReAgent: assert not isinstance(input, (dict, torch.Tensor))
        raise ElementAssertionError(f"{name}: {type(value)} is dict or torch.Tensor")


def convert_step(
    schema: Schema,
    signature: Sequence[shape_type],
    extra_types: Sequence[shape_type],
    blank_obs: Array,
    values: Sequence[Any],
) -> dict[str, Any]:
    """Core keyword arguments for one step, cast as ReAgent's arrays cast them.

    Every value is first stored as ReAgent stores it (:func:`cast`), so the core's schema
    receives exact dtypes and shapes and never refuses a cast ReAgent makes.
    """
    stored = [cast(v, tuple(e.shape), e.type) for v, e in zip(values[:4], signature, strict=False)]
    obs, action, reward, terminal = stored
    done = bool(terminal != 0)
    step: dict[str, Any] = {
        "obs": obs,
        "action": action,
        "reward": reward,
        "terminated": done,
        "truncated": False,
    }
    for element, value in zip(extra_types, values[4:], strict=False):
        step[EXTRA + element.name] = cast(value, tuple(element.shape), element.type)
    if done:
        # ReAgent has no next observation: a terminal's next_state is undefined there. The
        # core needs a final observation, so it gets this zero placeholder.
        step["next_obs"] = blank_obs
    return {name: schema.convert(name, v, ()) for name, v in step.items()}
