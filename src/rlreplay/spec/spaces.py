"""Fields from gymnasium spaces (gymnasium is imported lazily, only when this is used)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.errors import ConfigError
from rlreplay.spec.schema import Field

__all__ = ["field_from_space", "fields_from_spaces"]


def _gym_spaces() -> Any:
    """``gymnasium.spaces``, or an error naming the extra that installs it."""
    try:
        from gymnasium import spaces
    except ImportError as exc:
        raise ModuleNotFoundError(
            "from_spaces: expected gymnasium to be installed, but it is not importable "
            f"({exc}); install it with: pip install 'rlreplay[gym]'",
            name="gymnasium",
        ) from exc
    return spaces


def field_from_space(name: str, space: Any, *, observation: bool = False) -> Field:
    """The :class:`Field` that stores one value of a gymnasium ``space``.

    ``Box`` keeps its shape and dtype; ``Discrete`` is an int64 scalar; ``MultiDiscrete`` an
    int64 array of its shape; ``MultiBinary`` an int8 array of its shape.

    Raises:
        ConfigError: Another kind of space (``Tuple``, ``Text``, ``Graph``, ...).
    """
    spaces = _gym_spaces()
    if isinstance(space, spaces.Box):
        return Field(space.shape, space.dtype, observation=observation)
    if isinstance(space, spaces.Discrete):
        return Field((), np.int64, observation=observation)
    if isinstance(space, spaces.MultiDiscrete):
        return Field(space.shape, np.int64, observation=observation)
    if isinstance(space, spaces.MultiBinary):
        return Field(space.shape, np.int8, observation=observation)
    raise ConfigError(
        f"{name}: cannot store a {type(space).__name__} space; supported are Box, Discrete, "
        "MultiDiscrete, MultiBinary (and Dict of those for observations)"
    )


def fields_from_spaces(observation_space: Any, action_space: Any) -> dict[str, Field]:
    """Fields for an env: ``obs`` (or one observation field per ``Dict`` key) and ``action``.

    Raises:
        ModuleNotFoundError: gymnasium is not installed (the message names the ``gym`` extra).
        ConfigError: A space no field can store, or a ``Dict`` key named ``action``.
    """
    spaces = _gym_spaces()

    fields: dict[str, Field] = {}
    if isinstance(observation_space, spaces.Dict):
        for key, sub in observation_space.spaces.items():
            fields[key] = field_from_space(f"observation_space[{key!r}]", sub, observation=True)
    else:
        fields["obs"] = field_from_space("observation_space", observation_space, observation=True)
    if "action" in fields:
        raise ConfigError(
            "observation_space: the Dict key 'action' would clash with the action field; "
            "rename the key (for example with a gymnasium observation wrapper)"
        )
    fields["action"] = field_from_space("action_space", action_space)
    return fields
