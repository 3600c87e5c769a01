"""What :meth:`~rlreplay.jax.JaxBuffer.add` takes: one step of every env, checked by name,
shape and dtype kind when tracing, and cast to the stored dtypes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlreplay.errors import DTypeError, FieldError, ShapeError
from rlreplay.jax._lib import jnp
from rlreplay.jax.config import BufferConfig
from rlreplay.spec import Field

__all__ = ["checked_step"]


def checked_step(c: BufferConfig, step: Mapping[str, Any]) -> dict[str, Any]:
    """The step's values checked by name, shape and dtype kind (when tracing), cast for
    storage."""
    if not isinstance(step, Mapping):
        raise FieldError(f"step: expected a mapping of field name -> array, got {step!r}")
    wanted: dict[str, Field] = dict(c.schema.fields)
    wanted.update({"next_" + n: c.schema.fields[n] for n in c.observation_names})
    missing = sorted(set(wanted) - set(step))
    unknown = sorted(set(step) - set(wanted))
    if missing or unknown:
        raise FieldError(
            f"step: expected the keys {sorted(wanted)}; missing {missing}, unknown {unknown}"
        )
    out = {}
    for name, f in wanted.items():
        value = jnp.asarray(step[name])
        if c.num_envs == 1 and value.shape == f.shape:
            value = value[None]
        if value.shape != (c.num_envs, *f.shape):
            raise ShapeError(
                f"step[{name!r}]: expected shape {(c.num_envs, *f.shape)} (num_envs, "
                f"*field shape), got {value.shape}"
            )
        dtype = c.stored[name[len("next_") :] if name not in c.stored else name]
        if not np.can_cast(value.dtype, dtype, casting="same_kind"):
            raise DTypeError(
                f"step[{name!r}]: expected values castable to {dtype} (NumPy's same_kind "
                f"rule), got {value.dtype}"
            )
        out[name] = value.astype(dtype)
    return out
