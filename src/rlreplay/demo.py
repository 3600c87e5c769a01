"""``rlreplay demo``: an n-step DQN on CartPole-v1, fed by :class:`rlreplay.ReplayBuffer`.

The demo is the project's end-to-end check: a small PyTorch DQN learns CartPole-v1 on the CPU
from transitions that go through ``rr.ReplayBuffer`` (n-step returns, truncation bootstrapping).
Every ``eval_every`` env steps the greedy policy plays ``eval_episodes`` episodes in lockstep;
the run *passes* as soon as one evaluation's mean return reaches ``pass_return`` within
``time_limit`` seconds of wall clock, counted from process start when the CLI runs it.

torch, gymnasium, matplotlib and tqdm are optional extras (``pip install 'rlreplay[demo]'``), so
they are imported inside the functions that use them, never when ``rlreplay`` is imported.

Example:
    >>> from rlreplay.demo import DemoConfig, run_demo
    >>> result = run_demo(DemoConfig(seed=0))  # doctest: +SKIP
    >>> result.passed, result.history[-1].mean_return  # doctest: +SKIP
    (True, 500.0)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

import rlreplay as rr

if TYPE_CHECKING:
    import gymnasium
    import torch

__all__ = [
    "EXIT_FAILED",
    "EXIT_MISSING_EXTRA",
    "EXIT_PASSED",
    "DemoConfig",
    "DemoResult",
    "EvalRecord",
    "MissingExtraError",
    "demo_main",
    "format_history",
    "format_verdict",
    "process_start_time",
    "run_demo",
]

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_MISSING_EXTRA = 2

ENV_ID = "CartPole-v1"
INSTALL_HINT = "pip install 'rlreplay[demo]'"
PNG_NAME = "learning_curve.png"


class MissingExtraError(ImportError):
    """An optional dependency of the demo is not installed.

    It lives here rather than in ``rlreplay.errors`` because it concerns the optional demo, not
    the buffer: buffer users never see it.
    """


@dataclass(frozen=True)
class DemoConfig:
    """Everything that decides a demo run; the defaults are the tuned, tested ones.

    Attributes:
        seed: Seeds torch, the exploration RNG, the buffer's sampler and the environments.
        max_steps: Env-step budget; the run fails if it is spent without passing.
        time_limit: Wall-clock budget in seconds, counted from ``started_at`` (see
            :func:`run_demo`); the run fails once it is spent.
        n_step: Length of the n-step return window the buffer builds.
        out_dir: Directory the learning-curve PNG is written to (created if missing).
        quiet: Hide the progress bar and the per-evaluation lines.
        eval_every: Env steps between two evaluations of the greedy policy.
        eval_episodes: Episodes per evaluation, played in lockstep with batched forwards.
        pass_return: Mean evaluation return that counts as solved.
        gamma: Discount factor.
        hidden: Width of both hidden layers of the Q-network MLP.
        lr: Adam learning rate.
        batch_size: Transitions per gradient step.
        capacity: Replay buffer capacity (transitions).
        learning_starts: Env steps of pure exploration before the first gradient step.
        train_every: Env steps between gradient steps.
        tau: Polyak factor of the target network, applied after every gradient step.
        eps_start: Initial epsilon of the epsilon-greedy behaviour policy.
        eps_end: Final epsilon.
        eps_decay_steps: Env steps over which epsilon decays linearly to ``eps_end``.
        max_grad_norm: Gradient-norm clip; keeps early bootstrapped targets from blowing up.
        torch_threads: Intra-op threads for torch (see :func:`_configure_torch`).
    """

    seed: int = 0
    max_steps: int = 200_000
    time_limit: float = 300.0
    n_step: int = 3
    out_dir: Path = Path("demo_out")
    quiet: bool = False
    eval_every: int = 5_000
    eval_episodes: int = 20
    pass_return: float = 450.0
    gamma: float = 0.99
    hidden: int = 256
    lr: float = 1e-3
    batch_size: int = 128
    capacity: int = 100_000
    learning_starts: int = 1_000
    train_every: int = 1
    tau: float = 0.005
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_steps: int = 10_000
    max_grad_norm: float = 10.0
    torch_threads: int = 1

    def __post_init__(self) -> None:
        positive_ints = (
            "max_steps", "n_step", "eval_every", "eval_episodes", "hidden", "batch_size",
            "capacity", "train_every", "eps_decay_steps", "torch_threads",
        )  # fmt: skip
        for name in positive_ints:
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"DemoConfig.{name} must be a positive int, got {value!r}")
        if not self.time_limit > 0:  # Also rejects NaN.
            raise ValueError(f"DemoConfig.time_limit must be > 0 seconds, got {self.time_limit!r}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"DemoConfig.tau must be in (0, 1], got {self.tau!r}")

    def epsilon(self, step: int) -> float:
        """Return the behaviour policy's epsilon at env step ``step`` (linear decay)."""
        frac = min(1.0, step / max(1, self.eps_decay_steps))
        return self.eps_start + frac * (self.eps_end - self.eps_start)


