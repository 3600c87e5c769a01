"""keras-gym's replay API on rlreplay: change the import line, keep the code.

Replace ``from keras_gym.caching import ExperienceReplayBuffer`` by
``from rlreplay.compat.keras_gym.caching import ExperienceReplayBuffer`` (or import it from
this package); ``keras_gym.base.errors`` is :mod:`rlreplay.compat.keras_gym.base.errors`.
The differences from keras-gym are listed in ``docs/migrating/keras_gym.md``.

Example:
    >>> import rlreplay.compat.keras_gym as km
    >>> km.caching.ExperienceReplayBuffer is km.ExperienceReplayBuffer
    True
"""

from rlreplay.compat.keras_gym import base, caching
from rlreplay.compat.keras_gym.base.errors import InsufficientCacheError, NumpyArrayCheckError
from rlreplay.compat.keras_gym.caching import ExperienceReplayBuffer

__all__ = [
    "ExperienceReplayBuffer",
    "InsufficientCacheError",
    "NumpyArrayCheckError",
    "base",
    "caching",
]
