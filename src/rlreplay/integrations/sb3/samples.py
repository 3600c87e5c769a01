"""Core batches as Stable-Baselines3's sample tuples, on SB3's device.

:class:`Samples` and :class:`DictSamples` *are* SB3's ``ReplayBufferSamples`` and
``DictReplayBufferSamples`` (subclasses: ``isinstance`` holds, the six fields unpack and
iterate as SB3's do) and carry two more attributes for algorithms that use them:

* ``ids``: int64 NumPy array ``(B,)``, the core's transition ids, for
  :meth:`~rlreplay.integrations.sb3.ReplayBuffer.update_priorities`;
* ``weights``: float32 tensor ``(B, 1)`` on the device, the importance-sampling weights of a
  prioritized buffer (ones otherwise).

:func:`convert` builds them from a core :class:`rlreplay.Batch`: ``dones`` is 1 where the
episode *terminated* inside the transition's window (a timeout bootstraps), ``rewards`` the
window's discounted sum, and ``discounts`` ``gamma ** steps`` for n-step windows (``None``
with ``n_step=1``: the algorithm uses its own ``gamma``, as with SB3's ``ReplayBuffer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch as th
from stable_baselines3.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

import rlreplay as rr
from rlreplay.integrations.sb3.layout import Layout

__all__ = ["DictSamples", "Samples", "convert"]

Array = np.ndarray[Any, Any]


class Samples(ReplayBufferSamples):
    """SB3's ``ReplayBufferSamples`` with the core's ``ids`` and importance ``weights``."""

    ids: Array
    weights: th.Tensor

    def __new__(
        cls,
        observations: th.Tensor,
        actions: th.Tensor,
        next_observations: th.Tensor,
        dones: th.Tensor,
        rewards: th.Tensor,
        discounts: th.Tensor | None = None,
        *,
        ids: Array,
        weights: th.Tensor,
    ) -> Samples:
        self = super().__new__(
            cls, observations, actions, next_observations, dones, rewards, discounts
        )
        self.ids = ids
        self.weights = weights
        return self

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return tuple(self), {"ids": self.ids, "weights": self.weights}

    def _replace(self, **changes: Any) -> Samples:
        """A copy with some fields (or ``ids``/``weights``) replaced, as the tuple's
        ``_replace`` (which would drop ``ids`` and ``weights``)."""
        return _replaced(self, changes)


class DictSamples(DictReplayBufferSamples):
    """SB3's ``DictReplayBufferSamples`` with the core's ``ids`` and importance ``weights``."""

    ids: Array
    weights: th.Tensor

    def __new__(
        cls,
        observations: dict[str, th.Tensor],
        actions: th.Tensor,
        next_observations: dict[str, th.Tensor],
        dones: th.Tensor,
        rewards: th.Tensor,
        discounts: th.Tensor | None = None,
        *,
        ids: Array,
        weights: th.Tensor,
    ) -> DictSamples:
        self = super().__new__(
            cls, observations, actions, next_observations, dones, rewards, discounts
        )
        self.ids = ids
        self.weights = weights
        return self

    def __getnewargs_ex__(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return tuple(self), {"ids": self.ids, "weights": self.weights}

    def _replace(self, **changes: Any) -> DictSamples:
        """A copy with some fields (or ``ids``/``weights``) replaced, as the tuple's
        ``_replace`` (which would drop ``ids`` and ``weights``)."""
        return _replaced(self, changes)


_S = TypeVar("_S", Samples, DictSamples)


def _replaced(samples: _S, changes: dict[str, Any]) -> _S:
    ids = changes.pop("ids", samples.ids)
    weights = changes.pop("weights", samples.weights)
    values = [changes.pop(f, v) for f, v in zip(samples._fields, samples, strict=True)]
    if changes:
        raise ValueError(f"Got unexpected field names: {list(changes)!r}")
    return type(samples)(*values, ids=ids, weights=weights)


def convert(
    batch: rr.Batch,
    layout: Layout,
    *,
    n_step: int,
    gamma: float,
    device: th.device,
    env: VecNormalize | None = None,
    step_rewards: Callable[[], Array] | None = None,
) -> Samples | DictSamples:
    """A core batch as SB3's samples (``DictSamples`` for a ``Dict`` observation space).

    Args:
        batch: From the core's ``sample`` or ``get_transitions``.
        layout: The buffer's :class:`~rlreplay.integrations.sb3.layout.Layout`.
        n_step: The core's window length; ``discounts`` is ``None`` when it is 1.
        gamma: The core's discount.
        device: Where the tensors go.
        env: SB3's ``VecNormalize`` (or ``None``): observations and rewards are normalized
            with its current statistics, as SB3's buffers do at sample time.
        step_rewards: With ``env`` and windows longer than one step: a function returning the
            raw per-step rewards ``(B, n_step)`` (zeros past each window), so that each step
            is normalized (and clipped) before it is discounted and summed, as SB3's
            ``NStepReplayBuffer`` does.
    """

    def tensor(arr: Array) -> th.Tensor:
        # The batch's arrays are fresh copies that nothing else holds: no second copy on CPU.
        return th.as_tensor(arr, device=device)

    obs = {name: batch[name] for name in layout.names}
    nxt = {name: batch[f"next_{name}"] for name in layout.names}
    steps = batch.steps.reshape(-1, 1)
    reward = batch.reward.reshape(-1, 1)
    if env is not None:
        obs, nxt = _normalized(obs, layout, env), _normalized(nxt, layout, env)
        if n_step > 1 and step_rewards is not None and bool((steps > 1).any()):
            raw = step_rewards()
            within = np.arange(n_step)[None, :] < steps
            scaled = np.where(within, env.normalize_reward(raw), 0.0)
            reward = (scaled * gamma ** np.arange(n_step)[None, :]).sum(1, keepdims=True)
        else:
            reward = env.normalize_reward(reward)
    dones = tensor(batch.terminated.reshape(-1, 1).astype(np.float32))
    rewards = tensor(np.asarray(reward, np.float32))
    discounts = None if n_step == 1 else tensor((gamma**steps).astype(np.float32))
    actions = tensor(batch.action)
    weights = tensor(batch.weights.reshape(-1, 1).astype(np.float32, copy=False))
    ids = batch.ids
    if layout.keys is None:
        return Samples(
            tensor(obs["obs"]), actions, tensor(nxt["obs"]), dones, rewards, discounts,
            ids=ids, weights=weights,
        )  # fmt: skip
    return DictSamples(
        {k: tensor(obs[n]) for k, n in zip(layout.keys, layout.names, strict=True)},
        actions,
        {k: tensor(nxt[n]) for k, n in zip(layout.keys, layout.names, strict=True)},
        dones, rewards, discounts, ids=ids, weights=weights,
    )  # fmt: skip


def _normalized(values: dict[str, Array], layout: Layout, env: VecNormalize) -> dict[str, Array]:
    """``values`` through ``env.normalize_obs`` (which takes SB3's dict keys, not field names)."""
    if layout.keys is None:
        return {"obs": np.asarray(env.normalize_obs(values["obs"]))}
    by_key = {k: values[n] for k, n in zip(layout.keys, layout.names, strict=True)}
    normed = env.normalize_obs(by_key)
    assert isinstance(normed, dict)  # normalize_obs of a dict
    return {n: np.asarray(normed[k]) for k, n in zip(layout.keys, layout.names, strict=True)}
