"""The write side of a device buffer: ``add`` of one step of every env or of some of them, and
``abandon_episode``.

:class:`Writes` checks a step's values on the host (names, shapes, ``same_kind`` casts; a
device tensor's values are never read), moves them to the device once, advances the episode
bookkeeping (:class:`~rlreplay.torch.ring.Ring`), writes the columns and, with a rate limiter
(:class:`~rlreplay.torch.pacing.DevicePacing`), asks it for the step's inserts first: every
value is checked before anything is granted or changed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.errors import DTypeError, FieldError, InvalidIdError, ShapeError
from rlreplay.spec import Field
from rlreplay.spec.schema import narrowed_cast
from rlreplay.storage.torch import TorchStorage, _host_array, numpy_dtype, torch_dtype
from rlreplay.torch.config import DeviceConfig, host_env_ids
from rlreplay.torch.holes import ABANDONED, Holes
from rlreplay.torch.pacing import DevicePacing
from rlreplay.torch.prioritized import Priorities
from rlreplay.torch.ring import Ring

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["Writes", "numpy_dtypes"]

Array = np.ndarray[Any, Any]


@functools.cache
def numpy_dtypes() -> dict[torch.dtype, np.dtype[Any]]:
    """NumPy dtype of each torch dtype that has one (built once, when the first buffer is
    made: an input's dtype is then looked up, not computed from an empty tensor)."""
    import torch

    names = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
             "float16", "float32", "float64", "complex64", "complex128")  # fmt: skip
    return {getattr(torch, n): numpy_dtype(getattr(torch, n)) for n in names}


