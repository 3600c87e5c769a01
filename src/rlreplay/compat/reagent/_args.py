"""Checks of the ReAgent buffer's user arguments (private to the ReAgent front-end).

Constructor options, gym spaces and the values of one ``add`` are validated here, before the
buffer changes: a bad option raises :class:`rlreplay.ConfigError`, a bad ``add`` a
:class:`rlreplay.ShapeError`, :class:`rlreplay.FieldError` or (from the core's schema)
:class:`rlreplay.DTypeError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.compat.reagent._assembly import EXTRA
from rlreplay.errors import ConfigError, FieldError, ShapeError

if TYPE_CHECKING:
    from rlreplay.compat.reagent.circular_replay_buffer import shape_type
    from rlreplay.spec import Schema

__all__ = [
    "as_shape",
    "convert_step",
    "extras",
    "parse_add_args",
    "positive_int",
    "seed",
    "space_shape_dtype",
]

Array = np.ndarray[Any, Any]
Element = tuple[str, tuple[int, ...], np.dtype[Any]]


# ---------------------------------------------------------------------- constructor options
def positive_int(name: str, value: Any) -> int:
    """``value`` as an int ``>= 1`` (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name}: expected a positive int, got {value!r}")
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


def extras(extra: Sequence[Any] | None, reserved: set[str]) -> list[Element]:
    """The ``(name, shape, dtype)`` of each extra storage element, checked in order.

    A name must be an identifier, not start with ``next_``, and be neither reserved nor
    repeated.
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
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("next_"):
            raise ConfigError(f"extra_storage_types: {name!r} is not a usable element name")
        if name in reserved or name in seen:
            raise ConfigError(f"extra_storage_types: the name {name!r} is taken")
        seen.add(name)
        out.append((name, as_shape(f"extra_storage_types[{name}]", shape), np.dtype(dtype)))
    return out


def seed(value: int | None) -> int:
    """The sampler's seed: ``value``, or for ``None`` one drawn from NumPy's global state."""
    if value is None:
        # Draw the seed from NumPy's global state: np.random.seed() then repeats samples,
        # as ReAgent users expect from seeding their process.
        value = int(np.random.randint(0, 2**31 - 1))  # noqa: NPY002
    elif isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ConfigError(f"seed: expected a non-negative int or None, got {value!r}")
    return int(value)


def space_shape_dtype(name: str, space: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Shape and dtype of a gym ``Box`` or ``Discrete`` space (``Discrete``: a scalar)."""
    kind = type(space).__name__
    if kind == "Discrete":
        return (), np.dtype(space.dtype)
    if kind == "Box":
        return tuple(space.shape), np.dtype(space.dtype)
    raise ConfigError(f"{name}: {kind} not supported; expected a Box or Discrete space")


# ---------------------------------------------------------------------- add
def parse_add_args(
    signature: Sequence[shape_type], given: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[Any]:
    """The add arguments in signature order, with ReAgent's count and shape checks."""
    if len(given) + len(kwargs) != len(signature):
        raise ShapeError(
            f"Add expects {len(signature)} elements ({[e.name for e in signature]}), "
            f"received {len(given) + len(kwargs)}"
        )
    values = list(given)
    for element in signature[len(given) :]:
        if element.name not in kwargs:
            raise FieldError(f"add: missing {element.name!r}; given by name: {sorted(kwargs)}")
        values.append(kwargs[element.name])
    for value, element in zip(values, signature, strict=True):
        if element.name == "priority" and value is None:
            continue
        shape = np.shape(value)
        if shape != tuple(element.shape):
            raise ShapeError(
                f"{element.name}: arg has shape {shape}, expected {tuple(element.shape)}"
            )
    return values


def convert_step(
    schema: Schema, extra_types: Sequence[shape_type], blank_obs: Array, values: Sequence[Any]
) -> dict[str, Any]:
    """Core keyword arguments for one step, converted (and so validated) by its schema."""
    obs, action, reward, terminal = values[:4]
    done = bool(np.asarray(terminal).item())
    step: dict[str, Any] = {
        "obs": obs,
        "action": action,
        "reward": reward,
        "terminated": done,
        "truncated": False,
    }
    for element, value in zip(extra_types, values[4:], strict=False):
        step[EXTRA + element.name] = value
    if done:
        # ReAgent has no next observation: a terminal's next_state is undefined there. The
        # core needs a final observation, so it gets this zero placeholder.
        step["next_obs"] = blank_obs
    return {name: schema.convert(name, v, ()) for name, v in step.items()}
