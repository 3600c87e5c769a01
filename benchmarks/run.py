"""Benchmark rlreplay against cpprb, Tianshou, TorchRL, Stable-Baselines3 and a NumPy limit.

Run: ``python benchmarks/run.py [--quick] [--repeats N] [--out DIR] [--libs LIB ...]
[--workloads W ...] [--timeout S]``. Every (library, workload) cell runs in its own
subprocess (``benchmarks/workers/<lib>_worker.py``) with a timeout, so a peer that is missing,
crashes or hangs only spoils its own cells ("unavailable: <reason>"). Cells run workload by
workload, all libraries in turn, so that a change of machine load hits every column alike.

Writes ``DIR/results.json`` (every repeat, thread counts, versions, machine, load),
``DIR/results.md`` (the table printed at the end) and ``DIR/results.png`` (bar chart).

Small-buffer rows (``--no-small`` leaves them out): ``sample(256)`` with 10^4
transitions stored and Atari ``sample(32)`` with 2·10^4 frames, in µs per call, every library
in its fastest and its memory-saving setup, measured by the cost-curve cells
(``benchmarks/curves.py``, ``workers/curve_worker.py``), one subprocess each.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Kernels compile in the untimed warm-up, never in the background during a timed window.
os.environ.setdefault("RLREPLAY_BACKGROUND_COMPILE", "0")


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import curves  # noqa: E402 - a sibling script, not a package
import report  # noqa: E402

# The small-buffer rows: (title, curve operation, stored size, batch size).
SMALL_ROWS = (
    ("sample(256), 10^4 stored (µs/call)", "sample", 10**4, 256),
    ("Atari sample(32), 2·10^4 frames (µs/call)", "atari", 2 * 10**4, 32),
)

WORKLOADS = ("single", "vector", "atari", "per", "sequences")


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        pages = 0
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": pages / 2**30,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def source() -> dict[str, Any]:
    """The rlreplay source measured: commit and whether src/ has uncommitted changes."""
    root = HERE.parent

    def git(*cmd: str) -> str:
        try:
            out = subprocess.run(["git", *cmd], capture_output=True, text=True, cwd=root)
        except OSError:
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    changed = git("status", "--porcelain", "--", "src")
    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "src_changed_files": len(changed.splitlines()) if changed else 0,
    }


def load() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def run_cell(lib: str, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one worker; parse its last stdout line; turn failures into an unavailable cell."""
    script = HERE / "workers" / f"{report.LIBRARIES[lib]}.py"
    cmd = [sys.executable, str(script), "--workload", workload]
    if args.quick:
        cmd.append("--quick")
    if args.repeats:
        cmd += ["--repeats", str(args.repeats)]
    t0 = time.perf_counter()
    base: dict[str, Any] = {
        "library": lib,
        "workload": workload,
        "load_at_start": load(),
        "rlreplay_commit": source()["commit"],
    }
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, cwd=HERE / "workers"
        )
    except subprocess.TimeoutExpired:
        return {**base, "unavailable": f"timed out after {args.timeout:.0f} s"}
    base["seconds"] = round(time.perf_counter() - t0, 2)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {**base, "unavailable": f"worker exited with code {proc.returncode}: {tail}"}
    out = json.loads(lines[-1])
    if "error" in out:
        out["unavailable"] = f"failed: {out['error']}"
    for name, values in list(out.get("metrics", {}).items()):
        if name != "info":
            out["metrics"][name] = {"values": values, **report.summarize(values)}
    out["info"] = out.get("metrics", {}).pop("info", {})
    if not out.get("metrics"):
        out.pop("metrics", None)
    return {**base, **out}


def progress(lib: str, workload: str, c: dict[str, Any]) -> str:
    if "metrics" in c:
        shown = ", ".join(f"{k} {v['median']:,.0f}" for k, v in c["metrics"].items())
    else:
        shown = f"unavailable: {c.get('unavailable')}"
    return f"  {workload:<9} {lib:<11} {c.get('seconds', '-'):>6}s  {shown}"


