"""Stand-in for ``keras_gym.caching``: the experience replay buffer."""

from rlreplay.compat.keras_gym.caching import experience_replay
from rlreplay.compat.keras_gym.caching.experience_replay import ExperienceReplayBuffer

__all__ = ["ExperienceReplayBuffer", "experience_replay"]
