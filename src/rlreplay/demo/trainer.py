"""The run loop of ``rlreplay demo``: act, store, learn, evaluate, stop; then plot.

This module holds :class:`_Trainer` (one training run: the epsilon-greedy behaviour policy on
CartPole-v1, transitions through :class:`rlreplay.ReplayBuffer` built by :func:`_make_buffer`,
gradient steps, evaluations, the step and time budgets, the progress bar) and :func:`_plot`,
which draws the learning curve. gymnasium, tqdm and matplotlib are optional extras, imported
inside the functions that use them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

import rlreplay as rr
from rlreplay.demo.agent import _Agent, _Evaluator
from rlreplay.demo.config import ENV_ID, DemoConfig, EvalRecord

if TYPE_CHECKING:
    import gymnasium


def _make_buffer(env: gymnasium.Env[Any, Any], cfg: DemoConfig) -> rr.ReplayBuffer:
    """Build the replay buffer: float32 observations, integer actions, n-step windows."""
    obs_shape = env.observation_space.shape
    assert obs_shape is not None  # CartPole's Box space always has a shape.
    return rr.ReplayBuffer(
        capacity=cfg.capacity,
        fields={"obs": rr.Field(obs_shape, np.float32), "action": rr.Field((), np.int64)},
        num_envs=1,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        seed=cfg.seed,
    )


class _Trainer:
    """One training run: acts, stores transitions, learns, evaluates, and knows when to stop."""

    # Progress-bar and clock bookkeeping happen once per this many env steps: per-step tqdm
    # updates and clock reads would cost more than the env step itself.
    _TICK = 100

    def __init__(self, cfg: DemoConfig, started_at: float, out: TextIO) -> None:
        import gymnasium

        self._cfg = cfg
        self._started_at = started_at
        self._out = out
        self._env = gymnasium.make(ENV_ID)
        obs_shape = self._env.observation_space.shape
        action_space = self._env.action_space
        # CartPole: a Box of shape (4,) and Discrete(2); the asserts narrow the types.
        assert obs_shape is not None
        assert isinstance(action_space, gymnasium.spaces.Discrete)
        self._n_actions = int(action_space.n)
        self._agent = _Agent(int(np.prod(obs_shape)), self._n_actions, cfg)
        self._buffer = _make_buffer(self._env, cfg)
        self._evaluator = _Evaluator(cfg.eval_episodes, cfg.seed)
        self._rng = np.random.default_rng(cfg.seed)
        self.history: list[EvalRecord] = []
        self.episode_returns: list[tuple[int, float]] = []
        self.steps = 0
        self.passed = False
        self.stop_reason = f"step budget of {cfg.max_steps:,} env steps spent"

    def elapsed(self) -> float:
        """Seconds since the run's start."""
        return time.perf_counter() - self._started_at

    def run(self) -> None:
        """Train until an evaluation passes or a budget runs out."""
        from tqdm import tqdm

        cfg = self._cfg
        bar = tqdm(
            total=cfg.max_steps, file=sys.stderr, disable=cfg.quiet, unit="step",
            mininterval=0.5, dynamic_ncols=True, desc="dqn " + ENV_ID,
        )  # fmt: skip
        obs, _ = self._env.reset(seed=cfg.seed)
        episode_return = 0.0
        try:
            for step in range(1, cfg.max_steps + 1):
                obs, reward, done = self._env_step(obs, step)
                episode_return += reward
                if done:
                    self.episode_returns.append((step, episode_return))
                    episode_return = 0.0
                if step >= cfg.learning_starts and step % cfg.train_every == 0:
                    self._agent.update(self._buffer.sample(cfg.batch_size))
                self.steps = step
                if step % self._TICK == 0:
                    bar.update(self._TICK)
                    if self._out_of_time():
                        break
                if step % cfg.eval_every == 0 and self._evaluate(step, bar):
                    break
        finally:
            bar.update(self.steps - bar.n)  # The steps since the last tick.
            bar.close()
            self._env.close()
            self._evaluator.close()

    def _env_step(self, obs: np.ndarray[Any, Any], step: int) -> tuple[Any, float, bool]:
        """Take one epsilon-greedy step, store it; return (next obs to act on, reward, done)."""
        if self._rng.random() < self._cfg.epsilon(step):
            action = int(self._rng.integers(self._n_actions))
        else:
            action = int(self._agent.greedy(obs[None])[0])
        next_obs, reward, terminated, truncated, _ = self._env.step(action)
        done = bool(terminated or truncated)
        self._buffer.add(
            obs=obs, action=action, reward=float(reward), next_obs=next_obs,
            terminated=bool(terminated), truncated=bool(truncated),
        )  # fmt: skip
        if done:
            next_obs, _ = self._env.reset()
        return next_obs, float(reward), done

    def _out_of_time(self) -> bool:
        if self.elapsed() <= self._cfg.time_limit:
            return False
        self.stop_reason = f"time limit of {self._cfg.time_limit:g} s reached"
        return True

    def _evaluate(self, step: int, bar: Any) -> bool:
        """Evaluate the greedy policy, record it; return True if the run has passed."""
        mean_return = self._evaluator.evaluate(self._agent)
        record = EvalRecord(step=step, mean_return=mean_return, wall_time=self.elapsed())
        self.history.append(record)
        bar.set_postfix_str(f"eval {mean_return:.1f}", refresh=False)
        if not self._cfg.quiet:
            bar.write(
                f"eval @ {step:>7,} steps: mean return {mean_return:6.1f} "
                f"({record.wall_time:6.1f} s)",
                file=self._out,
            )
        if mean_return >= self._cfg.pass_return and record.wall_time <= self._cfg.time_limit:
            self.passed = True
            self.stop_reason = f"evaluation reached {self._cfg.pass_return:g}"
        return self.passed


def _plot(trainer: _Trainer, cfg: DemoConfig, path: Path) -> None:
    """Write the learning curve: training episode returns and evaluation means vs env steps."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 4.5), dpi=100, layout="constrained")
    # The Agg canvas is attached explicitly instead of going through pyplot, so the demo never
    # changes (or depends on) the process-wide matplotlib backend.
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if trainer.episode_returns:
        steps, returns = np.array(trainer.episode_returns, dtype=float).T
        ax.plot(steps, returns, color="tab:blue", alpha=0.3, lw=0.8, label="training episode")
        window = min(20, len(returns))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], smooth, color="tab:blue", lw=1.5, label=f"mean of {window}")
    if trainer.history:
        ax.plot(
            [r.step for r in trainer.history], [r.mean_return for r in trainer.history],
            "o-", color="tab:orange", lw=2, label=f"greedy eval ({cfg.eval_episodes} episodes)",
        )  # fmt: skip
    ax.axhline(cfg.pass_return, color="tab:green", ls="--", lw=1, label="pass threshold")
    verdict = "PASSED" if trainer.passed else "FAILED"
    ax.set_title(f"n-step DQN on {ENV_ID} (n={cfg.n_step}, seed={cfg.seed}): {verdict}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_ylim(0, 520)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
