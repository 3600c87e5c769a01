"""Stand-in for ``keras_gym.base``: only the error classes the replay buffer raises."""

from rlreplay.compat.keras_gym.base import errors

__all__ = ["errors"]
