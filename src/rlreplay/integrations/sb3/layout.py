"""How Stable-Baselines3's buffer arguments map onto the core buffer's fields and steps.

SB3 stores, per env and step, ``observations`` of shape ``obs_shape`` (a dict of them for a
``Dict`` space), ``actions`` of shape ``(action_dim,)``, a float32 reward, a done flag and a
timeout flag read from ``infos[i]["TimeLimit.truncated"]``. :class:`Layout` names the core
fields that hold them (``obs``, or ``obs_0, obs_1, ...`` for the keys of a ``Dict`` space, in
the space's order; ``action``) and :meth:`Layout.step` turns one call of SB3's ``add`` into
the arrays of one core step, cast as SB3 casts them (NumPy's assignment rules: float64
actions become float32, observations keep the space's dtype).

Pure functions of arrays: nothing here holds state or touches torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape

import rlreplay as rr

__all__ = ["Layout", "byte_rows", "fresh"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Layout:
    """The core fields of an SB3 observation and action space.

    Attributes:
        keys: The ``Dict`` space's keys in order, or ``None`` for any other space.
        names: The core's observation fields, one per key (``("obs",)`` without keys).
        shapes: SB3's ``obs_shape`` per field (``(1,)`` for ``Discrete``).
        dtypes: The observation space's dtype per field.
        action_dim: SB3's ``action_dim``; actions are stored as ``(action_dim,)``.
        action_dtype: The action space's dtype, float64 stored as float32 (as SB3 does).
    """

    keys: tuple[str, ...] | None
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype[Any], ...]
    action_dim: int
    action_dtype: np.dtype[Any]

    @classmethod
    def of(cls, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> Layout:
        """The layout SB3's ``ReplayBuffer`` / ``DictReplayBuffer`` would use for the spaces.

        Raises:
            NotImplementedError: A space SB3's buffers do not store (SB3's own error).
        """
        shape = get_obs_shape(observation_space)
        action_dtype = np.dtype(SB3ReplayBuffer._maybe_cast_dtype(action_space.dtype))
        if isinstance(observation_space, spaces.Dict):
            assert isinstance(shape, dict)  # get_obs_shape of a Dict space
            keys = tuple(observation_space.spaces)
            return cls(
                keys=keys,
                names=tuple(f"obs_{i}" for i in range(len(keys))),
                shapes=tuple(tuple(shape[k]) for k in keys),
                dtypes=tuple(np.dtype(observation_space.spaces[k].dtype) for k in keys),
                action_dim=get_action_dim(action_space),
                action_dtype=action_dtype,
            )
        assert isinstance(shape, tuple)
        return cls(
            keys=None,
            names=("obs",),
            shapes=(tuple(shape),),
            dtypes=(np.dtype(observation_space.dtype),),
            action_dim=get_action_dim(action_space),
            action_dtype=action_dtype,
        )

    def fields(self) -> dict[str, rr.Field]:
        """The core buffer's fields: one observation field per name, and ``action``."""
        out = {
            name: rr.Field(shape, dtype, observation=True)
            for name, shape, dtype in zip(self.names, self.shapes, self.dtypes, strict=True)
        }
        out["action"] = rr.Field((self.action_dim,), self.action_dtype)
        return out

    def observations(self, obs: Array | Mapping[str, Array], n_envs: int) -> dict[str, Array]:
        """Field name -> a fresh ``(n_envs, *shape)`` array of the field's dtype.

        Fresh: the buffer keeps some of them, and SB3 expects a buffer to copy what it is
        given ("avoid modification by reference").
        """
        if self.keys is None:
            if isinstance(obs, Mapping):
                raise TypeError("observations: expected an array for a non-Dict space, got a dict")
            values: Sequence[Any] = (obs,)
        else:
            if not isinstance(obs, Mapping):
                raise TypeError(
                    f"observations: expected a dict with keys {list(self.keys)} for a Dict "
                    f"space, got {type(obs).__name__}"
                )
            values = [obs[k] for k in self.keys]
        out = {}
        for name, v, shape, dtype in zip(self.names, values, self.shapes, self.dtypes, strict=True):
            out[name] = fresh(v, dtype, (n_envs, *shape))
        return out

    def step(
        self,
        obs: Array | Mapping[str, Array],
        next_obs: Array | Mapping[str, Array],
        action: Array,
        reward: Array,
        done: Array,
        infos: Sequence[Mapping[str, Any]],
        *,
        n_envs: int,
        handle_timeout_termination: bool,
    ) -> dict[str, Array]:
        """One SB3 ``add`` call as the arguments of one core ``add`` (leading axis ``n_envs``).

        ``done`` with ``infos[i]["TimeLimit.truncated"]`` is a truncation (the target
        bootstraps from ``next_obs``) when ``handle_timeout_termination``; any other ``done``
        is a termination, as SB3's ``dones * (1 - timeouts)``.
        """
        values = self.observations(obs, n_envs)
        for name, arr in self.observations(next_obs, n_envs).items():
            values[f"next_{name}"] = arr
        values["action"] = fresh(action, self.action_dtype, (n_envs, self.action_dim))
        values["reward"] = fresh(reward, np.float32, (n_envs,))
        ended = fresh(done, bool, (n_envs,))
        # (infos are read only at a done; count_nonzero: a fifth of ndarray.any's cost)
        if handle_timeout_termination and np.count_nonzero(ended):
            timeout = np.fromiter(
                (bool(info.get("TimeLimit.truncated", False)) for info in infos), bool, n_envs
            )
            values["terminated"] = ended & ~timeout
            values["truncated"] = ended & timeout
        else:
            values["terminated"] = ended
            values["truncated"] = np.zeros(n_envs, bool)
        return values


def fresh(value: Any, dtype: Any, shape: tuple[int, ...]) -> Array:
    """A new array of ``value`` cast to ``dtype`` (NumPy's assignment casts, as SB3's stores
    do) and reshaped to ``shape`` (an error if the sizes differ)."""
    arr = np.array(value, dtype)
    return arr if arr.shape == shape else arr.reshape(shape)


def byte_rows(arr: Array) -> Array:
    """``(n, nbytes)`` uint8 view of an ``(n, ...)`` array: rows compare bit for bit (NaN
    equals the same NaN, as a copied observation does)."""
    contiguous = np.ascontiguousarray(arr)
    return contiguous.view(np.uint8).reshape(contiguous.shape[0], -1)
