"""Integrations: rlreplay inside the training frameworks people already use.

Each subpackage plugs the core buffer into one framework through that framework's own
extension points, and imports the framework when (and only when) it is imported itself:

* :mod:`rlreplay.integrations.sb3` -- a replay buffer class for Stable-Baselines3's off-policy
  algorithms (``DQN(..., replay_buffer_class=ReplayBuffer)``); needs ``rlreplay[sb3]``.
* :mod:`rlreplay.integrations.torchrl` -- TorchRL's TensorDict replay-buffer interface over the
  core (collectors' ``extend``, losses' ``update_tensordict_priority``); needs
  ``rlreplay[torchrl]``.

Subpackages are not imported here: ``import rlreplay`` never loads a framework.
"""
