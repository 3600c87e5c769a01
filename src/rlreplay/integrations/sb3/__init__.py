"""Stable-Baselines3: a replay buffer class for its off-policy algorithms.

``from rlreplay.integrations.sb3 import ReplayBuffer`` and pass it as ``replay_buffer_class``
to ``DQN``, ``SAC``, ``TD3`` or ``DDPG``; n-step returns and prioritized sampling come through
``replay_buffer_kwargs``. See :class:`ReplayBuffer` and ``docs/migrating/sb3.md``.

Importing this package imports Stable-Baselines3 (and so torch and gymnasium); install them
with ``pip install 'rlreplay[sb3]'``.

Modules: :mod:`~rlreplay.integrations.sb3.layout` (spaces to fields, SB3's ``add`` arguments
to one core step), :mod:`~rlreplay.integrations.sb3.samples` (core batches to SB3's sample
tuples) and :mod:`~rlreplay.integrations.sb3.buffer` (the class).
"""

try:
    import stable_baselines3  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ModuleNotFoundError(
        "rlreplay.integrations.sb3: expected stable-baselines3 to be installed, but it is not "
        f"importable ({exc}); install it with: pip install 'rlreplay[sb3]'",
        name="stable_baselines3",
    ) from exc

from rlreplay.integrations.sb3.buffer import ReplayBuffer
from rlreplay.integrations.sb3.samples import DictSamples, Samples

__all__ = ["DictSamples", "ReplayBuffer", "Samples"]
