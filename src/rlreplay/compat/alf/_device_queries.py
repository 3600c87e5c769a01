"""ALF's position queries and checkpoint state of the device-backed buffer (private).

A part of :class:`rlreplay.compat.alf._device.DeviceReplayBuffer`, as ``_queries`` is of the
host-backed buffer: ``steps_to_episode_end``, ``get_episode_begin_position``,
``get_disc_0_begin_position`` (computed on the device from
:class:`~rlreplay.compat.alf._device_episodes.DeviceEpisodes`, after the stored ranges are
checked on the host) and the ``state_dict`` extra state. The attributes are set by the
buffer's constructor and only declared here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlreplay import ConfigError, FieldError, InvalidIdError
from rlreplay.compat.alf._device_episodes import DeviceEpisodes
from rlreplay.compat.alf._nest import broadcast_ids

__all__ = ["DeviceQueries"]

Array = np.ndarray[Any, Any]


class DeviceQueries:
    """Position queries and extra state of the device-backed ALF buffer (a mixin)."""

    _bounds: Callable[[], tuple[Array, Array]]
    _dev: Any  # the rlreplay.torch.DeviceReplayBuffer
    _device: torch.device
    _discount: str | None
    _enable_checkpoint: bool
    _episodes: DeviceEpisodes | None
    _gen: torch.Generator | None
    _known: tuple[Array, Array] | None
    _num_envs: int
    _prio: torch.Tensor | None
    _require_episodic: Callable[[str], None]
    _rng: np.random.Generator
    _top: torch.Tensor | None

    # ------------------------------------------------------------------ episodes
    def _stored(
        self, what: str, env_ids: Any, positions: Any
    ) -> tuple[DeviceEpisodes, torch.Tensor, torch.Tensor, tuple[int, ...]]:
        """``(episodes, env, pos, shape)``: the broadcast ids as flat tensors on ``device``,
        checked to be stored (the envs' stored ranges are read from the device).

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.InvalidIdError: A position not stored (overwritten or never added).
        """
        self._require_episodic(what)
        assert self._episodes is not None
        env, pos, _ = broadcast_ids(env_ids, positions, self._num_envs)
        heads, counts = self._bounds()
        bad = (pos < heads[env]) | (pos >= counts[env])
        if bad.any():
            raise InvalidIdError(
                f"{what}: positions not stored (overwritten or never added): env "
                f"{env[bad][:5].tolist()} at positions {pos[bad][:5].tolist()}"
            )
        dev = self._device
        flat_env = torch.from_numpy(env.reshape(-1)).to(dev)
        flat_pos = torch.from_numpy(pos.reshape(-1)).to(dev)
        return self._episodes, flat_env, flat_pos, env.shape

    def steps_to_episode_end(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """The distance from each stored step to its episode's end (the step before the
        env's next ``FIRST``, or the env's newest step), as the host-backed buffer's
        :meth:`~rlreplay.compat.alf.replay_buffer.ReplayBuffer.steps_to_episode_end`.
        Computed on the device (``O(n log(max_length))``) after reading the stored ranges.

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.InvalidIdError: A position not stored.
        """
        ep, env, p, shape = self._stored("steps_to_episode_end", env_ids, pos)
        out = ep.steps_to_end(env, p, self._dev.stored_bounds[1])
        return out.reshape(shape)

    def get_episode_begin_position(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """The position of the first step of each stored step's episode (maybe no longer
        stored), as the host-backed buffer's; gathered on the device.

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.InvalidIdError: A position not stored.
        """
        ep, env, p, shape = self._stored("get_episode_begin_position", env_ids, pos)
        return ep.begin_of(env, p).reshape(shape)

    def get_disc_0_begin_position(self, pos: Any, env_ids: Any) -> torch.Tensor:
        """Where the discount-0 segment of each stored step begins, as the host-backed
        buffer's; gathered on the device.

        Raises:
            ReplayAssertionError: ``keep_episodic_info`` is False.
            rlreplay.FieldError: ``data_spec`` has no scalar top-level ``discount``.
            rlreplay.InvalidIdError: A position not stored.
        """
        self._require_episodic("get_disc_0_begin_position")
        if self._discount is None:
            raise FieldError("get_disc_0_begin_position: data_spec has no scalar 'discount'")
        ep, env, p, shape = self._stored("get_disc_0_begin_position", env_ids, pos)
        return ep.disc0_of(env, p).reshape(shape)

    # ------------------------------------------------------------------ state
    def get_extra_state(self) -> dict[str, Any]:
        """The full state for ``state_dict()`` (``{}`` unless ``enable_checkpoint``), on the
        host: the steps (the NumPy core's ``state_dict`` of
        ``rlreplay.torch.to_replay_buffer(device_buffer)``), the draws' generators, the
        priorities and the episode information. Waits for the device."""
        if not self._enable_checkpoint:
            return {}
        import rlreplay.torch as rrt

        gen = self._gen
        state: dict[str, Any] = {
            "device_buffer": rrt.to_replay_buffer(self._dev).state_dict(),
            "rng": self._rng.bit_generator.state,
            "draws_generator": None if gen is None else gen.get_state(),
            "priorities": None if self._prio is None else self._prio.cpu().clone(),
            "max_priorities": None if self._top is None else self._top.cpu().clone(),
            "episodes": None if self._episodes is None else self._episodes.state_dict(),
        }
        return state

    def set_extra_state(self, state: Any) -> None:
        """Restore :meth:`get_extra_state` onto ``device`` (ignored unless
        ``enable_checkpoint``): the same contents, and the same draws after the load.

        Raises:
            rlreplay.ConfigError: Not the state of a device-backed buffer with
                ``enable_checkpoint``, or of one with or without priorities or episode
                information where this one differs.
            rlreplay.CheckpointError: The steps' configuration differs (checked as the NumPy
                core checks a checkpoint). Nothing is changed when an error is raised.
        """
        if not self._enable_checkpoint or not state:
            return
        import rlreplay.torch as rrt

        if not isinstance(state, dict) or "device_buffer" not in state:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ConfigError(
                "enable_checkpoint: expected the state of a device-backed ALF buffer "
                f"(keys device_buffer, rng, ...), got {got}"
            )
        for key, have in (("priorities", self._prio), ("episodes", self._episodes)):
            if (state.get(key) is None) != (have is None):
                raise ConfigError(
                    f"enable_checkpoint: the state {'has' if have is None else 'lacks'} "
                    f"{key}; load it into a buffer built with the same options"
                )
        host = rrt.to_replay_buffer(self._dev)
        host.load_state_dict(state["device_buffer"])  # checked: raises before any change
        self._dev = rrt.from_replay_buffer(host, device=self._device, finals_per_env=1, seed=0)
        self._known = None
        gen = None
        if state["draws_generator"] is not None:
            gen = torch.Generator(device=self._device)
            gen.set_state(state["draws_generator"])
        self._gen = gen
        self._rng.bit_generator.state = state["rng"]
        if self._prio is not None and self._top is not None:
            self._prio.copy_(torch.as_tensor(state["priorities"]).to(self._device))
            self._top.copy_(torch.as_tensor(state["max_priorities"]).to(self._device))
        if self._episodes is not None:
            self._episodes.load_state_dict(state["episodes"])
