"""The static configuration of a JAX buffer: checked once, on the host, before anything traces.

Everything here is plain Python and NumPy (no JAX): a :class:`BufferConfig` is hashable and
closed over by the buffer's pure functions, so shapes, window lengths and the prioritized law's
parameters are compile-time constants.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.buffer.geometry import Geometry
from rlreplay.errors import ConfigError
from rlreplay.sampling.prioritized import device_law
from rlreplay.spec import Field, Schema, positive_int

__all__ = [
    "TREE_FANOUT",
    "BufferConfig",
    "check_ids_fit",
    "default_finals",
    "make_config",
    "tree_levels",
]

#: Fanout of the prioritized buffer's sum and min trees: a node's children are one contiguous
#: run of ``TREE_FANOUT`` values (32 bytes), gathered as one row; 100,000 slots take 6 levels.
TREE_FANOUT = 8


def default_finals(env_capacity: int) -> int:
    """Final observations kept per env unless ``finals_per_env`` says otherwise.

    A quarter of the env's slots: an env keeps every episode end of its ring as long as its
    stored episodes average 4 steps or more.
    """
    return max(1, env_capacity // 4)


@dataclass(frozen=True, eq=False)
class BufferConfig:
    """What a JAX buffer is: sizes, fields, windows and the sampling law (see :func:`make_config`).

    Attributes beyond the constructor's: ``env_capacity`` (``C = capacity // num_envs``),
    ``schema`` (the fields as the NumPy core builds them: declared ones plus ``reward``,
    ``terminated``, ``truncated``), ``stored`` (name -> the dtype each field is stored with under
    JAX's current precision: 64-bit types become 32-bit ones unless ``jax_enable_x64`` is on),
    ``index_dtype`` (int32, or int64 with ``jax_enable_x64``: steps, ids, counters).
    """

    capacity: int
    num_envs: int
    env_capacity: int
    schema: Schema
    stored: Mapping[str, np.dtype[Any]]
    index_dtype: np.dtype[Any]
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
    variant: str
    recent_ratio: float
    recent_steps: int
    replacement: bool

    @property
    def rank_based(self) -> bool:
        """Whether draws follow ranks of priorities (``variant="rank_based"``)."""
        return self.variant == "rank_based"

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
        """Whether an env can end more episodes than it keeps final observations for.

        With ``F >= C`` never: an env's live final records belong to stored steps, and the
        step a write overwrites gives its record up first.
        """
        return self.finals_per_env < self.env_capacity

    def prioritized_kwargs(self) -> dict[str, Any]:
        """The arguments of :class:`rlreplay.PrioritizedReplayBuffer` this law is."""
        return {
            "alpha": self.alpha,
            "beta": self.beta,
            "beta_final": self.beta_final,
            "beta_steps": self.beta_steps,
            "eps": self.eps,
            "initial_priority": self.initial_priority,
            "priority_clip": self.priority_clip,
            "stratified": self.stratified,
            "variant": self.variant,
            # Ranks are exact at every draw here, which is the core's sort_interval=1.
            "sort_interval": 1 if self.rank_based else None,
        }


def _stored_dtype(dtype: np.dtype[Any], x64: bool) -> np.dtype[Any]:
    """The dtype JAX keeps ``dtype`` in (``jax.dtypes.canonicalize_dtype`` without JAX)."""
    if x64 or dtype.itemsize < 8:
        return dtype
    narrow = {"i": np.int32, "u": np.uint32, "f": np.float32, "c": np.complex64}
    return np.dtype(narrow[dtype.kind]) if dtype.kind in narrow else dtype


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
    x64: bool,
    recent_ratio: float = 0.0,
    recent_steps: int = 1,
    replacement: bool = True,
    **per: Any,
) -> BufferConfig:
    """Check the arguments of :func:`rlreplay.jax.make_buffer` as the NumPy core checks its
    constructor's, and build the configuration.

    Raises:
        rlreplay.ConfigError: Naming the argument, what was expected and what came.
    """
    schema = Schema.build(fields)
    # The core's checks of rings and windows (the host's size budget is not this buffer's).
    g = Geometry.checked(
        schema, capacity=capacity, num_envs=num_envs, n_step=n_step, gamma=gamma,
        frame_stack=frame_stack, stack_pad=stack_pad, next_fields=next_fields, seed=None,
        budget=False,
    )  # fmt: skip
    capacity, num_envs, n_step, gamma = g.capacity, g.num_envs, g.n_step, g.gamma
    frame_stack, stack_pad, next_fields = g.frame_stack, g.stack_pad, g.next_fields
    if not isinstance(prioritized, bool | np.bool_):
        raise ConfigError(f"prioritized: expected a bool, got {prioritized!r}")
    env_capacity = capacity // num_envs
    if finals_per_env is None:
        finals_per_env = default_finals(env_capacity)
    finals_per_env = positive_int("finals_per_env", finals_per_env)
    stored = {name: _stored_dtype(f.dtype, x64) for name, f in schema.fields.items()}
    if stored["reward"] not in (np.float32, np.float64):
        raise ConfigError(
            f"fields['reward']: the JAX buffer sums rewards in their own dtype, float32 (or "
            f"float64 with jax_enable_x64); got {schema.fields['reward'].dtype}"
        )
    # The NumPy core checks the law's arguments and the draw options with its own messages.
    sampler, options = device_law(
        "JAX buffer", bool(prioritized), recent_ratio, recent_steps, replacement, **per
    )
    clip = sampler.priority_clip
    return BufferConfig(
        capacity=capacity,
        num_envs=num_envs,
        env_capacity=env_capacity,
        schema=schema,
        stored=stored,
        index_dtype=np.dtype(np.int64 if x64 else np.int32),
        n_step=n_step,
        gamma=gamma,
        frame_stack=frame_stack,
        stack_pad=stack_pad,
        next_fields=next_fields,
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
        variant=sampler.variant,
        recent_ratio=options.recent_ratio,
        recent_steps=options.recent_steps,
        replacement=options.replacement,
    )


def check_ids_fit(config: BufferConfig) -> None:
    """Refuse buffers whose slot numbers would not fit the index dtype (or 32-bit draws)."""
    if config.num_slots >= min(np.iinfo(config.index_dtype).max // 2, 2**32 - 1):
        raise ConfigError(
            f"capacity: {config.capacity} slots do not fit {config.index_dtype} indices; "
            "enable jax_enable_x64 for buffers this large"
        )


def tree_levels(num_leaves: int, fanout: int = TREE_FANOUT) -> tuple[int, ...]:
    """Sizes of a ``fanout``-ary tree's levels over ``num_leaves`` leaves, leaves first.

    Every level but the root is padded to a multiple of ``fanout`` (padding holds mass 0), so
    a node's children are always ``fanout`` in-bounds values; the root level has size 1.
    """
    sizes = []
    n = max(1, num_leaves)
    while True:
        padded = math.ceil(n / fanout) * fanout
        sizes.append(padded)
        n = padded // fanout
        if n == 1:
            sizes.append(1)
            return tuple(sizes)