class Writes:
    """Stores steps in a device buffer's parts (see the module docstring)."""

    def __init__(
        self, config: DeviceConfig, storage: TorchStorage, ring: Ring,
        prio: Priorities | None, pacing: DevicePacing | None,
    ) -> None:  # fmt: skip
        self.config = config
        self.storage = storage
        self.ring = ring
        self.prio = prio
        self.pacing = pacing
        self.device = storage.device
        self.wanted: dict[str, Field] = dict(config.schema.fields)
        self.wanted.update({"next_" + n: config.schema.fields[n] for n in config.observation_names})
        self.stored = {n: torch_dtype(f.dtype) for n, f in self.wanted.items()}
        # (name, dtype, shape, device) of tensors tensor() took as they are for a step of
        # every env: a value with the same signature needs no other check.
        self.seen: set[tuple[Any, ...]] = set()
        numpy_dtypes()

    def add(self, env_ids: Any, timeout: Any, values: dict[str, Any]) -> Tensor:
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.add`."""
        import torch

        c = self.config
        if values.keys() != self.wanted.keys():
            missing = sorted(set(self.wanted) - set(values))
            unknown = sorted(set(values) - set(self.wanted))
            raise FieldError(
                f"add: expected the keys {sorted(self.wanted)}; missing {missing}, unknown "
                f"{unknown}"
            )
        ring, pacing = self.ring, self.pacing
        env, host_env = (None, None) if env_ids is None else self.env_ids(env_ids)
        if env is None and not ring.per_env:
            vals = self.every_env(values)
            if pacing is None:
                return self.store_all(vals)
            return pacing.insert(c.num_envs, timeout, None, lambda: self.store_all(vals))
        if env is None:  # every env, counted per env
            env, host_env = ring.envs, np.arange(c.num_envs)
            vals = self.every_env(values)
        else:
            k = env.shape[0]
            want = (k,)
            vals = {n: self.tensor(n, values[n], want, "len(env_ids)") for n in self.wanted}
        k = env.shape[0]
        if k == 0:  # no env steps (nothing to ask a rate limiter for)
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        if pacing is None:
            return self.store_envs(env, host_env, vals)
        store = lambda: self.store_envs(env, host_env, vals)  # noqa: E731
        return pacing.insert(k, timeout, host_env, store, envs_known=host_env is not None)

    def store_all(self, vals: dict[str, Tensor]) -> Tensor:
        """Store a checked step of every env (lockstep mode); its ids."""
        ring = self.ring
        done = vals["terminated"] | vals["truncated"]
        rows, next_rows = ring.advance(done)
        self.store(rows, next_rows, vals)
        if self.prio is not None:
            self.prio.after_write()
        return ring.envs + (ring.count - 1) * self.config.num_envs

    def store_envs(self, env: Tensor, host_env: Array | None, vals: dict[str, Tensor]) -> Tensor:
        """Store a checked step of the envs ``env`` (per-env mode); its ids."""
        import torch

        done = vals["terminated"] | vals["truncated"]
        rows, next_rows, t, stepping = self.ring.advance_envs(env, done, host_env)
        self.store(rows, next_rows, vals)
        if self.prio is not None:
            self.prio.after_write(stepping)
        return torch.add(env, t, alpha=self.config.num_envs)

    def store(self, rows: Tensor, next_rows: Tensor, vals: dict[str, Tensor]) -> None:
        """Write a step's values to ``rows`` (its next observations to the joint rows
        ``next_rows``: final records where it ends its episode, else spare rows) and settle
        the ring."""
        c, ring, st = self.config, self.ring, self.storage
        st.write_checked(rows, vals)
        for name in c.observation_names:
            st.write_joint_checked(name, next_rows, vals["next_" + name])
        ring.settle(st.steps["terminated"], st.steps["truncated"])

    def every_env(self, values: dict[str, Any]) -> dict[str, Tensor]:
        """A step of every env, each value through :meth:`tensor`, except that a tensor with
        the signature (dtype, shape, device) of one :meth:`tensor` took as it was before
        passes as it is (one set lookup per value)."""
        import torch

        E, seen = self.config.num_envs, self.seen
        out: dict[str, Tensor] = {}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                key = (name, value.dtype, value.shape, value.device)
                if key in seen:
                    out[name] = value
                    continue
                out[name] = checked = self.tensor(name, value, (E,))
                if checked is value:
                    seen.add(key)
            else:
                out[name] = self.tensor(name, value, (E,))
        return out

    def tensor(
        self, name: str, value: Any, want: tuple[int, ...], axis: str = "num_envs"
    ) -> Tensor:
        """One value checked (shape, ``same_kind`` cast) and on the device in its field's
        dtype; a NumPy value is cast on the host and copied once."""
        import torch

        f = self.wanted[name]
        E = self.config.num_envs
        if isinstance(value, torch.Tensor):
            shape = tuple(value.shape)
            dtype = numpy_dtypes().get(value.dtype)
            if dtype is None:
                raise DTypeError(
                    f"{name}: expected values castable to {f.dtype}, got {value.dtype}"
                )
        else:
            value = np.asarray(value)
            shape, dtype = value.shape, value.dtype
        if len(want) == 1 and E == 1 and shape == f.shape:
            shape = (1, *shape)
            value = value.reshape(shape)
        if shape != (*want, *f.shape):
            raise ShapeError(
                f"{name}: expected shape {(*want, *f.shape)} ({axis}, *field shape), got {shape}"
            )
        if not np.can_cast(dtype, f.dtype, casting="same_kind"):
            raise DTypeError(
                f"{name}: expected values castable to {f.dtype} (NumPy's same_kind rule), got "
                f"{dtype}"
            )
        stored = self.stored[name]
        if isinstance(value, torch.Tensor):
            if value.device != self.device:
                value = value.to(self.device, non_blocking=value.device.type == "cpu")
            out: Tensor = value if value.dtype == stored else value.to(stored)
            return out
        narrowed = narrowed_cast(name, value, f.dtype)  # a value beyond the field's range
        if narrowed is not None:  # is an error here, not an inf or a wrapped int
            value = narrowed
        host = torch.from_numpy(_host_array(np.asarray(value, f.dtype.newbyteorder("="))))
        return host.to(self.device, non_blocking=True)

    def env_ids(self, env_ids: Any) -> tuple[Tensor | None, np.ndarray[Any, Any] | None]:
        """``(envs on the device, the same on the host if known)``; ``(None, None)`` for every
        env in order given on the host (a plain add)."""
        import torch

        E = self.config.num_envs
        if isinstance(env_ids, torch.Tensor):
            dt = env_ids.dtype
            if env_ids.dim() != 1 or dt.is_floating_point or dt.is_complex or dt == torch.bool:
                raise InvalidIdError(
                    f"env_ids: expected a 1-D sequence of ints, got {dt} with shape "
                    f"{tuple(env_ids.shape)}"
                )
            if env_ids.device.type == "cpu" and self.device.type != "cpu":
                env_ids = env_ids.numpy()  # host values: checked in full, read without a wait
            else:
                if env_ids.shape[0] > E:
                    raise InvalidIdError(
                        f"env_ids: expected at most num_envs={E} distinct envs, got "
                        f"{env_ids.shape[0]}"
                    )
                t = env_ids.to(self.device, non_blocking=env_ids.device.type == "cpu")
                return t.long(), None
        arr = host_env_ids(E, env_ids)
        if arr.size == E and (arr == np.arange(E)).all():
            return None, None
        return torch.from_numpy(arr.copy()).to(self.device, non_blocking=True), arr

    def abandon(self, env_id: Any) -> Tensor:
        """See :meth:`rlreplay.torch.DeviceReplayBuffer.abandon_episode` (the episode's
        holes: :mod:`rlreplay.torch.holes`)."""
        import torch

        c, ring = self.config, self.ring
        E, C, n = c.num_envs, c.env_capacity, c.n_step
        if not isinstance(env_id, int | np.integer) or isinstance(env_id, bool | np.timedelta64):
            raise InvalidIdError(f"env_id: expected an int in [0, {E}), got {env_id!r}")
        e = int(host_env_ids(E, [int(env_id)], "env_id")[0])
        counts = ring.env_counts()
        t = int(counts[e]) - 1
        if t < 0:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        row = e * C + t % C
        host = torch.stack([ring.next_start[e], ring.head[e], ring.ep_start[row]]).cpu().numpy()
        next_start, head, start = (int(v) for v in host)
        if next_start == t + 1:  # the newest step ends its episode: nothing runs
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        ring.next_start[e] = t + 1  # (last_end = t)
        ring.hi[e] = t + 1  # max(last_end + 1, count - n_step), as the core recomputes it
        if t >= head:  # still stored: mark it, and its hole
            ring.final_fid[row] = ABANDONED
            if ring.holes is None:
                ring.holes = Holes(E, C, self.device)
            ring.holes.add(e, max(t - n + 1, start), t)
            ring.prune_holes(counts - C)  # (a lower bound of every env's head)
        st = self.storage
        ring.settle(st.steps["terminated"], st.steps["truncated"])
        if self.prio is not None:
            self.prio.rebuild()
        return torch.tensor([t * E + e], dtype=torch.int64, device=self.device)
