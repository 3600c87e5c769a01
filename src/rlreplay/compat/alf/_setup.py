"""Construction of the ALF buffer (private to the ALF front-end).

The constructor's options are checked here (:func:`check_options`, :func:`positive`), the
``data_spec`` is laid out as core fields (:func:`spec_layout`) and the core is made
(:func:`make_core`), seeded from torch's global generator as ALF's draws are.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from rlreplay import ConfigError, Field, PrioritizedReplayBuffer
from rlreplay import ReplayBuffer as CoreBuffer
from rlreplay.compat.alf.tensor_specs import Path, TensorSpec, core_field_names, flatten_spec

__all__ = [
    "ConfigAssertionError",
    "SpecLayout",
    "check_clip",
    "check_gamma",
    "check_options",
    "keep_newest",
    "make_core",
    "positive",
    "spec_layout",
]


class ConfigAssertionError(ConfigError, AssertionError):
    """A constructor option ALF refuses with an assertion (also a :class:`rlreplay.ConfigError`)."""


def positive(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum`` (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


def check_options(
    num_environments: Any,
    max_length: Any,
    num_earliest_frames_ignored: Any,
    allow_multiprocess: Any,
    keep_episodic_info: bool | None,
    record_episodic_return: bool,
    recent_data_ratio: Any,
) -> tuple[int, int, int, bool]:
    """``(E, max_length, num_earliest_frames_ignored, keep_episodic_info)``, checked in order.

    ``keep_episodic_info=None`` resolves to whether episode information is needed.

    Raises:
        rlreplay.ConfigError: An option out of range.
        ConfigAssertionError: ``record_episodic_return`` with ``keep_episodic_info=False``.
    """
    E = positive("num_environments", num_environments)
    C = positive("max_length", max_length)
    ignored = positive("num_earliest_frames_ignored", num_earliest_frames_ignored, 0)
    # ALF: "keep_episodic_info will be set to True if num_earliest_frames_ignored > 0" (even
    # when given as False), and record_episodic_return "assumes keep_episodic_info to be True".
    if ignored > 0:
        keep_episodic_info = True
    if keep_episodic_info is None:
        keep_episodic_info = bool(record_episodic_return)
    if not keep_episodic_info and record_episodic_return:
        raise ConfigAssertionError(
            "keep_episodic_info=False: record_episodic_return needs episode information; "
            "leave keep_episodic_info None or True"
        )
    if (
        isinstance(recent_data_ratio, bool)
        or not isinstance(recent_data_ratio, int | float | np.number)
        or not 0.0 <= float(recent_data_ratio) <= 1.0
    ):
        raise ConfigError(
            f"recent_data_ratio: expected a number in [0, 1], got {recent_data_ratio!r}"
        )
    return E, C, ignored, bool(keep_episodic_info)


class SpecLayout(NamedTuple):
    """How a ``data_spec`` is stored in the core.

    Attributes:
        leaves: ``(path, spec)`` of every leaf, in the nest's order.
        names: Leaf path -> core field name.
        step_type: Core field of a scalar integer top-level ``step_type``, else ``None``.
        discount: Core field of a scalar numeric top-level ``discount``, else ``None``.
        fields: The core's fields: one per leaf, and the zero-byte observation placeholder.
        placeholder: Name of the placeholder field (ALF has no next observation).
    """

    leaves: list[tuple[Path, TensorSpec]]
    names: dict[Path, str]
    step_type: str | None
    discount: str | None
    fields: dict[str, Field]
    placeholder: str


def spec_layout(data_spec: Any, keep_episodic_info: bool) -> SpecLayout:
    """The core fields of ``data_spec``.

    Raises:
        rlreplay.ConfigError: Not a nest of TensorSpec, or ``keep_episodic_info`` without a
            scalar integer ``step_type`` at the top.
    """
    leaves = flatten_spec(data_spec)
    names = core_field_names([p for p, _ in leaves])
    step_type = _scalar_leaf(leaves, names, ("step_type",), "iu")
    discount = _scalar_leaf(leaves, names, ("discount",), "iuf")
    if keep_episodic_info and step_type is None:
        field_names = {".".join(p): n for p, n in names.items()}
        raise ConfigError(
            "keep_episodic_info: needs a scalar integer 'step_type' at the top of "
            f"data_spec (episodes end at StepType.LAST); leaves: {field_names}"
        )
    fields = {names[p]: Field(tuple(s.shape), s.numpy_dtype) for p, s in leaves}
    placeholder = "obs"
    while placeholder in fields:
        placeholder += "_"
    fields[placeholder] = Field((0,), np.uint8, observation=True)
    return SpecLayout(leaves, names, step_type, discount, fields, placeholder)


def _scalar_leaf(
    leaves: list[tuple[Path, TensorSpec]], names: dict[Path, str], path: Path, kinds: str
) -> str | None:
    for p, spec in leaves:
        if p == path:
            if spec.shape == () and spec.numpy_dtype.kind in kinds:
                return names[p]
            return None
    return None


def keep_newest(core: CoreBuffer, envs: Any) -> None:
    """With ``max_length=1``: drop the older of two stored steps of ``envs`` (ALF overwrites it)."""
    first, end = core.stored_range()
    full = envs[end[envs] - first[envs] > 1]
    if full.size:
        core.dequeue(1, full)


def clip_pair_or_none(value: Any) -> tuple[float, float] | None:
    """``value`` as a pair of floats, or None where it is not one (the core then says why)."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        return None
    return lo, hi


