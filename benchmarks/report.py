"""Turn the cells of a run into the Markdown table, the best-peer comparison and the bar chart.

Pure functions over the JSON-able ``results`` dict that ``run.py`` builds (and writes); a
saved ``results.json`` can be re-rendered with ``python benchmarks/report.py results.json``.
"""

from __future__ import annotations

import ast
import json
import statistics
import sys
from pathlib import Path
from typing import Any

WORKERS = Path(__file__).resolve().parent / "workers"

#: Column order and the worker module of each library.
LIBRARIES: dict[str, str] = {
    "rlreplay": "rlreplay_worker",
    "numpy-limit": "numpy_limit_worker",
    "cpprb": "cpprb_worker",
    "tianshou": "tianshou_worker",
    "torchrl": "torchrl_worker",
    "sb3": "sb3_worker",
}
PEERS = ("cpprb", "tianshou", "torchrl", "sb3")
TITLES = {"numpy-limit": "NumPy limit", "sb3": "SB3"}

#: (workload, metric, row label, goal kind, goal value). Kind "rate": rlreplay / best peer
#: is built to be >= value; kind "copies": rlreplay's resident bytes / one copy of each stored
#: frame, built to be <= value.
ROWS: list[tuple[str, str, str, str, float]] = [
    ("single", "add", "1. per-step add (adds/s)", "rate", 1.0),
    ("single", "sample", "1. sample(256) (transitions/s)", "rate", 1.0),
    ("vector", "add", "2. 16-env add (transitions/s)", "rate", 1.5),
    ("atari", "fill", "3. Atari fill (adds/s)", "rate", 1.5),
    ("atari", "sample", "3. Atari sample(32) (transitions/s)", "rate", 1.3),
    ("atari", "memory", "3. Atari resident memory (MB, lower is better)", "copies", 1.05),
    ("per", "fill", "4. PER 16-env fill (transitions/s)", "rate", 1.5),
    ("per", "iteration", "4. PER sample(256)+update(256) (iterations/s)", "rate", 2.0),
    ("sequences", "sample", "5. sample_sequences(32, 80) (sequences/s)", "rate", 2.0),
]
FRAME_BYTES = 84 * 84


def summarize(values: list[float]) -> dict[str, float]:
    """Median, min, max and the spread ``(max - min) / 2 / median`` in percent."""
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {
        "median": med,
        "min": lo,
        "max": hi,
        "spread_pct": 100.0 * (hi - lo) / 2 / med if med else 0.0,
    }


