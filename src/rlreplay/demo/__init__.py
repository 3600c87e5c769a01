"""``rlreplay demo``: an n-step DQN on CartPole-v1, fed by :class:`rlreplay.ReplayBuffer`.

The demo is the project's end-to-end check: a small PyTorch DQN learns CartPole-v1 on the CPU
from transitions that go through ``rr.ReplayBuffer`` (n-step returns, truncation bootstrapping).
Every ``eval_every`` env steps the greedy policy plays ``eval_episodes`` episodes in lockstep;
the run *passes* as soon as one evaluation's mean return reaches ``pass_return`` within
``time_limit`` seconds of wall clock, counted from process start when the CLI runs it.

torch, gymnasium, matplotlib and tqdm are optional extras (``pip install 'rlreplay[demo]'``), so
they are imported inside the functions that use them, never when ``rlreplay`` is imported.

This module holds the entry points (:func:`run_demo`, :func:`demo_main`), the report's
formatting and the start-up clock; the settings and results live in
:mod:`rlreplay.demo.config`, the DQN agent and its evaluator in :mod:`rlreplay.demo.agent`, the
training loop and the learning-curve plot in :mod:`rlreplay.demo.trainer`. Every public name
stays importable from here.

Example:
    >>> from rlreplay.demo import DemoConfig, run_demo
    >>> result = run_demo(DemoConfig(seed=0))  # doctest: +SKIP
    >>> result.passed, result.history[-1].mean_return  # doctest: +SKIP
    (True, 500.0)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from rlreplay.demo.agent import _configure_torch
from rlreplay.demo.config import ENV_ID as ENV_ID
from rlreplay.demo.config import (
    EXIT_FAILED,
    EXIT_MISSING_EXTRA,
    EXIT_PASSED,
    DemoConfig,
    DemoResult,
    EvalRecord,
    MissingExtraError,
)
from rlreplay.demo.config import INSTALL_HINT as INSTALL_HINT
from rlreplay.demo.config import PNG_NAME as PNG_NAME
from rlreplay.demo.trainer import _plot, _Trainer

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


def _require_extras() -> None:
    """Import the demo's optional dependencies once, so a missing one fails early and clearly.

    The demo's functions (in :mod:`rlreplay.demo.agent` and :mod:`rlreplay.demo.trainer`) import
    what they use locally (a cached ``sys.modules`` lookup by then): that keeps
    ``import rlreplay`` free of them while mypy still sees their real types.

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