def small_rows(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the small-buffer rows: ``{title: {"lib (setup)": cell}}``."""
    cell_args = argparse.Namespace(
        repeats=args.repeats or (3 if args.quick else 5),
        window=0.1 if args.quick else 0.2,
        timeout=args.timeout,
        timer="wall",  # as the rest of run.py's table
    )
    rows: dict[str, Any] = {}
    for title, op, size, batch in SMALL_ROWS:
        row = rows[title] = {}
        for lib, setup in curves.LINES:
            if lib not in args.libs or curves.applies(lib, setup, op, size):
                continue
            cell = curves.run_cell(lib, setup, op, size, [batch], cell_args)
            row[f"{lib} ({setup})"] = cell
            shown = cell.get("median") or cell.get("unavailable")
            print(f"  small     {lib:<11} {setup:<7} {title}: {shown}", file=sys.stderr, flush=True)
    return rows


def small_markdown(rows: dict[str, Any]) -> str:
    """The small-buffer rows as a Markdown table (µs per call; ratio: best peer / rlreplay)."""
    names = sorted({name for row in rows.values() for name in row},
                   key=lambda n: [f"{a} ({b})" for a, b in curves.LINES].index(n))  # fmt: skip
    lines = ["Small buffers: median µs per call, lower is better; `fast`/`memory`: a "
             "peer's fastest / memory-saving setup; last column: best peer's time over "
             "rlreplay's (above 1: rlreplay is faster).", "",
             "| row | " + " | ".join(names) + " | best peer / rlreplay |",
             "|---" * (len(names) + 2) + "|"]  # fmt: skip
    for title, row in rows.items():
        vals: dict[str, float | None] = {}
        for name in names:
            med = row.get(name, {}).get("median")
            vals[name] = next(iter(med.values())) if med else None
        cells = [f"{v:.1f}" if v is not None else (
            "n/a" if name not in row else f"unavailable: {row[name].get('unavailable')}"[:60]
        ) for name, v in vals.items()]  # fmt: skip
        rl = vals.get("rlreplay (default)")
        peers = [(v, k) for k, v in vals.items()
                 if v is not None and k.split(" ")[0] not in curves.REFERENCE]  # fmt: skip
        ratio = f"x{min(peers)[0] / rl:.2f} vs {min(peers)[1]}" if rl and peers else "-"
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller fills, shorter windows")
    parser.add_argument("--repeats", type=int, default=None, help="default 5 (quick: 3)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    parser.add_argument("--libs", nargs="+", choices=list(report.LIBRARIES),
                        default=list(report.LIBRARIES))  # fmt: skip
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per cell (default 60, quick; 600, full)")  # fmt: skip
    parser.add_argument("--no-small", dest="small", action="store_false",
                        help="leave out the small-buffer rows")  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats: expected at least 1")
    if args.timeout is None:
        args.timeout = 60.0 if args.quick else 600.0
    libs = [lib for lib in report.LIBRARIES if lib in args.libs]
    workloads = [w for w in WORKLOADS if w in args.workloads]
    if "rlreplay" not in libs:
        print("note: without rlreplay there are no ratios", file=sys.stderr)

    info = machine()
    info["load_start"] = load()
    info["rlreplay_source"] = source()
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(
        f"{started}: {len(libs)} libraries x {len(workloads)} workloads, load {info['load_start']}",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    cells: dict[str, Any] = {}
    for workload in workloads:
        for lib in libs:
            c = run_cell(lib, workload, args)
            cells[f"{lib}/{workload}"] = c
            print(progress(lib, workload, c), file=sys.stderr, flush=True)
    small = small_rows(args) if args.small else {}
    info["load_end"] = load()
    results = {
        "started": started,
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": info,
        "settings": {
            "quick": args.quick,
            "repeats": args.repeats or (3 if args.quick else 5),
            "timeout": args.timeout,
        },
        "libraries": libs,
        "workloads": workloads,
        "cells": cells,
        "small": small,
    }
    results["targets"] = report.targets(results)[1]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = report.markdown(results)
    if small:
        text += "\n" + small_markdown(small)
    (args.out / "results.md").write_text(text)
    report.chart(results, args.out / "results.png")
    print(text)
    print(f"({results['seconds']:.0f} s; wrote {args.out}/results.json, results.md, results.png)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