def check_gamma(gamma: Any) -> float:
    """``gamma`` of recorded returns, checked as the core checks it (a number in [0, 1])."""
    if isinstance(gamma, bool) or not isinstance(gamma, int | float | np.number):
        raise ConfigError(f"gamma: expected a number in [0, 1], got {gamma!r}")
    if not 0.0 <= float(gamma) <= 1.0:
        raise ConfigError(f"gamma: expected a value in [0, 1], got {float(gamma)}")
    return float(gamma)


def check_clip(reward_clip: Any) -> tuple[float, float] | None:
    """``reward_clip`` as the host-backed buffer takes it: ``None`` or ``(lo, hi)``; with
    ``lo > hi`` every reward becomes ``hi`` (ALF's ``torch.clamp``), so ``(hi, hi)``."""
    if reward_clip is None:
        return None
    pair = clip_pair_or_none(reward_clip)
    if pair is None:
        raise ConfigError(f"reward_clip: expected None or (lo, hi), got {reward_clip!r}")
    lo, hi = pair
    if lo > hi:
        return hi, hi
    if not lo <= hi:  # NaN
        raise ConfigError(f"reward_clip: expected lo <= hi, got ({lo}, {hi})")
    return lo, hi


def make_core(
    num_envs: int,
    max_length: int,
    fields: dict[str, Field],
    *,
    prioritized: bool,
    initial_priority: float,
    gamma: float,
    record_episodic_return: bool,
    reward_clip: tuple[float, float] | None,
    default_return: float,
) -> tuple[CoreBuffer, PrioritizedReplayBuffer | None]:
    """The core and, with ``prioritized``, the same core typed.

    The core keeps ``max(max_length, 2)`` steps per env: it needs room for two (a step and its
    successor); with ``max_length=1`` the buffer trims each env back to its newest step after
    every add (:func:`keep_newest`), so it holds what ALF's one-slot ring holds.
    """
    E, C = num_envs, max(max_length, 2)
    # ALF takes any float gamma and uses it only for discounted_return; the core checks it
    # (it also discounts n-step returns), so without record_episodic_return it gets a stand-in.
    core_gamma = gamma if record_episodic_return else 0.99
    # ALF clamps rewards to reward_clip (torch.clamp: with min > max every reward becomes
    # max); the core wants lo <= hi, and (max, max) clamps the same.
    pair = clip_pair_or_none(reward_clip)
    if pair is not None and pair[0] > pair[1]:
        reward_clip = (pair[1], pair[1])
    # ALF draws from torch's global generator: seed the core's from it, so that
    # torch.manual_seed makes runs repeatable.
    seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    common: dict[str, Any] = {
        "num_envs": E,
        "gamma": core_gamma,
        "seed": seed,
        "record_episodic_return": record_episodic_return,
        "reward_clip": reward_clip,
        "default_return": default_return,
    }
    if prioritized:
        # The front-end sets every new step's priority itself (ALF's rule, any float: 0,
        # negative, NaN and infinite ones too); the core's own initial priority is unused.
        pcore = PrioritizedReplayBuffer(
            E * C, fields, alpha=1.0, beta=0.0, eps=0.0, initial_priority=1.0, **common,
        )  # fmt: skip
        return pcore, pcore
    return CoreBuffer(E * C, fields, **common), None
