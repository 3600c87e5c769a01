"""The shape of a buffer's rings and windows, checked once from the constructor's arguments.

:class:`Geometry` is what every part of a buffer agrees on: ``capacity`` over ``num_envs``
rings, the ``n_step`` window and its ``gamma``, ``frame_stack`` frames padded by
``stack_pad``, the ``next_fields`` read at the window's end, and the generator's ``seed``.
:meth:`Geometry.checked` refuses any argument that cannot build a buffer (naming it, the
expected and the received value) before anything is allocated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.buffer.budget import check_capacity
from rlreplay.errors import ConfigError
from rlreplay.spec.schema import Schema, positive_int

__all__ = ["Geometry"]


@dataclass(frozen=True, slots=True)
class Geometry:
    """A buffer's checked configuration of rings and windows (see the module docstring)."""

    capacity: int
    num_envs: int
    n_step: int
    gamma: float
    frame_stack: int
    stack_pad: str
    next_fields: tuple[str, ...]
    seed: int | None

    @property
    def env_capacity(self) -> int:
        """Steps each env's ring keeps."""
        return self.capacity // self.num_envs

    @classmethod
    def checked(
        cls,
        schema: Schema,
        *,
        capacity: Any,
        num_envs: Any,
        n_step: Any,
        gamma: Any,
        frame_stack: Any,
        stack_pad: Any,
        next_fields: Sequence[str],
        seed: Any,
        budget: bool = True,
    ) -> Geometry:
        """The geometry of these constructor arguments, or :class:`ConfigError` naming the
        first one that is refused (with ``budget``, the capacity against the host's size
        budget too: not for a buffer that lives elsewhere, such as :mod:`rlreplay.jax`'s)."""
        num_envs = positive_int("num_envs", num_envs)
        n_step = positive_int("n_step", n_step)
        frame_stack = positive_int("frame_stack", frame_stack)
        capacity = positive_int("capacity", capacity)
        if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.number):
            raise ConfigError(f"gamma: expected a number in [0, 1], got {gamma!r}")
        gamma = float(gamma)
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma: expected a value in [0, 1], got {gamma}")
        if budget:
            check_capacity(capacity, schema.fields)  # before anything is allocated
        if capacity < num_envs * (n_step + frame_stack):
            raise ConfigError(
                f"capacity: expected at least num_envs * (n_step + frame_stack) = "
                f"{num_envs} * ({n_step} + {frame_stack}) = {num_envs * (n_step + frame_stack)}"
                f", got {capacity}"
            )
        if frame_stack > 1 and "obs" not in schema:
            raise ConfigError("frame_stack: stacking applies to the 'obs' field; declare 'obs'")
        next_fields = tuple(next_fields)
        for name in next_fields:
            f = schema.fields.get(name)
            if f is None or f.observation:
                raise ConfigError(
                    f"next_fields: {name!r} is not a declared non-observation field (observation "
                    f"fields always have next_<name>); declared: {list(schema.fields)}"
                )
        if stack_pad not in ("zero", "first"):
            raise ConfigError(f"stack_pad: expected 'zero' or 'first', got {stack_pad!r}")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
        ):
            raise ConfigError(f"seed: expected a non-negative int or None, got {seed!r}")
        seed = None if seed is None else int(seed)
        return cls(capacity, num_envs, n_step, gamma, frame_stack, stack_pad, next_fields, seed)
