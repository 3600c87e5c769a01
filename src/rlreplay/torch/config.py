"""The configuration of a device buffer: checked once, on the host, when the buffer is made.

Plain Python and NumPy (no torch): the same checks as the NumPy core's constructors
(:meth:`rlreplay.buffer.geometry.Geometry.checked` for rings and windows,
:func:`rlreplay.sampling.prioritized.device_law` for the prioritized law, proportional or
rank-based, and the draw options), with the core's messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.buffer.geometry import Geometry
from rlreplay.errors import ConfigError, InvalidIdError
from rlreplay.sampling.prioritized import device_law
from rlreplay.spec import Field, Schema, positive_int

__all__ = ["DeviceConfig", "default_finals", "host_env_ids", "make_config"]


def default_finals(env_capacity: int, prioritized: bool) -> int:
    """Final observations kept per env unless ``finals_per_env`` says otherwise.

    Uniform buffers: a quarter of the env's slots (an env keeps every episode end of its ring
    as long as its stored episodes average 4 steps or more), as the JAX buffer. Prioritized
    buffers: every slot (``C``), so that no episode is ever dropped for a final record and an
    :meth:`add` never rebuilds the priority trees (see
    :class:`~rlreplay.torch.DevicePrioritizedReplayBuffer`).
    """
    return env_capacity if prioritized else max(1, env_capacity // 4)


@dataclass(frozen=True, eq=False)
class DeviceConfig:
    """What a device buffer is: sizes, fields, windows and the sampling law.

    ``env_capacity`` is ``C = capacity // num_envs``; ``schema`` holds the fields as the NumPy
    core builds them (declared ones plus ``reward``, ``terminated``, ``truncated``), stored in
    their declared dtypes.
    """

    capacity: int
    num_envs: int
    env_capacity: int
    schema: Schema
    n_step: int
    gamma: float
    frame_stack: int
    stack_pad: str
    next_fields: tuple[str, ...]
    finals_per_env: int
    prioritized: bool
    alpha: float
    beta: float
    beta_final: float
    beta_steps: int
    eps: float
    initial_priority: float
    priority_clip: tuple[float, float] | None
    stratified: bool
    recent_ratio: float
    recent_steps: int
    replacement: bool
    rank_based: bool = False

    @property
    def observation_names(self) -> tuple[str, ...]:
        """The observation fields (each has ``next_<name>`` in steps and batches)."""
        return self.schema.observation_names

    @property
    def num_slots(self) -> int:
        """``E * C``: rows of every column."""
        return self.num_envs * self.env_capacity

    @property
    def can_evict(self) -> bool:
        """Whether an env can end more episodes than it keeps final observations for."""
        return self.finals_per_env < self.env_capacity

    def core_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the NumPy core buffer with this configuration (besides
        ``capacity`` and ``fields``)."""
        out: dict[str, Any] = {
            "num_envs": self.num_envs,
            "n_step": self.n_step,
            "gamma": self.gamma,
            "frame_stack": self.frame_stack,
            "stack_pad": self.stack_pad,
            "next_fields": self.next_fields,
        }
        if self.prioritized:
            out.update(
                alpha=self.alpha, beta=self.beta, beta_final=self.beta_final,
                beta_steps=self.beta_steps, eps=self.eps,
                initial_priority=self.initial_priority, priority_clip=self.priority_clip,
                stratified=self.stratified,
            )  # fmt: skip
            if self.rank_based:  # exact ranks at every draw: the core's sort_interval=1
                out.update(variant="rank_based", sort_interval=1)
        else:
            out.update(
                recent_ratio=self.recent_ratio, recent_steps=self.recent_steps,
                replacement=self.replacement,
            )  # fmt: skip
        return out


def make_config(
    capacity: int,
    fields: Mapping[str, Field | tuple[Any, Any]],
    *,
    num_envs: int,
    n_step: int,
    gamma: float,
    frame_stack: int,
    stack_pad: str,
    next_fields: Sequence[str],
    finals_per_env: int | None,
    prioritized: bool,
    recent_ratio: float = 0.0,
    recent_steps: int = 1,
    replacement: bool = True,
    **per: Any,
) -> DeviceConfig:
    """Check a device buffer's arguments as the NumPy core checks its constructor's.

    Raises:
        rlreplay.ConfigError: Naming the argument, what was expected and what came.
    """
    schema = Schema.build(fields)
    g = Geometry.checked(
        schema, capacity=capacity, num_envs=num_envs, n_step=n_step, gamma=gamma,
        frame_stack=frame_stack, stack_pad=stack_pad, next_fields=next_fields, seed=None,
        budget=False,
    )  # fmt: skip
    env_capacity = g.capacity // g.num_envs
    if finals_per_env is None:
        finals_per_env = default_finals(env_capacity, prioritized)
    finals_per_env = positive_int("finals_per_env", finals_per_env)
    reward = schema.fields["reward"].dtype
    if reward not in (np.float32, np.float64):
        raise ConfigError(
            f"fields['reward']: the device buffer sums rewards in their own dtype, float32 or "
            f"float64; got {reward}"
        )
    # The core checks the law's arguments (variant, sort_interval, ...) with its messages.
    sampler, options = device_law(
        "device buffer", bool(prioritized), recent_ratio, recent_steps, replacement, **per
    )
    clip = sampler.priority_clip
    return DeviceConfig(
        capacity=g.capacity,
        num_envs=g.num_envs,
        env_capacity=env_capacity,
        schema=schema,
        n_step=g.n_step,
        gamma=g.gamma,
        frame_stack=g.frame_stack,
        stack_pad=g.stack_pad,
        next_fields=tuple(g.next_fields),
        finals_per_env=finals_per_env,
        prioritized=bool(prioritized),
        alpha=sampler.alpha,
        beta=sampler.beta0,
        beta_final=sampler.beta_final,
        beta_steps=sampler.beta_steps,
        eps=sampler.eps,
        initial_priority=sampler.initial_priority,
        priority_clip=None if clip is None else (float(clip[0]), float(clip[1])),
        stratified=sampler.stratified,
        recent_ratio=options.recent_ratio,
        recent_steps=options.recent_steps,
        replacement=options.replacement,
        rank_based=sampler.variant == "rank_based",
    )


def host_env_ids(num_envs: int, env_ids: Any, name: str = "env_ids") -> np.ndarray[Any, Any]:
    """``env_ids`` (host values or a tensor, read on the host) as distinct int64 envs in
    ``[0, num_envs)``, checked as the core checks them (:class:`InvalidIdError`)."""
    import torch

    E = num_envs
    if isinstance(env_ids, torch.Tensor):
        dt = env_ids.dtype
        if dt.is_floating_point or dt.is_complex or dt == torch.bool:
            raise InvalidIdError(
                f"{name}: expected a 1-D sequence of ints, got {dt} with shape "
                f"{tuple(env_ids.shape)}"
            )
        env_ids = env_ids.cpu().numpy()
    arr = np.asarray(env_ids)
    if arr.ndim != 1 or (arr.dtype.kind not in "iu" and arr.size):
        raise InvalidIdError(
            f"{name}: expected a 1-D sequence of ints, got {arr.dtype} with shape {arr.shape}"
        )
    arr = arr.astype(np.int64)
    bad = arr[(arr < 0) | (arr >= E)]
    if bad.size:
        raise InvalidIdError(f"{name}: expected values in [0, {E}), got {bad.tolist()}")
    if np.unique(arr).size != arr.size:
        raise InvalidIdError(f"{name}: expected unique env ids, got {arr.tolist()}")
    return arr
