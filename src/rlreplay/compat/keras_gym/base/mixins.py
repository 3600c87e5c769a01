"""Stand-in for ``keras_gym.base.mixins``: the mixins the replay buffer inherits.

:class:`RandomStateMixin` and :class:`ActionSpaceMixin` as keras-gym 0.2.17 writes them (gym
spaces are recognised by class name, so gym and gymnasium both work), and keras-gym's
``utils.get_env_attr``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlreplay.compat.keras_gym.base.errors import (
    ActionAssertionError,
    ActionSpaceError,
    ActionValueError,
)

__all__ = ["ActionSpaceMixin", "RandomStateMixin", "get_env_attr"]


class RandomStateMixin:
    """keras-gym's ``RandomStateMixin``: ``random`` is a ``RandomState`` of ``random_seed``."""

    random: np.random.RandomState
    _random_seed: Any

    @property
    def random_seed(self) -> Any:
        """The seed of :attr:`random`; setting it creates a new ``RandomState`` (any time)."""
        return self._random_seed

    @random_seed.setter
    def random_seed(self, new_random_seed: Any) -> None:
        self._random_seed = new_random_seed
        self.random = np.random.RandomState(new_random_seed)

    @random_seed.deleter
    def random_seed(self) -> None:
        self._random_seed = None
        self.random = np.random.RandomState(None)


class ActionSpaceMixin:
    """keras-gym's ``ActionSpaceMixin``: properties of ``self.env.action_space``."""

    env: Any

    @property
    def action_space_is_box(self) -> bool:
        """Whether ``env.action_space`` is a ``Box``."""
        return _is_space(self.env.action_space, "Box")

    @property
    def action_space_is_discrete(self) -> bool:
        """Whether ``env.action_space`` is a ``Discrete`` space (actions are one-hot encoded)."""
        return _is_space(self.env.action_space, "Discrete")

    @property
    def actions_ndim(self) -> int:
        """Number of dimensions of a ``Box`` action (at least 1).

        Raises:
            ActionSpaceError: The action space is not a ``Box``.
        """
        if not self.action_space_is_box:
            raise ActionSpaceError(
                "actions_ndim attribute is inaccesible; does the env have a Box action space? "
                f"It has {self.env.action_space!r}"
            )
        return len(self.env.action_space.shape) or 1

    @property
    def num_actions(self) -> int:
        """Number of actions of a ``Discrete`` action space.

        Raises:
            ActionSpaceError: The action space is not ``Discrete``.
        """
        if not self.action_space_is_discrete:
            raise ActionSpaceError(
                "num_actions property is inaccessible; does the env have a Discrete action "
                f"space? It has {self.env.action_space!r}"
            )
        return int(self.env.action_space.n)

    def _one_hot_encode_discrete(self, a: Any) -> Any:
        """keras-gym's ``ActionSpaceMixin._one_hot_encode_discrete``.

        A 1-d array of ``num_actions`` entries is taken as one-hot already; anything else must
        be a Python or NumPy integer scalar (``AssertionError`` otherwise: a float, a 0-d
        array) in ``[0, num_actions)`` (``ValueError`` otherwise, from keras-gym's ``one_hot``).
        """
        n = self.num_actions
        if not (np.ndim(a) == 1 and a.size == n):  # a list has no .size: AttributeError
            if not (np.ndim(a) == 0 and isinstance(a, (int, np.integer))):
                raise ActionAssertionError(
                    f"a: expected an int action of Discrete({n}) or a one-hot array of "
                    f"{n} entries, got {a!r}"
                )
            if not 0 <= a < n:
                raise ActionValueError(
                    f"i must be non-negative and smaller than n: a={a}, num_actions={n}"
                )
            one_hot = np.zeros(n)
            one_hot[int(a)] = 1.0
            return one_hot
        return a


def get_env_attr(env: Any, attr: str, default: Any, max_depth: int = 100) -> Any:
    """``getattr`` on ``env`` or the first env it wraps (``.env`` chain) that has ``attr``.

    keras-gym's ``get_env_attr``: gymnasium wrappers no longer forward attributes, so the
    chain is walked explicitly.
    """
    e = env
    for _ in range(max_depth):
        if hasattr(e, attr):
            return getattr(e, attr)
        if not hasattr(e, "env"):
            break
        e = e.env
    return default


def _is_space(space: Any, name: str) -> bool:
    """Whether ``space`` is a gym/gymnasium space class called ``name`` (or a subclass).

    By class name, so neither gym nor gymnasium has to be imported and both work.
    """
    return any(cls.__name__ == name for cls in type(space).__mro__)
