"""The ``rlreplay`` command line.

Subcommands:
    demo: train an n-step DQN on CartPole-v1 through the replay buffer (see
        :mod:`rlreplay.demo`); exit code 0 if it reaches the target return in time, 1 if not,
        2 if the optional ``demo`` extra is missing.
    inspect: print a checkpoint's configuration, fill, episodes, field statistics, priorities
        and integrity (see :mod:`rlreplay.io.inspect`), optionally writing PNGs; exit code 0
        if its checksums match, 1 if the data is corrupted, 2 if it cannot be read or the
        ``inspect`` extra is missing.

``rlreplay --version`` prints the installed version (from the package's metadata).

Example:
    $ rlreplay --version
    $ rlreplay demo --seed 1 --out /tmp/curves
    $ rlreplay inspect replay.ckpt --plots /tmp/plots
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from rlreplay import demo

__all__ = ["build_parser", "installed_version", "main"]


def installed_version() -> str:
    """The installed distribution's version (:data:`rlreplay.__version__`, from its metadata)."""
    import rlreplay

    version: str = rlreplay.__version__
    return version


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:  # Also rejects NaN.
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the ``rlreplay`` command."""
    parser = argparse.ArgumentParser(
        prog="rlreplay", description="rlreplay: experience replay for reinforcement learning."
    )
    parser.add_argument(
        "--version", action="version", version=f"rlreplay {installed_version()}",
        help="print the installed version and exit",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    defaults = demo.DemoConfig()
    p = sub.add_parser(
        "demo",
        help="train an n-step DQN on CartPole-v1 through the replay buffer",
        description=(
            "Train an n-step double DQN on CartPole-v1 (PyTorch, CPU) from rlreplay's buffer. "
            f"Every {defaults.eval_every:,} env steps the greedy policy plays "
            f"{defaults.eval_episodes} episodes; the run passes when their mean return reaches "
            f"{defaults.pass_return:g} within the time limit (counted from process start). "
            f"Exit code 0: passed, 1: failed, 2: optional extra missing ({demo.INSTALL_HINT})."
        ),
    )
    p.add_argument("--seed", type=int, default=defaults.seed, help="random seed (default: 0)")
    p.add_argument(
        "--steps", type=_positive_int, default=defaults.max_steps,
        help=f"max env steps (default: {defaults.max_steps:,})",
    )  # fmt: skip
    p.add_argument(
        "--time-limit", type=_positive_float, default=defaults.time_limit, metavar="SECONDS",
        help=f"wall-clock budget in seconds, start-up included (default: {defaults.time_limit:g})",
    )  # fmt: skip
    p.add_argument(
        "--n-step", type=_positive_int, default=defaults.n_step,
        help=f"n-step return length (default: {defaults.n_step})",
    )  # fmt: skip
    p.add_argument(
        "--out", type=Path, default=defaults.out_dir, metavar="DIR",
        help=f"directory for the learning-curve PNG (default: {defaults.out_dir})",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-evaluation lines")
    p = sub.add_parser(
        "inspect",
        help="show what a checkpoint holds (config, fill, episodes, fields, priorities)",
        description=(
            "Print a checkpoint's configuration, fill per env, episodes (count, length and "
            "return quantiles), field statistics, priorities and integrity, reading its arrays "
            "through read-only memory maps. Exit code 0: checksums match, 1: corrupted data, "
            "2: unreadable file or missing extra (pip install 'rlreplay[inspect]')."
        ),
    )
    p.add_argument("checkpoint", type=Path, help="a file written by ReplayBuffer.save")
    p.add_argument("--plots", type=Path, metavar="DIR", help="also write PNGs into DIR")
    return parser


def _run_inspect(args: argparse.Namespace) -> int:
    import sys

    try:
        from rlreplay.io.inspect import inspect_checkpoint, render, write_plots
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        print(f"rlreplay inspect: {exc}; pip install 'rlreplay[inspect]'", file=sys.stderr)
        return 2
    from rlreplay.errors import CheckpointError

    try:
        report = inspect_checkpoint(args.checkpoint)
    except CheckpointError as exc:
        print(f"rlreplay inspect: {exc}", file=sys.stderr)
        return 2
    try:
        render(report)
        if args.plots is not None:
            for path in write_plots(report, args.plots):
                print(f"wrote {path}")
    except ImportError as exc:
        print(f"rlreplay inspect: {exc}; pip install 'rlreplay[inspect]'", file=sys.stderr)
        return 2
    return 0 if report.integrity.ok else 1


def _run_demo(args: argparse.Namespace) -> int:
    config = demo.DemoConfig(
        seed=args.seed,
        max_steps=args.steps,
        time_limit=args.time_limit,
        n_step=args.n_step,
        out_dir=args.out,
        quiet=args.quiet,
    )
    return demo.demo_main(config, started_at=demo.process_start_time())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlreplay`` command.

    Args:
        argv: Arguments after the program name; ``sys.argv[1:]`` when omitted.

    Returns:
        The process exit code. Usage errors exit through ``SystemExit(2)`` as argparse does.
    """
    args = build_parser().parse_args(None if argv is None else list(argv))
    if args.command == "demo":
        return _run_demo(args)
    if args.command == "inspect":
        return _run_inspect(args)
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse rejects others.