def _si(x: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def cell(results: dict[str, Any], lib: str, workload: str) -> dict[str, Any]:
    return results["cells"].get(f"{lib}/{workload}", {})


def metric(results: dict[str, Any], lib: str, workload: str, name: str) -> dict[str, Any] | None:
    return cell(results, lib, workload).get("metrics", {}).get(name)


def copies(results: dict[str, Any], lib: str) -> float | None:
    """Resident bytes of the Atari buffer over one copy of each stored frame."""
    m = metric(results, lib, "atari", "memory")
    stored = cell(results, lib, "atari").get("info", {}).get("stored")
    if m is None or not stored:
        return None
    return float(m["median"]) / (stored * FRAME_BYTES)


def _format_cell(results: dict[str, Any], lib: str, workload: str, name: str) -> str:
    c = cell(results, lib, workload)
    if not c:
        return "not run"
    if "metrics" not in c:
        return f"unavailable: {c.get('unavailable') or c.get('error') or 'no result'}"
    m = c["metrics"].get(name)
    if m is None:
        return "unavailable: no such metric"
    ref = metric(results, "rlreplay", workload, name)
    ratio = f" x{m['median'] / ref['median']:.2f}" if ref and ref["median"] else ""
    if name == "memory":
        cp = copies(results, lib)
        extra = f" ({cp:.2f} copies)" if cp is not None else ""
        return f"{m['median'] / 1e6:,.0f} MB{ratio}{extra}"
    return f"{_si(m['median'])}{ratio} ±{m['spread_pct']:.0f}%"


def table(results: dict[str, Any]) -> str:
    libs = [lib for lib in LIBRARIES if lib in results["libraries"]]
    head = "| workload | " + " | ".join(TITLES.get(lib, lib) for lib in libs) + " |"
    lines = [head, "|---" * (len(libs) + 1) + "|"]
    for workload, name, label, _, _ in ROWS:
        if workload not in results["workloads"]:
            continue
        cells = [_format_cell(results, lib, workload, name) for lib in libs]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def best_peer(results: dict[str, Any], workload: str, name: str) -> tuple[str, float] | None:
    """The best peer on a row: highest rate, or fewest bytes for memory."""
    found = [
        (lib, m["median"])
        for lib in PEERS
        if (m := metric(results, lib, workload, name)) is not None
    ]
    if not found:
        return None
    pick = min if name == "memory" else max
    return pick(found, key=lambda item: item[1])


def targets(results: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Markdown of rlreplay against the best peer of each row and the ratio it is built to
    reach there (its goal), and the same rows as data.

    A row with no peer measured (peers not installed, or ``--libs`` without them) has nothing
    to compare: it is left out of the table and named in one line under it, never marked as
    missed. With no comparison at all the Markdown is that line alone.
    """
    lines = [
        "| row | rlreplay / best peer | best peer | goal | reached |",
        "|---|---|---|---|---|",
    ]
    data = []
    unmeasured = []
    for workload, name, label, kind, goal in ROWS:
        if workload not in results["workloads"]:
            continue
        ours = metric(results, "rlreplay", workload, name)
        best = best_peer(results, workload, name)
        if kind == "copies":
            value = copies(results, "rlreplay")
            shown = "n/a" if value is None else f"{value:.2f} copies of each frame"
            target = f"<= {goal}x one copy"
            met = None if value is None else value <= goal
        else:
            value = ours["median"] / best[1] if ours and best else None
            shown = "n/a" if value is None else f"{value:.2f}x"
            target = f">= {goal}x"
            met = None if value is None else value >= goal
        data.append({"workload": workload, "metric": name, "value": value, "goal": goal,
                     "kind": kind, "best_peer": None if best is None else best[0],
                     "met": met})  # fmt: skip
        if met is None:
            unmeasured.append(label)
            continue
        peer = "-" if best is None else TITLES.get(best[0], best[0])
        lines.append(f"| {label} | {shown} | {peer} | {target} | {'yes' if met else 'no'} |")
    note = (
        f"Not compared (no peer measured on the row): {', '.join(unmeasured)}. "
        '`pip install -e ".[bench]"` installs the peers.'
        if unmeasured
        else ""
    )
    if len(lines) == 2:
        return note, data
    return "\n".join(lines) + ("\n\n" + note if note else ""), data


def usage_notes(libs: list[str]) -> str:
    """How each library is used: the docstring of its worker module (read, not imported)."""
    out = []
    for lib in libs:
        path = WORKERS / f"{LIBRARIES[lib]}.py"
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out.append(f"- **{TITLES.get(lib, lib)}** — " + " ".join(doc.split()))
    return "\n".join(out)


def threads(results: dict[str, Any]) -> str:
    """Thread counts per library (one line per distinct setting seen in its cells)."""
    out = []
    for lib in LIBRARIES:
        seen: dict[str, list[str]] = {}
        for key, c in sorted(results["cells"].items()):
            if key.startswith(f"{lib}/") and "threads" in c:
                t = c["threads"]
                label = (
                    f"torch {t.get('torch') or 'not loaded'}, "
                    f"Numba {t.get('numba') or 'not loaded'}, "
                    f"BLAS {', '.join(t.get('blas') or []) or 'n/a'}"
                    + (f", env {t['env']}" if t.get("env") else "")
                )
                seen.setdefault(label, []).append(key.split("/")[1])
        for label, workloads in seen.items():
            out.append(f"- {TITLES.get(lib, lib)} ({', '.join(workloads)}): {label}")
    return "\n".join(out)


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    libs = [lib for lib in LIBRARIES if lib in results["libraries"]]
    s = results["settings"]
    versions = sorted({c["version"] for c in results["cells"].values() if c.get("version")})
    parts = [
        f"Run {results['started']} ({'quick' if s['quick'] else 'full'}, median of "
        f"{s['repeats']} repeats, ±: half the min-max spread over the median)",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']:.0f} GiB, {m['platform']}, "
        f"Python {m['python']}. Load average (1/5/15 min) at start {m['load_start']}, "
        f"at end {m['load_end']}.",
        "",
        _source_line(m.get("rlreplay_source")) + _commits_seen(results),
        "",
        table(results),
        "",
        "Cells: median rate, xratio to rlreplay on the same row (above 1: faster than rlreplay; "
        "memory: above 1 is more memory), ±spread. Memory: resident-set growth of the worker "
        "while it built and filled the buffer; copies = that over the bytes of the frames "
        "stored.",
        "",
        "rlreplay against the best peer on each row (same run), and the ratio rlreplay is "
        "built to reach there:",
        "",
        targets(results)[0],
        "",
        "How each library is used:",
        "",
        usage_notes(libs),
        "",
        "Threads per cell:",
        "",
        threads(results),
        "",
        "Versions: " + "; ".join(versions),
    ]
    return "\n".join(parts) + "\n"


def _source_line(src: dict[str, Any] | None) -> str:
    if not src:
        return "rlreplay source: not recorded."
    dirty = src.get("src_changed_files", 0)
    state = f"plus uncommitted changes in {dirty} file(s) of src/" if dirty else "clean src/"
    return f"rlreplay source at the start: commit {src.get('commit')}, {state}."


def _commits_seen(results: dict[str, Any]) -> str:
    """A warning when rlreplay's commit changed while the cells ran (others kept working)."""
    seen: dict[str, list[str]] = {}
    for key, c in results["cells"].items():
        if c.get("rlreplay_commit"):
            seen.setdefault(c["rlreplay_commit"], []).append(key)
    if len(seen) <= 1:
        return ""
    parts = [f"{commit} for {len(keys)} cells" for commit, keys in seen.items()]
    return " The commit changed during the run: " + ", ".join(parts) + "."


def chart(results: dict[str, Any], path: Path) -> None:
    """Grouped bars: each row's median over rlreplay's (log scale), one bar per library."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    libs = [lib for lib in LIBRARIES if lib in results["libraries"]]
    rows = [r for r in ROWS if r[0] in results["workloads"]]
    fig, ax = plt.subplots(figsize=(13, 5.5))
    width = 0.8 / len(libs)
    colors = plt.get_cmap("tab10").colors
    for k, lib in enumerate(libs):
        xs, ys = [], []
        for i, (workload, name, *_rest) in enumerate(rows):
            m = metric(results, lib, workload, name)
            ref = metric(results, "rlreplay", workload, name)
            if m is not None and ref is not None and ref["median"]:
                ratio = m["median"] / ref["median"]
                ys.append(1 / ratio if name == "memory" else ratio)
                xs.append(i + (k - (len(libs) - 1) / 2) * width)
        ax.bar(xs, ys, width, label=TITLES.get(lib, lib), color=colors[k % len(colors)])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r[2].split(" (")[0] for r in rows], rotation=25, ha="right")
    ax.set_ylabel("relative to rlreplay (log)\nmemory: rlreplay bytes / library bytes", fontsize=9)
    mode = "quick" if results["settings"]["quick"] else "full"
    ax.set_title(
        f"Replay buffers, {mode} run {results['started']} on {results['machine']['cores']} "
        f"cores (load {results['machine']['load_start']}); higher is better, missing bar = "
        "unavailable",
        fontsize=9,
    )
    ax.legend(ncol=len(libs), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    loaded = json.loads(Path(sys.argv[1]).read_text())
    print(markdown(loaded))
