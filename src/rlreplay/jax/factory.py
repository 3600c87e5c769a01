"""Making a JAX buffer: :func:`make_buffer` checks its arguments once, on the host, and
shares one :class:`~rlreplay.jax.JaxBuffer` (and its compiled functions) per configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlreplay.errors import ReplayError
from rlreplay.jax._lib import require_jax
from rlreplay.jax.buffer import JaxBuffer
from rlreplay.jax.config import check_ids_fit, make_config
from rlreplay.spec import Field, Schema

__all__ = ["make_buffer"]


def make_buffer(
    capacity: int,
    fields: Mapping[str, Field | tuple[Any, Any]],
    *,
    num_envs: int = 1,
    n_step: int = 1,
    gamma: float = 0.99,
    frame_stack: int = 1,
    stack_pad: str = "zero",
    next_fields: Sequence[str] = (),
    finals_per_env: int | None = None,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    beta_final: float = 1.0,
    beta_steps: int = 0,
    eps: float = 1e-6,
    variant: str = "proportional",
    initial_priority: float = 1.0,
    priority_clip: tuple[float, float] | None = None,
    stratified: bool = True,
    sort_interval: int | None = None,
    recent_ratio: float = 0.0,
    recent_steps: int = 1,
    replacement: bool = True,
    transforms: Sequence[Any] = (),
) -> JaxBuffer:
    """A replay buffer of pure JAX functions (see :class:`JaxBuffer`).

    Args:
        capacity: Transitions stored over all envs; at least ``num_envs * (n_step +
            frame_stack)``. Each env keeps ``capacity // num_envs`` steps.
        fields: Name -> :class:`rlreplay.Field`, as for :class:`rlreplay.ReplayBuffer`
            (``obs`` is an observation field; ``reward``, ``terminated``, ``truncated`` are
            built in; the reward must be float32, or float64 with ``jax_enable_x64``).
        num_envs: ``E``: every :meth:`~JaxBuffer.add` takes one step of each env.
        n_step: Window length.
        gamma: Discount in ``[0, 1]``.
        frame_stack: ``k``: sampled ``obs``/``next_obs`` are ``(B, k, *frame)`` stacks.
        stack_pad: ``"zero"`` or ``"first"``: what fills a stack before an episode's start.
        next_fields: Non-observation fields also read at step ``t+m`` (zeros at episode ends).
        finals_per_env: Final observations kept per env (default ``env_capacity // 4``; see
            :class:`JaxBuffer` for what happens beyond).
        prioritized: Sample by priority with importance weights.
        alpha, beta, beta_final, beta_steps, eps, variant, initial_priority, priority_clip,
            stratified: The law, as for :class:`rlreplay.PrioritizedReplayBuffer`
            (``"proportional"`` or ``"rank_based"``).
        sort_interval: Rank-based: ``None`` or ``1``; the JAX buffer ranks exactly at every
            draw, which is the core's ``sort_interval=1`` (see :mod:`rlreplay.jax.rank`).
        recent_ratio, recent_steps: Uniform buffers: ``ceil(recent_ratio * B)`` draws of a
            batch of ``B`` are uniform over the ``recent_steps`` newest sampleable
            transitions of each env, as for :class:`rlreplay.ReplayBuffer`.
        replacement: Uniform buffers: if False, a batch has no duplicates whenever enough
            transitions are sampleable, as for :class:`rlreplay.ReplayBuffer`.
        transforms: Jittable functions ``JaxBatch -> JaxBatch`` applied, in order, to every
            :meth:`~JaxBuffer.sample` inside its ``jit`` (not to ``get_transitions`` nor to
            sequences, as in the core); one that declares a ``key`` parameter gets a random
            key of its own (:mod:`rlreplay.jax.transforms`). Bindable transforms
            (:class:`rlreplay.transforms.HindsightRelabel`) are refused.

    Raises:
        rlreplay.ConfigError: An argument out of range, naming it.
        ImportError: JAX is not installed.

    Example:
        >>> import numpy as np, rlreplay as rr, rlreplay.jax as rrj
        >>> buf = rrj.make_buffer(capacity=1000, fields={"obs": rr.Field((4,), np.float32)},
        ...                       num_envs=4, n_step=3, prioritized=True)
        >>> buf.env_capacity
        250
    """
    jax_module = require_jax()
    x64 = bool(jax_module.config.jax_enable_x64)
    try:
        key = _config_key(capacity, fields, locals())
    except (TypeError, ReplayError):  # unhashable, or invalid: make_config says which
        key = None
    if key is not None and key in _BUFFERS:
        return _BUFFERS[key]
    config = make_config(
        capacity, fields, num_envs=num_envs, n_step=n_step, gamma=gamma,
        frame_stack=frame_stack, stack_pad=stack_pad, next_fields=next_fields,
        finals_per_env=finals_per_env, prioritized=prioritized, x64=x64, alpha=alpha, beta=beta,
        beta_final=beta_final, beta_steps=beta_steps, eps=eps, variant=variant,
        initial_priority=initial_priority, priority_clip=priority_clip, stratified=stratified,
        sort_interval=sort_interval, recent_ratio=recent_ratio, recent_steps=recent_steps,
        replacement=replacement,
    )  # fmt: skip
    check_ids_fit(config)
    buf = JaxBuffer(config, transforms)
    if key is not None:
        if len(_BUFFERS) >= 64:
            _BUFFERS.pop(next(iter(_BUFFERS)))
        _BUFFERS[key] = buf
    return buf


# Buffers by configuration: a JaxBuffer holds no data, so equal configurations share one (and
# its compiled functions: a second make_buffer, or from_replay_buffer, compiles nothing anew).
_BUFFERS: dict[Any, JaxBuffer] = {}


def _config_key(capacity: Any, fields: Any, args: Mapping[str, Any]) -> Any:
    """A hashable key of :func:`make_buffer`'s arguments (``TypeError`` if one is not)."""
    described = tuple(
        (name, f.shape, f.dtype.str, f.observation)
        for name, f in Schema.build(fields).fields.items()
    )
    rest = tuple(
        (k, tuple(v) if isinstance(v, list) else v)
        for k, v in sorted(args.items())
        if k not in ("capacity", "fields", "jax_module")
    )
    key = (capacity, described, rest)
    hash(key)
    return key
