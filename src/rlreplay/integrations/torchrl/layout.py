"""How TorchRL's transition TensorDicts map onto the core buffer's fields, and back.

A TorchRL collector yields TensorDicts of transitions with batch dims ``[T]`` (one env) or
``[E, T]`` (a batched env; time last), holding the state's entries at the root and the
step's outcome under ``"next"``::

    observation, action, ..., done, terminated, truncated        # at time t
    ("next", "observation"), ("next", "reward"), ("next", "done"), ...   # after the step

:class:`Layout` sorts the leaves of the first TensorDict a buffer sees into:

* observations -- entries at the root *and* under ``"next"`` (``observation``,
  ``pixels``, ``step_count``, ...): core observation fields, stored once per step (the core
  takes the next one from the following step, or keeps the final one at an episode's end);
* step entries -- entries at the root only (``action``, ``action_value``,
  ``("collector", "traj_ids")``, ...) and the root's done flags: plain core fields;
* next-only entries -- entries under ``"next"`` only, other than the reward and done flags:
  plain core fields, handed back under ``"next"`` at the step's own time;
* ``("next", "reward")``, ``("next", "terminated")``, ``("next", "truncated")``: the core's
  ``reward``, ``terminated`` and ``truncated`` (``("next", "done")`` is their union).

Core fields are named ``o0, o1, ...`` (observations), ``s0, ...`` (step entries) and
``n0, ...`` (next-only entries) in the order of the TensorDict's keys, so no TorchRL key can
collide with the core's own names.

Pure functions of tensors and arrays: nothing here holds state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import rlreplay as rr

if TYPE_CHECKING:
    # Imported where used: importing tensordict sets an environment variable and writes a
    # cache directory (torch's compiler's), which importing rlreplay must not do.
    from tensordict import TensorDict, TensorDictBase

__all__ = ["Entry", "Layout", "breaks", "byte_rows", "to_numpy"]

Array = np.ndarray[Any, Any]
Key = tuple[str, ...]

#: The done flags of a TorchRL env (``done`` is ``terminated | truncated``).
DONE_KEYS = ("done", "terminated", "truncated")
#: Root entries a replay buffer writes into the TensorDicts it samples or extends with: never
#: stored.
METADATA_KEYS = ("index", "priority_weight", "steps_to_next_obs")


@dataclass(frozen=True)
class Entry:
    """One TensorDict leaf stored in one core field.

    Attributes:
        key: The leaf's key, relative to the root (or to ``"next"`` for next-only entries).
        name: The core field's name.
        shape: The leaf's shape past the batch dims.
        dtype: The leaf's torch dtype (the core field holds its NumPy counterpart).
    """

    key: Key
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def np_dtype(self) -> np.dtype[Any]:
        """The NumPy dtype the core stores the entry as."""
        dtype: np.dtype[Any] = to_numpy(torch.empty(0, dtype=self.dtype)).dtype
        return dtype


def to_numpy(tensor: torch.Tensor) -> Array:
    """A NumPy view (or host copy) of ``tensor``.

    Raises:
        TypeError: A dtype NumPy has no counterpart for (``bfloat16``, ...).
    """
    try:
        return tensor.detach().cpu().numpy()
    except TypeError as exc:
        raise TypeError(
            f"rlreplay.integrations.torchrl: expected tensors of a dtype NumPy can hold, got "
            f"{tensor.dtype} ({exc}); cast the entry (e.g. with a torchrl DTypeCastTransform) "
            "before extending"
        ) from exc


def _leaves(td: TensorDictBase) -> list[Key]:
    keys = td.keys(include_nested=True, leaves_only=True)
    return [(k,) if isinstance(k, str) else tuple(k) for k in keys]


@dataclass(frozen=True)
class Layout:
    """Which TensorDict leaves go to which core fields (see the module's docstring).

    Attributes:
        obs: Observation entries (keys relative to the root; also found under ``"next"``).
        step: Step entries (keys relative to the root).
        next_only: Next-only entries (keys relative to ``"next"``).
        reward: ``("next", "reward")``'s per-step shape and dtype (one number per step).
        flags: The done keys found under ``"next"``, each with its per-step shape.
        batch_dims: 1 (``[T]``) or 2 (``[E, T]``).
    """

    obs: tuple[Entry, ...]
    step: tuple[Entry, ...]
    next_only: tuple[Entry, ...]
    reward: tuple[tuple[int, ...], torch.dtype]
    flags: tuple[tuple[str, tuple[int, ...]], ...]
    batch_dims: int

    @classmethod
    def of(cls, td: TensorDictBase, *, ignore: Iterable[str] = ()) -> Layout:
        """The layout of a collector's TensorDict ``td`` (batch dims ``[T]`` or ``[E, T]``).

        Args:
            td: Transitions, with ``("next", "reward")`` and ``("next", "done")``.
            ignore: More root keys never stored (the priority key, say).

        Raises:
            ValueError: No ``"next"`` entry, no reward or done flag under it, a reward or flag
                of more than one number per step, no observation entry, or batch dims other
                than one or two (``rlreplay.ShapeError``).
        """
        if td.batch_dims not in (1, 2):
            raise rr.ShapeError(
                f"expected a TensorDict of transitions with batch dims [T] or [E, T] (time "
                f"last), got batch_size={tuple(td.batch_size)}; reshape it, keeping each "
                "env's steps in time order along the last dim"
            )
        if "next" not in td:
            raise rr.FieldError(
                "expected the transitions' outcome under 'next' (('next', 'reward'), "
                "('next', 'done'), ('next', <observation>)), as TorchRL's collectors give; "
                f"got the keys {sorted(map(str, td.keys()))}"
            )
        skip = {*METADATA_KEYS, *ignore}
        nxt = td.get("next")
        next_keys = set(_leaves(nxt))
        for required in (("reward",), ("done",)):
            if required not in next_keys:
                raise rr.FieldError(
                    f"expected ('next', {required[0]!r}) in the transitions, found none "
                    f"(the 'next' keys: {sorted(next_keys)})"
                )
        batch = td.batch_dims

        def entry(tensor: torch.Tensor, key: Key, name: str) -> Entry:
            return Entry(key, name, tuple(tensor.shape[batch:]), tensor.dtype)

        def per_step(key: str) -> tuple[int, ...]:
            shape = tuple(nxt.get(key).shape[batch:])
            if int(np.prod(shape)) != 1:
                raise rr.ShapeError(
                    f"expected one number per step in ('next', {key!r}), got per-step shape "
                    f"{shape}; a buffer over several rewards or done flags (multi-agent) is "
                    "not supported: store one TensorDict per agent"
                )
            return shape

        obs: list[Entry] = []
        step: list[Entry] = []
        for key in _leaves(td):
            if key[0] == "next" or key[0] in skip:
                continue
            tensor = td.get(key)
            if key in next_keys and key not in [(k,) for k in DONE_KEYS]:
                obs.append(entry(tensor, key, f"o{len(obs)}"))
            else:
                step.append(entry(tensor, key, f"s{len(step)}"))
        if not obs:
            raise rr.FieldError(
                "expected at least one observation entry (a key found both at the root and "
                "under 'next', such as 'observation'), found none"
            )
        root = {e.key for e in obs}
        outcome = {("reward",), *((k,) for k in DONE_KEYS)}
        next_only = [
            entry(nxt.get(key), key, f"n{i}")
            for i, key in enumerate(k for k in _leaves(nxt) if k not in root and k not in outcome)
        ]
        flags = tuple((k, per_step(k)) for k in DONE_KEYS if (k,) in next_keys)
        return cls(
            obs=tuple(obs),
            step=tuple(step),
            next_only=tuple(next_only),
            reward=(per_step("reward"), nxt.get("reward").dtype),
            flags=flags,
            batch_dims=batch,
        )

    def fields(self) -> dict[str, rr.Field]:
        """The core buffer's fields (``reward``, ``terminated`` and ``truncated`` are built in)."""
        out = {e.name: rr.Field(e.shape, e.np_dtype, observation=True) for e in self.obs}
        for e in (*self.step, *self.next_only):
            out[e.name] = rr.Field(e.shape, e.np_dtype)
        return out

    def check(self, td: TensorDictBase) -> None:
        """Raise unless ``td`` holds this layout's entries with the same per-step shapes.

        Raises:
            ValueError: Another batch rank, a missing entry or another per-step shape
                (``rlreplay.FieldError`` / ``rlreplay.ShapeError``).
        """
        if td.batch_dims != self.batch_dims:
            raise rr.ShapeError(
                f"expected transitions with {self.batch_dims} batch dim(s) as in the first "
                f"extend, got batch_size={tuple(td.batch_size)}"
            )
        expected = [(e.key, e) for e in (*self.obs, *self.step)]
        expected += [(("next", *e.key), e) for e in self.next_only]
        expected += [(("next", *e.key), e) for e in self.obs]
        for key, e in expected:
            tensor = td.get(key, None)
            if tensor is None:
                raise rr.FieldError(
                    f"expected the entry {key} in the transitions (the buffer's layout was "
                    "set by its first extend), found none"
                )
            if tuple(tensor.shape[self.batch_dims :]) != e.shape:
                raise rr.ShapeError(
                    f"expected {key} of per-step shape {e.shape} (as in the first extend), "
                    f"got {tuple(tensor.shape[self.batch_dims :])}"
                )

    def arrays(self, td: TensorDictBase) -> dict[str, Array]:
        """The core values of ``td``'s steps, each with ``td``'s batch dims leading.

        ``next_<o>`` holds every step's next observation (the core reads it at episode ends).
        """
        out: dict[str, Array] = {}
        for e in (*self.obs, *self.step):
            out[e.name] = to_numpy(td.get(e.key))
        for e in self.obs:
            out[f"next_{e.name}"] = to_numpy(td.get(("next", *e.key)))
        for e in self.next_only:
            out[e.name] = to_numpy(td.get(("next", *e.key)))
        batch = tuple(td.batch_size)
        out["reward"] = to_numpy(td.get(("next", "reward"))).reshape(batch)
        done = to_numpy(td.get(("next", "done"))).reshape(batch).astype(bool)
        flags = dict(self.flags)
        terminated = (
            to_numpy(td.get(("next", "terminated"))).reshape(batch).astype(bool)
            if "terminated" in flags
            else done
        )
        truncated = (
            to_numpy(td.get(("next", "truncated"))).reshape(batch).astype(bool)
            if "truncated" in flags
            else done & ~terminated
        )
        # A done that is neither (an env giving 'done' alone, say) ends the episode truncated.
        out["terminated"] = terminated
        out["truncated"] = truncated | (done & ~terminated)
        return out

    def tensordict(
        self,
        batch: rr.Batch,
        *,
        n_step: int,
        weights: bool,
        device: torch.device | None,
    ) -> TensorDict:
        """A TensorDict of batch size ``[B]`` in TorchRL's layout from a core batch.

        Holds every stored entry, ``("next", <obs>)`` (``n_step`` steps on, or the episode's
        final one), ``("next", "reward")`` (the ``n_step`` discounted sum), the done flags
        under ``"next"`` (terminated or truncated inside the window), ``"index"`` (the core's
        ids), ``"priority_weight"`` (``weights``) and ``"steps_to_next_obs"`` (``n_step > 1``).
        """
        from tensordict import TensorDict

        size = int(batch.ids.shape[0])
        td = TensorDict(batch_size=[size], device=device)

        def put(key: Key, value: Array) -> None:
            td.set(key, torch.from_numpy(np.ascontiguousarray(value)))

        for e in (*self.obs, *self.step):
            put(e.key, batch[e.name])
        for e in self.obs:
            put(("next", *e.key), batch[f"next_{e.name}"])
        for e in self.next_only:
            put(("next", *e.key), batch[e.name])
        shape, dtype = self.reward
        td.set(
            ("next", "reward"),
            torch.from_numpy(batch.reward.reshape(size, *shape)).to(dtype),
        )
        terminated, truncated = batch.terminated, batch.truncated
        flags = {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}
        for key, per_step in self.flags:
            put(("next", key), flags[key].reshape(size, *per_step))
        put(("index",), batch.ids)
        if weights:
            put(("priority_weight",), batch.weights.astype(np.float32))
        if n_step > 1:
            put(("steps_to_next_obs",), batch.steps.astype(np.int64))
        return td


def byte_rows(a: Array) -> Array:
    """Each row of ``a`` (leading axis) as bytes, viewed as ``uint8`` ``(rows, nbytes)``: rows
    compare equal exactly when their bytes do (NaNs included)."""
    a = np.ascontiguousarray(a)
    return a.reshape(a.shape[0], -1).view(np.uint8) if a.size else a.reshape(a.shape[0], 0)


def breaks(values: dict[str, Array], names: Iterable[str]) -> Array:
    """Rows ``t`` of one env's ``T`` steps after which the steps are not continuous.

    Step ``t`` continues into ``t + 1`` when its episode did not end and its next observation
    is step ``t + 1``'s observation (byte for byte, every observation field). A break is a row
    that did not end its episode yet is not followed by its successor: steps of another env
    or trajectory (a ``reshape(-1)`` of ``[E, T]`` data, a collector that resets at each
    batch). Returns the sorted row indices ``t < T - 1`` of the breaks.
    """
    ended = values["terminated"] | values["truncated"]
    cut = np.zeros(ended.shape[0] - 1 if ended.shape[0] else 0, bool)
    if not cut.size:
        return np.flatnonzero(cut)
    for name in names:
        after, before = values[f"next_{name}"][:-1], values[name][1:]
        if after.tobytes() == before.tobytes():  # every step continues (one memcmp)
            continue
        cut |= (byte_rows(after) != byte_rows(before)).any(axis=1)
    return np.flatnonzero(cut & ~ended[:-1])
