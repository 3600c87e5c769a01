"""Cost curves: µs per call against stored size, rlreplay next to its peers.

Run: ``python benchmarks/curves.py [--quick] [--ops OP ...] [--libs LIB ...] [--repeats N]
[--window S] [--timeout S] [--out DIR] [--atari-max N] [--max-size N] [--timer cpu|wall]``.

Every cell (library, setup, operation, stored size) runs in its own subprocess
(``benchmarks/workers/curve_worker.py``), as ``run.py`` runs its cells, so that a peer that is
missing, crashes, hangs or does not fit only spoils its own cells. A cell's value is the
median of ``repeats`` timing windows (µs per call). Operations:

* ``sample``: ``sample(B)``, B in 32, 256, 4096, of float32[4] transitions;
* ``atari``: Atari ``sample(32)`` (stacked states and next states) of 84x84 uint8 frames;
* ``per``: prioritized ``sample(256)`` then ``update_priorities`` of those 256;
* ``add``: ``add`` of one step of one env, and of one step of 16 envs;
* ``sequences``: ``sample_sequences(32, 80)``.

Setups are labelled: ``fast`` is a peer's fastest documented setup for the operation,
``memory`` its memory-saving one (see ``curve_worker.py`` and ``peer_curves.py``), ``default``
a library's only setup; rlreplay also runs ``storage="memmap"`` at 10^6 and more.

Writes ``DIR/curves.json`` (every repeat), ``DIR/curves.md`` (tables, ratios, slopes) and
``DIR/curves.png`` (log-log, one panel per operation); ``DIR`` defaults to ``docs/``. Prints
each line's fitted slope (log µs over log size): sampling cost should not grow with the
stored size beyond what cache misses force, which the NumPy limit's slope shows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


HERE = Path(__file__).resolve().parent
WORKER = HERE / "workers" / "curve_worker.py"

# (library, setup): the columns, in order. Peers first in their fastest setup, then memory.
LINES = [
    ("rlreplay", "default"),
    ("rlreplay", "memmap"),
    ("numpy-limit", "default"),
    ("cpprb", "fast"),
    ("cpprb", "memory"),
    ("tianshou", "fast"),
    ("tianshou", "memory"),
    ("torchrl", "default"),
    ("sb3", "fast"),
    ("sb3", "memory"),
]
SETUPS = {
    "rlreplay (default)": "ReplayBuffer / PrioritizedReplayBuffer in RAM; frames stored once"
    " (frame_stack=4); next observations from the following step",
    "rlreplay (memmap)": 'the same with storage="memmap" (10^6 and more)',
    "numpy-limit (default)": "preallocated NumPy arrays, uniform indices, fancy-index"
    " gathers, no bookkeeping (a ceiling, not a buffer)",
    "cpprb (fast)": "next_obs stored explicitly (Atari: s and s' stacks stored, 8 frames per step)",
    "cpprb (memory)": 'next_of="obs" (Atari: plus stack_compress="obs"); the 16-env add'
    " needs explicit next_obs, so it has no memory line",
    "tianshou (fast)": "obs_next stored (its default); PrioritizedReplayBuffer for PER;"
    " VectorReplayBuffer for 16 envs",
    "tianshou (memory)": "ignore_obs_next=True; Atari: stack_num=4, save_only_last_obs=True"
    " (its documented Atari setting: one frame per step, s and s' stacks rebuilt);"
    " sequences: stack_num=80 (observations only, 80 steps ending at each draw)",
    "torchrl (default)": "LazyTensorStorage; Atari: its memory recipe (LazyMemmapStorage of"
    " single frames + CatFrames.make_rb_transform_and_sampler, stacks s only); sequences:"
    " SliceSampler(slice_len=80, traj_key='episode'); PER needs its compiled extension",
    "sb3 (fast)": "optimize_memory_usage=False; its buffer has no frame stacking: Atari stores"
    " VecFrameStack's (4, 84, 84) stacks of s and s'",
    "sb3 (memory)": "optimize_memory_usage=True (Atari: s stacks only, s' from the next row)",
}
REFERENCE = {"rlreplay", "numpy-limit"}  # not peers
OPS = ("sample", "atari", "per", "add", "sequences")
SAMPLE_BATCHES = (32, 256, 4096)


def grid(quick: bool, atari_max: int, max_size: int) -> dict[str, tuple[list[int], list[int]]]:
    """``op -> (stored sizes, batch sizes)``."""
    if quick:
        g = {
            "sample": ([10**3, 10**4, 10**5], [32, 256]),
            "atari": ([10**4, 2 * 10**4], [32]),
            "per": ([10**4, 10**5], [256]),
            "add": ([10**4, 10**5], [1]),
            "sequences": ([10**4, 10**5], [32]),
        }
    else:
        g = {
            "sample": ([10**3, 10**4, 10**5, 10**6, 10**7], list(SAMPLE_BATCHES)),
            "atari": ([10**4, 10**5, 10**6], [32]),
            "per": ([10**4, 10**5, 10**6, 10**7], [256]),
            "add": ([10**4, 10**5, 10**6, 10**7], [1]),
            "sequences": ([10**4, 10**5, 10**6, 10**7], [32]),
        }
    g["atari"] = ([n for n in g["atari"][0] if n <= atari_max], g["atari"][1])
    return {op: ([n for n in sizes if n <= max_size], b) for op, (sizes, b) in g.items()}


# Lines a peer cannot draw, and why (shown under the tables). ``(lib, setup, op)``; ``*``
# matches every setup.
UNSUPPORTED = {
    ("cpprb", "*", "sequences"): "no sequence sampling in cpprb (its buffers draw single"
    " transitions)",
    ("sb3", "*", "per"): "no prioritized replay buffer in Stable-Baselines3",
    ("sb3", "*", "sequences"): "no sequence sampling in Stable-Baselines3",
    ("tianshou", "fast", "atari"): "Tianshou's Atari setup is its memory one (stack_num=4,"
    " save_only_last_obs); stored stacks of s and s' are not a documented setup",
    ("tianshou", "fast", "sequences"): "Tianshou samples sequences only through stack_num"
    " (memory line)",
    ("tianshou", "fast", "add"): "add: one Tianshou line (memory: ignore_obs_next, which"
    " writes less, so it is also its fastest add)",
    ("tianshou", "memory", "per"): "PER: one Tianshou line (fast: obs_next stored, its"
    " default; the setups differ as in the sample panels), to keep the run under 15 minutes",
}


def applies(lib: str, setup: str, op: str, size: int) -> str | None:
    """Why a line has no point here (``None``: it has one)."""
    if setup == "memmap" and size < 10**6:
        return "memmap only at 10^6 and more"
    for key in ((lib, setup, op), (lib, "*", op)):
        if key in UNSUPPORTED:
            return UNSUPPORTED[key]
    if op == "atari" and size >= 10**6:
        if lib == "rlreplay" and setup != "memmap":
            return "10^6 frames: memmap"
        if (lib, setup) in (("cpprb", "fast"), ("sb3", "fast"), ("sb3", "memory")):
            return "10^6 frames do not fit in RAM here (stored stacks: 28-56 GB)"
    if op == "atari" and size > 10**4 and lib == "torchrl":
        return "only at 10^4 frames (its CatFrames sampler takes > 0.2 s per sample(32))"
    return None


def size_free(reason: str) -> bool:
    """Whether an unavailable cell's reason holds at every size (then larger ones are skipped)."""
    return not any(w in reason for w in ("timed out", "memory", "exited", "failed"))