@dataclass(frozen=True)
class EvalRecord:
    """One evaluation of the greedy policy.

    Attributes:
        step: Env steps taken when the evaluation ran.
        mean_return: Mean undiscounted return over the evaluation episodes.
        wall_time: Seconds since the run's start (process start under the CLI).
    """

    step: int
    mean_return: float
    wall_time: float


@dataclass
class DemoResult:
    """What a demo run produced.

    Attributes:
        passed: Whether an evaluation reached ``pass_return`` within the budgets.
        history: Every evaluation, in order.
        episode_returns: ``(env step at episode end, return)`` of every training episode.
        steps: Env steps taken.
        wall_time: Seconds from the run's start to the end of training.
        png_path: The learning-curve PNG.
        stop_reason: Why training stopped, in words.
    """

    passed: bool
    history: list[EvalRecord]
    episode_returns: list[tuple[int, float]]
    steps: int
    wall_time: float
    png_path: Path
    stop_reason: str

    @property
    def exit_code(self) -> int:
        """:data:`EXIT_PASSED` if the run passed, else :data:`EXIT_FAILED`."""
        return EXIT_PASSED if self.passed else EXIT_FAILED


def _require_extras() -> None:
    """Import the demo's optional dependencies once, so a missing one fails early and clearly.

    The functions below import what they use locally (a cached ``sys.modules`` lookup by then):
    that keeps ``import rlreplay`` free of them while mypy still sees their real types.

    Raises:
        MissingExtraError: One of them is not installed; the message says what to install.
    """
    try:
        import gymnasium  # noqa: F401
        import matplotlib  # noqa: F401
        import torch  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise MissingExtraError(
            f"the demo needs the optional package {missing!r}, which is not installed; "
            f"install the demo extra with: {INSTALL_HINT}"
        ) from exc


# A process older than this at the demo's start was doing something else before it (a REPL,
# a test session), so its start-up is not the demo's and the clock starts at the call instead.
_MAX_STARTUP_SECONDS = 60.0


def process_start_time() -> float:
    """Return the process start as a :func:`time.perf_counter` reading.

    The pass criterion counts start-up (interpreter, imports, Numba compilation), which all
    happens before any code of ours runs, so the start is read from ``/proc``. Where that is
    not available (not Linux), or the process is older than a start-up can be, the current
    time is returned.
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            stat = f.read()
        # Field 22 (starttime, in clock ticks since boot); the command name in field 2 may
        # contain spaces, so count from the closing parenthesis.
        start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    # A negative age means the clocks disagree (e.g. a time namespace): trust neither.
    return now - age if 0.0 <= age <= _MAX_STARTUP_SECONDS else now


def _configure_torch(cfg: DemoConfig) -> None:
    """Seed torch and size its thread pools.

    One intra-op thread by default: a 4-256-256-2 MLP on batches of 128 is small, so on 2 cores
    a second thread saved only ~20% of a gradient step on an idle machine, while with anything
    else running the threads spin-wait on each other (measured end to end, seed 0: 25 s to
    pass with one thread, 119 s with two).
    """
    import torch

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    # Only allowed before torch first runs parallel work; a second run in the same process
    # (tests) raises, and keeps the first setting, which is the same.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)


def _mlp(obs_dim: int, n_actions: int, hidden: int) -> torch.nn.Sequential:
    """Build the Q-network: obs -> Q-value per action."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(obs_dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, n_actions),
    )


