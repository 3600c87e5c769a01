"""Stand-in for ``keras_gym.base``: the errors and mixins the replay buffer uses."""

from rlreplay.compat.keras_gym.base import errors, mixins

__all__ = ["errors", "mixins"]
