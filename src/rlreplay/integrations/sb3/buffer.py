"""The replay buffer class for Stable-Baselines3's off-policy algorithms, over the core buffer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer
from stable_baselines3.common.vec_env import VecNormalize

import rlreplay as rr
from rlreplay.integrations.sb3.layout import Layout, byte_rows
from rlreplay.integrations.sb3.samples import DictSamples, Samples, convert

__all__ = ["ReplayBuffer"]

Array = np.ndarray[Any, Any]


class ReplayBuffer(SB3ReplayBuffer):
    """Stable-Baselines3's replay buffer, stored and sampled by :class:`rlreplay.ReplayBuffer`.

    Pass the class to any off-policy algorithm; options go in ``replay_buffer_kwargs``::

        from stable_baselines3 import DQN
        from rlreplay.integrations.sb3 import ReplayBuffer

        model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=ReplayBuffer,
                    replay_buffer_kwargs={"n_steps": 3, "gamma": 0.99})

    It is a subclass of SB3's ``ReplayBuffer`` (so SB3's ``load_replay_buffer`` accepts it) but
    allocates none of SB3's arrays: every step goes to a core buffer with one ring of
    ``buffer_size // n_envs`` steps per env, each observation stored once. ``sample`` returns
    SB3's ``ReplayBufferSamples`` (``DictReplayBufferSamples`` for a ``Dict`` observation
    space) as tensors on ``device``, with ``ids`` and ``weights`` added (see
    :class:`~rlreplay.integrations.sb3.Samples`).

    What follows SB3: the constructor's arguments, ``add(obs, next_obs, action, reward, done,
    infos)``, ``extend``, ``size()``, ``pos``, ``full``, ``reset()``, dtypes and shapes
    (``(B, *obs_shape)``, actions ``(B, action_dim)``, ``(B, 1)`` rewards and dones),
    ``handle_timeout_termination`` (a done with ``infos[i]["TimeLimit.truncated"]`` bootstraps
    from its next observation; with ``False`` every done is terminal), ``VecNormalize`` given
    to ``sample``, pickling (``save_replay_buffer`` / ``load_replay_buffer``), and SB3's
    random seeding: without ``seed`` the core's generator is seeded from NumPy's global one,
    which ``set_random_seed`` (an algorithm's ``seed=``) seeds.

    What differs:

    * A transition becomes sampleable once its next observation is known: at once when it
      ends an episode, else at the next ``add`` (n-step: once its ``n`` steps are stored).
      While nothing is sampleable yet, ``sample`` draws among each env's newest step (one
      step, as SB3 would); after that, only transitions with complete windows.
    * Windows never cross an episode's end, never mix envs and never read an overwritten step.
      When an ``add``'s ``obs`` is not the previous step's ``next_obs`` for an env whose
      episode was running (an env reset by a new ``learn()``, say), that episode is ended
      there as truncated with its stored ``next_obs``, so no transition joins two episodes.
    * ``optimize_memory_usage`` is accepted with either ``handle_timeout_termination`` and
      changes nothing: observations are stored once anyway, with the true final observation
      of every episode.
    * ``observations``, ``actions``, ``rewards``, ``dones`` and ``timeouts`` are read-only
      *snapshots* in SB3's ``(buffer_size, n_envs, ...)`` layout, assembled on each access
      (for inspection; writes to them change nothing). ``next_observations`` is not kept,
      as in SB3 with ``optimize_memory_usage``. The core buffer is :attr:`core`.

    n-step returns: ``n_steps`` (SB3's ``NStepReplayBuffer`` name; ``n_step`` also works) and
    ``gamma`` (required with ``n_steps > 1``: give the algorithm's ``gamma``). Samples then
    hold the discounted ``n``-step reward sum, the next observation ``n`` steps on (or the
    episode's final one), ``dones`` = 1 if the episode terminated inside the window, and
    ``discounts = gamma ** steps``, which SB3's DQN, SAC, TD3 and DDPG (2.7 and later) use in
    their targets.

    Prioritized replay: ``prioritized=True`` with ``alpha``, ``beta``, ``beta_final``,
    ``beta_steps``, ``eps`` (:class:`rlreplay.PrioritizedReplayBuffer`'s). SB3's algorithms
    neither weight their losses nor report TD errors, so with them every transition keeps its
    first priority and sampling stays uniform; an algorithm that uses it multiplies its
    per-sample loss by ``samples.weights`` and calls
    ``update_priorities(samples.ids, td_errors)``.

    Args:
        buffer_size: Transitions kept over all envs (SB3's meaning).
        observation_space: Box, Discrete, MultiDiscrete, MultiBinary or Dict of those.
        action_space: Box, Discrete, MultiDiscrete or MultiBinary.
        device: Where sampled tensors go (``"auto"``: CUDA if available).
        n_envs: Parallel envs; every ``add`` argument has a leading axis ``n_envs``.
        optimize_memory_usage: Accepted; observations are stored once either way.
        handle_timeout_termination: Timeouts bootstrap (as in SB3).
        n_steps: Window length ``n >= 1``.
        n_step: Another name for ``n_steps`` (rlreplay's).
        gamma: Discount of the ``n``-step sums; required when ``n > 1``.
        prioritized: Sample by priority (proportional PER).
        alpha: Prioritization exponent.
        beta: Importance-sampling exponent at the first sample.
        beta_final: Exponent reached after ``beta_steps`` samples (0: ``beta`` throughout).
        beta_steps: Number of ``sample`` calls over which ``beta`` moves to ``beta_final``.
        eps: Added to every priority given to :meth:`update_priorities`.
        seed: Seed of the core's generator (default: drawn from NumPy's global generator).

    Raises:
        ValueError: A bad argument (``rlreplay.ConfigError``), or ``n_steps > 1`` without
            ``gamma``.

    Cost: ``add`` is one core ``add`` plus one comparison of each env's observation with the
    previous ``next_obs``; ``sample`` is one core ``sample`` and one tensor per field.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        n_steps: int | None = None,
        n_step: int | None = None,
        gamma: float | None = None,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_steps: int = 0,
        eps: float = 1e-6,
        seed: int | None = None,
    ) -> None:
        # SB3's BaseBuffer only (spaces, device, counters), as SB3's DictReplayBuffer does:
        # none of SB3's arrays are allocated.
        BaseBuffer.__init__(
            self, buffer_size, observation_space, action_space, device, n_envs=n_envs
        )
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.handle_timeout_termination = bool(handle_timeout_termination)
        if n_steps is not None and n_step is not None and n_steps != n_step:
            raise rr.ConfigError(f"n_steps={n_steps} and n_step={n_step}: give one of them")
        window = n_steps if n_steps is not None else (n_step if n_step is not None else 1)
        if gamma is None and window != 1:
            raise rr.ConfigError(
                f"gamma: required with n_steps={window} (the n-step sums are discounted by "
                "it); pass the algorithm's gamma, e.g. replay_buffer_kwargs={'n_steps': "
                f"{window}, 'gamma': 0.99}}"
            )
        self.layout = Layout.of(observation_space, action_space)
        if seed is None:
            # SB3's set_random_seed seeds NumPy's legacy global generator: a seeded algorithm
            # gets a seeded buffer.
            seed = int(np.random.randint(0, 2**31 - 1))  # noqa: NPY002
        # Each env keeps SB3's buffer_size steps, and at least one window plus its next step.
        per_env = max(self.buffer_size, window + 1)
        options: dict[str, Any] = {
            "num_envs": n_envs, "n_step": window, "gamma": 0.99 if gamma is None else gamma,
            "seed": seed,
        }  # fmt: skip
        self.core: rr.ReplayBuffer
        if prioritized:
            self.core = rr.PrioritizedReplayBuffer(
                per_env * n_envs, self.layout.fields(), alpha=alpha, beta=beta,
                beta_final=beta_final, beta_steps=beta_steps, eps=eps, **options,
            )  # fmt: skip
        else:
            self.core = rr.ReplayBuffer(per_env * n_envs, self.layout.fields(), **options)
        self.prioritized = bool(prioritized)
        self.n_steps = self.core.n_step
        self.gamma = self.core.gamma
        self._reset_tracking()

    def _reset_tracking(self) -> None:
        """Forget the newest steps (after construction and :meth:`reset`)."""
        n = self.n_envs
        # Core id of the step at each of SB3's (pos, env) positions; -1: none yet.
        self._ids = np.full((self.buffer_size, n), -1, np.int64)
        # Each env's newest step, as given to the core (with its next observations); `_open`:
        # that step did not end its episode (the core waits for its successor).
        self._newest: dict[str, Array] = {}
        self._open = np.zeros(n, bool)

    # ------------------------------------------------------------------ writing
    def add(
        self,
        obs: Array | dict[str, Array],
        next_obs: Array | dict[str, Array],
        action: Array,
        reward: Array,
        done: Array,
        infos: list[dict[str, Any]],
    ) -> None:
        """Store one step of every env (SB3's ``add``: each argument has a leading axis
        ``n_envs``; ``next_obs`` is the true next observation, the final one at a done)."""
        n = self.n_envs
        values = self.layout.step(
            obs, next_obs, action, reward, done, infos,
            n_envs=n, handle_timeout_termination=self.handle_timeout_termination,
        )  # fmt: skip
        if np.count_nonzero(self._open):
            self._cut_discontinuities(values)
        if n == 1:
            ids = self.core.add(**{k: v[0] for k, v in values.items()})
        else:
            ids = self.core.add(**values)
        self._ids[self.pos] = ids
        self._newest = values
        self._open = ~(values["terminated"] | values["truncated"])
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def _cut_discontinuities(self, values: Mapping[str, Array]) -> None:
        """End, as truncated at their stored ``next_obs``, the running episodes of envs whose
        new observation is not that ``next_obs``: the core would otherwise take the new
        observation as the next one of the previous step."""
        cut = np.zeros(self.n_envs, bool)
        for name in self.layout.names:
            before, now = self._newest[f"next_{name}"], values[name]
            if before.tobytes() == now.tobytes():  # every env continues (one memcmp)
                continue
            cut |= (byte_rows(before) != byte_rows(now)).any(axis=1)
        if not np.count_nonzero(cut):
            return
        for e in np.flatnonzero(cut & self._open):
            final = {f"next_{name}": self._newest[f"next_{name}"][e] for name in self.layout.names}
            self.core.end_episode(int(e), **final)
            self._open[e] = False

    def reset(self) -> None:
        """Drop every stored transition (SB3's ``reset``; the core's ``clear``)."""
        super().reset()
        self.core.clear()
        self._reset_tracking()

    # ------------------------------------------------------------------ sampling
    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None
    ) -> Samples | DictSamples:
        """Draw ``batch_size`` transitions (uniformly, or by priority), as SB3's samples.

        Args:
            batch_size: Number of transitions (with replacement).
            env: SB3's ``VecNormalize``, to normalize observations and rewards (as SB3's).

        Raises:
            ValueError: Nothing was added since construction or :meth:`reset`
                (``rlreplay.EmptyBufferError``).
        """
        try:
            batch = self.core.sample(batch_size)
        except rr.EmptyBufferError:
            if not self._open.any():
                raise
            batch = self._newest_batch(batch_size)
        return self._convert(batch, env)

    def _newest_batch(self, batch_size: int) -> rr.Batch:
        """A batch drawn among each env's newest step, one-step (before anything is
        sampleable: the first steps of every env)."""
        envs = np.flatnonzero(self._open)
        pick = envs[self.core.rng.integers(0, envs.size, size=batch_size)]
        data = {k: v[pick] for k, v in self._newest.items()}
        data["steps"] = np.ones(batch_size, np.int64)
        data["ids"] = self._ids[(self.pos - 1) % self.buffer_size, pick]
        data["weights"] = np.ones(batch_size, np.float32)
        return rr.Batch(data)

    def _get_samples(  # type: ignore[override]
        self, batch_inds: Array, env: VecNormalize | None = None
    ) -> Samples | DictSamples:
        """The transitions at SB3's positions ``batch_inds``, each of a random env (as SB3's
        ``_get_samples``). Each must be sampleable (:meth:`sample` only draws those).

        Raises:
            ValueError: A position holds no sampleable transition
                (``rlreplay.InvalidIdError``).
        """
        env_indices = self.core.rng.integers(0, self.n_envs, size=len(batch_inds))
        return self._convert(self.core.get_transitions(self._ids[batch_inds, env_indices]), env)

    def _convert(self, batch: rr.Batch, env: VecNormalize | None) -> Samples | DictSamples:
        def step_rewards() -> Array:
            seq = self.core.get_sequences(batch.ids, self.n_steps)
            return np.where(seq.mask, seq.reward, 0.0).astype(np.float32)

        return convert(
            batch, self.layout, n_step=self.n_steps, gamma=self.gamma, device=self.device,
            env=env, step_rewards=step_rewards,
        )  # fmt: skip

    # ------------------------------------------------------------------ priorities
    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Set the priorities of sampled transitions, typically ``|TD error|``.

        Args:
            ids: ``samples.ids``.
            priorities: One finite number ``>= 0`` per id: an array or a tensor (any device;
                ``(B,)`` or ``(B, 1)``).

        Returns:
            How many ids were ignored because their transition was overwritten since.

        Raises:
            TypeError: The buffer was built without ``prioritized=True``.
            ValueError: A negative or non-finite priority, or an id this buffer never issued.
        """
        core = self.core
        if not isinstance(core, rr.PrioritizedReplayBuffer):
            raise TypeError(
                "update_priorities: this buffer samples uniformly; build it with "
                "replay_buffer_kwargs={'prioritized': True, ...}"
            )
        if isinstance(priorities, th.Tensor):
            priorities = priorities.detach().cpu().numpy()
        id_arr = np.asarray(ids)
        return core.update_priorities(id_arr, np.asarray(priorities).reshape(id_arr.shape))

    # ------------------------------------------------------------------ SB3's arrays, read-only
    def _snapshot(self, name: str) -> Array:
        """Field ``name`` at SB3's ``(pos, env)`` positions (zeros where nothing is stored)."""
        field = self.core.schema.fields[name]
        out = np.zeros((self.buffer_size, self.n_envs, *field.shape), field.dtype)
        # Every id in the table is stored: the core keeps at least each env's newest
        # buffer_size steps, and reset() empties the table with the core.
        live = self._ids >= 0
        if live.any():
            out[live] = self.core.get_field(name, self._ids[live])
        return out

    @property
    def observations(self) -> Any:  # type: ignore[override]
        """A copy of the stored observations, ``(buffer_size, n_envs, *obs_shape)`` (a dict
        of them for a ``Dict`` space)."""
        keys = self.layout.keys
        if keys is None:
            return self._snapshot("obs")
        return {k: self._snapshot(n) for k, n in zip(keys, self.layout.names, strict=True)}

    @property
    def actions(self) -> Array:  # type: ignore[override]
        """A copy of the stored actions, ``(buffer_size, n_envs, action_dim)``."""
        return self._snapshot("action")

    @property
    def rewards(self) -> Array:  # type: ignore[override]
        """A copy of the stored rewards, float32 ``(buffer_size, n_envs)``."""
        return self._snapshot("reward")

    @property
    def dones(self) -> Array:  # type: ignore[override]
        """A copy of the done flags (terminated or truncated), float32 ``(buffer_size,
        n_envs)``; writing to it changes nothing (the buffer ends episodes itself)."""
        ended = self._snapshot("terminated") | self._snapshot("truncated")
        return ended.astype(np.float32)

    @property
    def timeouts(self) -> Array:  # type: ignore[override]
        """A copy of the timeout flags (steps that ended their episode truncated), float32
        ``(buffer_size, n_envs)``."""
        return self._snapshot("truncated").astype(np.float32)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(buffer_size={self.buffer_size}, n_envs={self.n_envs}, "
            f"n_steps={self.n_steps}, prioritized={self.prioritized}, size={self.size()}, "
            f"device={self.device})"
        )