class _Agent:
    """Double DQN with a Polyak-averaged target network and a Huber loss.

    Invariant: ``target`` has the architecture of ``q`` and is never trained directly.
    Cost: one gradient step is three forwards of ``batch_size`` rows and one backward.
    """

    def __init__(self, obs_dim: int, n_actions: int, cfg: DemoConfig) -> None:
        import torch

        self._cfg = cfg
        self.q = _mlp(obs_dim, n_actions, cfg.hidden)
        self.target = _mlp(obs_dim, n_actions, cfg.hidden)
        self.target.load_state_dict(self.q.state_dict())
        self.target.requires_grad_(False)
        # foreach: one fused call per Adam op instead of one per tensor; with six small
        # tensors the per-call overhead is most of the optimiser's cost.
        self._opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr, foreach=True)
        self._q_params = list(self.q.parameters())
        self._target_params = list(self.target.parameters())

    def greedy(self, obs: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Return the greedy action for each row of ``obs`` (shape ``(B, obs_dim)``)."""
        import torch

        with torch.no_grad():
            q_values = self.q(torch.as_tensor(obs, dtype=torch.float32))
        actions: np.ndarray[Any, np.dtype[np.int64]] = q_values.argmax(dim=1).numpy()
        return actions

    def update(self, batch: rr.Batch) -> float:
        """Take one gradient step on a sampled batch; return the loss."""
        import torch

        obs = torch.from_numpy(batch.obs)
        next_obs = torch.from_numpy(batch.next_obs)
        action = torch.from_numpy(batch.action).unsqueeze(1)
        with torch.no_grad():
            # Double DQN: the online net picks the next action, the target net values it,
            # which curbs max-operator overestimation.
            next_action = self.q(next_obs).argmax(dim=1, keepdim=True)
            next_q = self.target(next_obs).gather(1, next_action).squeeze(1)
            # The buffer already folds termination (0) versus truncation and n-step length
            # (gamma**m) into ``discount``, so truncated episodes bootstrap as they should.
            target = torch.from_numpy(batch.reward) + torch.from_numpy(batch.discount) * next_q
        q_taken = self.q(obs).gather(1, action).squeeze(1)
        loss = torch.nn.functional.smooth_l1_loss(q_taken, target)
        self._opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(self._q_params, self._cfg.max_grad_norm)
        self._opt.step()
        with torch.no_grad():
            for target_param, param in zip(self._target_params, self._q_params, strict=True):
                target_param.lerp_(param, self._cfg.tau)
        return float(loss.item())


class _Evaluator:
    """Plays ``episodes`` greedy episodes in lockstep, one batched forward per time step.

    The environments are built once and re-seeded per evaluation so each evaluation sees fresh
    but reproducible start states.
    """

    def __init__(self, episodes: int, seed: int) -> None:
        import gymnasium

        self._envs = [gymnasium.make(ENV_ID) for _ in range(episodes)]
        self._seed = seed
        self._calls = 0

    def evaluate(self, agent: _Agent) -> float:
        """Return the mean undiscounted return of the greedy policy."""
        n = len(self._envs)
        # Distinct seeds per evaluation and per episode, disjoint from the training env's.
        base = self._seed + 1_000_003 * (self._calls + 1)
        self._calls += 1
        obs = np.stack([env.reset(seed=base + i)[0] for i, env in enumerate(self._envs)])
        returns = np.zeros(n)
        alive = np.ones(n, dtype=bool)
        while alive.any():
            idx = np.flatnonzero(alive)
            actions = agent.greedy(obs[idx])
            for i, action in zip(idx, actions, strict=True):
                obs[i], reward, terminated, truncated, _ = self._envs[i].step(int(action))
                returns[i] += float(reward)
                alive[i] = not (terminated or truncated)
        return float(returns.mean())

    def close(self) -> None:
        """Close every environment."""
        for env in self._envs:
            env.close()


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


def run_demo(
    config: DemoConfig | None = None,
    *,
    started_at: float | None = None,
    out: TextIO | None = None,
) -> DemoResult:
    """Train the n-step DQN on CartPole-v1 and write its learning curve.

    Args:
        config: Run settings; ``DemoConfig()`` when omitted.
        started_at: :func:`time.perf_counter` reading the time limit counts from; now when
            omitted. The CLI passes :func:`process_start_time` so start-up counts too.
        out: Stream for the per-evaluation lines; ``sys.stdout`` when omitted.

    Returns:
        The run's outcome, evaluation history and the PNG's path.

    Raises:
        MissingExtraError: torch, gymnasium, matplotlib or tqdm is not installed.

    Example:
        >>> result = run_demo(DemoConfig(seed=1, quiet=True))  # doctest: +SKIP
        >>> result.exit_code  # doctest: +SKIP
        0
    """
    cfg = config or DemoConfig()
    start = time.perf_counter() if started_at is None else started_at
    _require_extras()
    _configure_torch(cfg)
    trainer = _Trainer(cfg, start, out or sys.stdout)
    trainer.run()
    wall_time = trainer.elapsed()
    png_path = Path(cfg.out_dir) / PNG_NAME
    _plot(trainer, cfg, png_path)
    return DemoResult(
        passed=trainer.passed,
        history=trainer.history,
        episode_returns=trainer.episode_returns,
        steps=trainer.steps,
        wall_time=wall_time,
        png_path=png_path,
        stop_reason=trainer.stop_reason,
    )


def format_history(history: Sequence[EvalRecord]) -> str:
    """Render the evaluation history as a fixed-width table."""
    lines = [f"{'step':>9}  {'mean return':>11}  {'wall time (s)':>13}"]
    lines += [f"{r.step:>9,}  {r.mean_return:>11.1f}  {r.wall_time:>13.1f}" for r in history]
    if not history:
        lines.append(f"{'(no evaluation ran)':>36}")
    return "\n".join(lines)


def format_verdict(result: DemoResult, config: DemoConfig) -> str:
    """Say in one line whether the run passed, and why."""
    if result.passed:
        last = result.history[-1]
        return (
            f"PASSED: mean return {last.mean_return:.1f} >= {config.pass_return:g} at step "
            f"{last.step:,} after {last.wall_time:.1f} s (limit {config.time_limit:g} s)"
        )
    if result.history:
        best = max(r.mean_return for r in result.history)
        shortfall = f"best mean return {best:.1f} < {config.pass_return:g}"
    else:
        shortfall = "no evaluation ran"
    return (
        f"FAILED: {shortfall}; stopped after {result.steps:,} steps and "
        f"{result.wall_time:.1f} s ({result.stop_reason})"
    )


def demo_main(
    config: DemoConfig | None = None,
    *,
    started_at: float | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the demo, print its evaluation table and verdict, and return the exit code.

    Args:
        config: Run settings; ``DemoConfig()`` when omitted.
        started_at: See :func:`run_demo`.
        out: Stream for the report; ``sys.stdout`` when omitted.

    Returns:
        :data:`EXIT_PASSED` (0), :data:`EXIT_FAILED` (1), or :data:`EXIT_MISSING_EXTRA` (2)
        when an optional dependency is missing.
    """
    cfg = config or DemoConfig()
    stream = out or sys.stdout
    try:
        result = run_demo(cfg, started_at=started_at, out=stream)
    except MissingExtraError as exc:
        print(f"rlreplay demo: {exc}", file=sys.stderr)
        return EXIT_MISSING_EXTRA
    print(f"\nEvaluation history ({cfg.eval_episodes} greedy episodes each):", file=stream)
    print(format_history(result.history), file=stream)
    print(f"learning curve: {result.png_path}", file=stream)
    print(format_verdict(result, cfg), file=stream)
    return result.exit_code
