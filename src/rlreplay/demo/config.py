"""The settings and results of ``rlreplay demo`` (see :mod:`rlreplay.demo`).

This module holds the demo's constants (exit codes, environment id, install hint, PNG name),
:class:`MissingExtraError`, the run settings :class:`DemoConfig` and what a run returns
(:class:`EvalRecord`, :class:`DemoResult`). It imports none of the optional extras, so
:mod:`rlreplay.demo` and the CLI can use it whether or not they are installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV_ID",
    "EXIT_FAILED",
    "EXIT_MISSING_EXTRA",
    "EXIT_PASSED",
    "INSTALL_HINT",
    "PNG_NAME",
    "DemoConfig",
    "DemoResult",
    "EvalRecord",
    "MissingExtraError",
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
        torch_threads: Intra-op threads for torch (see
            :func:`rlreplay.demo.agent._configure_torch`).
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