def run_cell(lib: str, setup: str, op: str, size: int, batches: list[int],
             args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    cmd = [sys.executable, str(WORKER), "--lib", lib, "--setup", setup, "--op", op,
           "--size", str(size), "--batches", *map(str, batches), "--repeats", str(args.repeats),
           "--window", str(args.window), "--timer", args.timer]  # fmt: skip
    t0 = time.perf_counter()
    try:
        env = dict(os.environ)
        if args.timer == "cpu":  # CPU time sums a process's threads: peers run on one
            env.setdefault("OMP_NUM_THREADS", "1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              cwd=WORKER.parent, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"unavailable": f"timed out after {args.timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"unavailable": f"worker exited with code {proc.returncode}: {tail}"}
    out: dict[str, Any] = json.loads(lines[-1])
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if "us" in out:
        out["median"] = {k: statistics.median(v) for k, v in out["us"].items()}
    return out


def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log10(µs) over log10(size)."""
    if len(points) < 2:
        return None
    xs = [math.log10(n) for n, _ in points]
    ys = [math.log10(v) for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else None


def series(results: dict[str, Any]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``panel -> line -> [(size, median µs)]``; a panel is an operation and its label."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for cell in results["cells"]:
        for label, med in cell.get("median", {}).items():
            panel = f"{cell['op']} {label}"
            line = f"{cell['lib']} ({cell['setup']})"
            out.setdefault(panel, {}).setdefault(line, []).append((cell["size"], med))
    for lines in out.values():
        for pts in lines.values():
            pts.sort()
    return out


def _size(n: int) -> str:
    e = round(math.log10(n))
    return f"10^{e}" if 10**e == n else f"{n:,}"


def markdown(results: dict[str, Any]) -> str:
    s = series(results)
    head = [
        f"# Cost curves ({results['started']}, {results['mode']}, {results['seconds']:.0f} s)",
        "",
        f"Machine: {results['machine']}; load {results['load_start']} -> {results['load_end']};"
        f" timer: {results['settings']['timer']} (cpu: the worker's CPU time; torch peers with"
        " OMP_NUM_THREADS=1 unless set)."
        " Cells: median µs per call over the repeats (lower is better). `x` is the best"
        " peer's time over rlreplay's (above 1: rlreplay is faster). Peers: cpprb, Tianshou,"
        " TorchRL, SB3; the NumPy limit and rlreplay's memmap line are references. `fast`: a"
        " peer's fastest documented setup for the operation; `memory`: its memory-saving one.",
        "",
    ]
    body: list[str] = []
    for panel, lines in s.items():
        names = list(lines)
        sizes = sorted({n for pts in lines.values() for n, _ in pts})
        body += [f"## {panel}", "", "| stored | " + " | ".join(names) + " | best peer / rlreplay |"]
        body.append("|---" * (len(names) + 2) + "|")
        for n in sizes:
            vals = {name: dict(lines[name]).get(n) for name in names}
            row = [f"{vals[name]:.1f}" if vals[name] is not None else "-" for name in names]
            rl = vals.get("rlreplay (default)") or vals.get("rlreplay (memmap)")
            peers = [(v, k) for k, v in vals.items() if v is not None
                     and k.split(" ")[0] not in REFERENCE]  # fmt: skip
            ratio = f"x{min(peers)[0] / rl:.2f} vs {min(peers)[1]}" if rl and peers else "-"
            body.append(f"| {_size(n)} | " + " | ".join(row) + f" | {ratio} |")
        body += ["", "Slopes (log µs / log size): " + ", ".join(
            f"{k} {sl:+.3f}" for k, pts in lines.items() if (sl := slope(pts)) is not None
        ), ""]  # fmt: skip
    missing = [
        f"- {c['lib']} ({c['setup']}) {c['op']} at {_size(c['size'])}: {c['unavailable']}"
        for c in results["cells"] if "unavailable" in c
    ]  # fmt: skip
    if missing:
        body += ["## Cells without a value", "", *missing, ""]
    skipped = [f"- {c['lib']} ({c['setup']}) {c['op']}: {c['reason']}"
               for c in results.get("skipped", [])]  # fmt: skip
    if skipped:
        body += ["## Lines not drawn (not supported or not run)", "", *skipped, ""]
    body += ["## Setups", "", *(f"- **{k}**: {v}" for k, v in SETUPS.items()), ""]
    return "\n".join(head + body)


def chart(results: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
        return
    s = series(results)
    if not s:
        return
    cols = 3
    rows = -(-len(s) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (panel, lines) in zip(axes.flat, s.items(), strict=False):
        for name, pts in lines.items():
            style = "-" if name.startswith("rlreplay (default)") else "--"
            ax.plot([n for n, _ in pts], [v for _, v in pts], style, marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(panel)
        ax.set_xlabel("stored transitions (Atari: frames)")
        ax.set_ylabel("µs per call")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(s) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def load() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes, shorter windows (~3 min)")
    p.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    libs = sorted({lib for lib, _ in LINES})
    p.add_argument("--libs", nargs="+", choices=libs, default=libs)
    p.add_argument("--repeats", type=int, default=None, help="default 5 (quick: 3)")
    p.add_argument("--window", type=float, default=None, help="seconds (default 0.2; quick 0.1)")
    p.add_argument("--timeout", type=float, default=None, help="per cell (default 240; quick 60)")
    p.add_argument("--out", type=Path, default=HERE.parent / "docs")
    p.add_argument(
        "--atari-max",
        type=int,
        default=10**6,
        help="largest Atari size (10^6 frames are 7 GB per copy; default 10^6)",
    )
    p.add_argument("--max-size", type=int, default=10**7, help="largest stored size")
    p.add_argument("--timer", choices=("cpu", "wall"), default="cpu",
                   help="cpu (default): the worker's CPU time per call, which a busy machine "
                   "disturbs far less than wall time; torch peers then run with "
                   "OMP_NUM_THREADS=1 unless it is set")  # fmt: skip
    args = p.parse_args(argv)
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.window = args.window or (0.1 if args.quick else 0.2)
    args.timeout = args.timeout or (60.0 if args.quick else 240.0)
    g = grid(args.quick, args.atari_max, args.max_size)
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    t0 = time.perf_counter()
    results: dict[str, Any] = {
        "started": started, "mode": "quick" if args.quick else "full", "load_start": load(),
        "machine": f"{os.cpu_count()} cores", "settings": vars(args) | {"out": str(args.out)},
        "cells": [],
    }  # fmt: skip
    known: dict[tuple[str, str, str], str] = {}  # size-free reasons seen
    skipped: dict[tuple[str, str, str], str] = {}
    for op in args.ops:
        sizes, batches = g[op]
        for size in sizes:
            for lib, setup in LINES:
                if lib not in args.libs:
                    continue
                why = applies(lib, setup, op, size) or known.get((lib, setup, op))
                if why:
                    skipped.setdefault((lib, setup, op), why)
                    continue
                cell = run_cell(lib, setup, op, size, batches, args)
                cell.update(lib=lib, setup=setup, op=op, size=size, load=load())
                results["cells"].append(cell)
                if "unavailable" in cell and size_free(cell["unavailable"]):
                    known[(lib, setup, op)] = cell["unavailable"]
                shown = cell.get("median") or cell.get("unavailable")
                print(f"  {op:<9} {_size(size):>6} {lib:<11} {setup:<7} {shown}",
                      file=sys.stderr, flush=True)  # fmt: skip
    results["skipped"] = [
        {"lib": lib, "setup": setup, "op": op, "reason": why}
        for (lib, setup, op), why in skipped.items()
        if not why.startswith("memmap only")
    ]
    results["seconds"] = time.perf_counter() - t0
    results["load_end"] = load()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "curves.json").write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results)
    (args.out / "curves.md").write_text(text)
    chart(results, args.out / "curves.png")
    for panel, lines in series(results).items():
        for name, pts in lines.items():
            sl = slope(pts)
            if sl is not None:
                print(f"slope {panel:<16} {name:<24} {sl:+.3f}")
    print(f"({results['seconds']:.0f} s; wrote {args.out}/curves.json, curves.md, curves.png)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
