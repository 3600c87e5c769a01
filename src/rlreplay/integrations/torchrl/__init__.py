"""TorchRL: replay buffers of TensorDicts for its collectors and losses.

``from rlreplay.integrations.torchrl import TensorDictReplayBuffer`` (or
:class:`TensorDictPrioritizedReplayBuffer`): extend it with a collector's TensorDicts (or pass
it as a collector's ``replay_buffer=``) and give its samples, in TorchRL's key layout, to
TorchRL's losses; n-step returns through ``n_step``. See ``docs/migrating/torchrl.md``.

Importing this package imports torch and checks that TorchRL's ``tensordict`` is installed
(it is imported at the first ``extend``); install them with ``pip install 'rlreplay[torchrl]'``.

Modules: :mod:`~rlreplay.integrations.torchrl.layout` (TensorDict leaves to core fields and
back) and :mod:`~rlreplay.integrations.torchrl.buffer` (the classes).
"""

import importlib.util

# Checked, not imported: importing tensordict has side effects (an environment variable, a
# cache directory) that importing rlreplay must not have; the buffers import it when used.
if importlib.util.find_spec("tensordict") is None:  # pragma: no cover - without the extra
    raise ModuleNotFoundError(
        "rlreplay.integrations.torchrl: expected torchrl (and its tensordict) to be installed, "
        "but tensordict is not importable; install it with: pip install 'rlreplay[torchrl]'",
        name="tensordict",
    )

from rlreplay.integrations.torchrl.buffer import (
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

__all__ = ["TensorDictPrioritizedReplayBuffer", "TensorDictReplayBuffer"]
