"""Profile one timed phase of one worker: where the time of a table cell goes.

Run: ``python benchmarks/profile_worker.py --workload single --metric add [--lib rlreplay]
[--quick] [--top 20] [--out FILE.prof]``. The worker's workload runs in this process as
``run.py`` would run it; cProfile is switched on only around the timed loop of ``--metric``
(fills and top-ups before it are not profiled). Prints the top functions by own time with
their share of the phase, then by cumulative time. Save with ``--out`` to inspect the
``.prof`` with ``snakeviz``/``pstats``.

``--sampler py-spy`` instead runs the worker untouched under ``py-spy record --format raw``
(``pip install py-spy``; no tracing overhead) and counts only the samples taken inside the
chosen phase's chunk function, by leaf function (own time) and by rlreplay function on the
stack (inclusive time).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workers"))
sys.path.insert(0, str(HERE))

import harness  # noqa: E402 - lives beside the workers

import report  # noqa: E402

#: The order in which each workload calls the timing loops: metric i is the i-th timed call.
PHASES = {
    "single": ("add", "sample"),
    "vector": ("add",),
    "atari": ("fill", "sample"),
    "per": ("fill", "iteration"),
    "sequences": ("sample",),
}


def profiled(metric_index: int, prof: cProfile.Profile) -> None:
    """Wrap the harness's timing loops so that only the chosen one runs under ``prof``."""
    calls = [0]
    originals = {"timed_windows": harness.timed_windows, "timed_segments": harness.timed_segments}

    def wrap(name: str) -> Any:
        original = originals[name]

        def run(*args: Any, **kwargs: Any) -> list[float]:
            mine = calls[0] == metric_index
            calls[0] += 1
            if not mine:
                return original(*args, **kwargs)
            prof.enable()
            try:
                return original(*args, **kwargs)
            finally:
                prof.disable()

        return run

    for name in originals:
        setattr(harness, name, wrap(name))


def chunk_name(workload: str, metric: str) -> str:
    """The name workers give the chunk function timed for ``metric``."""
    return "run" if metric in ("add", "fill") else metric


def pyspy(args: argparse.Namespace) -> int:
    """Sample the worker with py-spy; aggregate the samples of the chosen phase."""
    script = HERE / "workers" / f"{report.LIBRARIES[args.lib]}.py"
    cmd = [sys.executable, str(script), "--workload", args.workload]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--repeats", str(args.repeats)] if args.repeats else []
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "stacks.txt"
        spy = ["py-spy", "record", "--format", "raw", "-r", "250", "-o", str(raw), "--"]
        proc = subprocess.run(spy + cmd, capture_output=True, text=True, cwd=script.parent)
        if not raw.exists():
            print(proc.stderr, file=sys.stderr)
            return 1
        lines = raw.read_text().splitlines()
    results = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    print(results[-1][:400] if results else proc.stderr[-400:])
    want = chunk_name(args.workload, args.metric)
    own: Counter[str] = Counter()
    own_lines: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        starts = [i for i, f in enumerate(frames) if f.startswith("timed_")]
        if not starts or starts[0] + 1 >= len(frames):
            continue
        if frames[starts[0] + 1].split(" ")[0].rsplit(".", 1)[-1] != want:
            continue
        n = int(count)
        total += n
        own_lines[frames[-1]] += n
        own[_function(frames[-1])] += n
        for f in {_function(f) for f in frames[starts[0] + 2 :]}:
            inclusive[f] += n
    print(f"{args.lib} {args.workload}/{args.metric}: {total} samples in the phase (250 Hz)")
    for title, counts in (
        ("functions by own time (leaf frame)", own),
        ("functions by inclusive time (on the stack)", inclusive),
        ("lines by own time", own_lines),
    ):
        print(f"\n{title}, top {args.top}:")
        for f, n in counts.most_common(args.top):
            print(f"  {100 * n / max(total, 1):5.1f}%  {f}")
    return 0


def _function(frame: str) -> str:
    """``name (file:line)`` -> ``name (file)``: samples of one function, whatever the line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0].rstrip(')')})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="rlreplay", choices=list(report.LIBRARIES))
    parser.add_argument("--workload", required=True, choices=list(PHASES))
    parser.add_argument("--metric", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sampler", choices=("cprofile", "py-spy"), default="cprofile")
    args = parser.parse_args()
    if args.metric not in PHASES[args.workload]:
        parser.error(f"--metric: {args.workload} times {PHASES[args.workload]}")
    if args.sampler == "py-spy":
        return pyspy(args)
    module = importlib.import_module(report.LIBRARIES[args.lib])
    prof = cProfile.Profile()
    profiled(PHASES[args.workload].index(args.metric), prof)
    sizes = harness.sizes(args.quick, args.repeats)
    result = getattr(module, args.workload)(sizes)
    rates = result[args.metric]
    print(f"{args.lib} {args.workload}/{args.metric}: rates under cProfile {rates}")
    print("(cProfile slows Python-level calls; read shares, not absolute times)\n")
    if args.out:
        prof.dump_stats(args.out)
    stats = pstats.Stats(prof)
    total = sum(row[2] for row in stats.stats.values()) or 1e-9  # type: ignore[attr-defined]
    table = stats.stats  # type: ignore[attr-defined]
    rows = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)
    print(f"top {args.top} by own time (share of the profiled phase, {total:.2f} s):")
    for (file, line, fn), (_, ncalls, tt, ct, _) in rows[: args.top]:
        where = f"{Path(file).name}:{line}" if line else file
        share = 100 * tt / total
        print(f"  {share:5.1f}%  own {tt:7.3f}s  cum {ct:7.3f}s  {ncalls:>9}  {fn}  ({where})")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(args.top)
    print("\nby cumulative time:")
    print(buf.getvalue().split("\n", 6)[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
