"""The front page's speed figure, drawn from the cost-curve results already in the repository.

Run: ``python benchmarks/speed_figure.py [--results docs/curves.json] [--out docs/speed.svg]``
(needs matplotlib: the ``plot`` extra). Nothing is measured: the figure reads the medians that
``benchmarks/curves.py`` wrote and shows, for each operation at 10^6 stored transitions (Atari
``sample(32)`` at 10^5 frames, the largest size every frame-stacking peer ran at), each peer's
time per call over rlreplay's, the peer in the best of its setups (``fast`` or ``memory``). The
NumPy limit (the same memory work with no bookkeeping and no validation) is drawn too, hatched:
a ceiling, not a library. An operation a peer does not offer, or that was not run, is written
out instead of a bar.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from curves import series  # noqa: E402  (benchmarks/ is not a package)

#: (panel in curves.json, label, stored size), top to bottom.
PANELS: list[tuple[str, str, int]] = [
    ("add 1 env", "add, 1 env", 10**6),
    ("add 16 envs", "add, 16 envs", 10**6),
    ("sample B=32", "sample(32)", 10**6),
    ("sample B=256", "sample(256)", 10**6),
    ("sample B=4096", "sample(4096)", 10**6),
    ("atari B=32", "Atari sample(32), 10^5 frames", 10**5),
    ("per B=256", "PER sample(256) + update", 10**6),
    ("sequences 32x80", "sample_sequences(32, 80)", 10**6),
]
#: (library in curves.json, legend label), bottom bar of a group first.
LIBRARIES: list[tuple[str, str]] = [
    ("numpy-limit", "NumPy limit (no bookkeeping)"),
    ("cpprb", "cpprb 11.0.0"),
    ("tianshou", "Tianshou 2.0.1"),
    ("torchrl", "TorchRL 0.14.1"),
    ("sb3", "SB3 2.9.2"),
]
#: Why a bar is missing, where the library has no such operation or it was not run.
MISSING: dict[tuple[str, str], str] = {
    ("cpprb", "sequences 32x80"): "no sequences",
    ("sb3", "sequences 32x80"): "no sequences",
    ("sb3", "per B=256"): "no PER",
    ("torchrl", "per B=256"): "not run: its PER sampler's compiled extension did not load",
}


def _ratio(lines: dict[str, list[tuple[int, float]]], lib: str, size: int) -> float | None:
    """The best setup's µs over rlreplay's at ``size`` (None: not measured there)."""
    ours = dict(lines["rlreplay (default)"]).get(size) or dict(lines["rlreplay (memmap)"])[size]
    times = [
        dict(pts)[size]
        for name, pts in lines.items()
        if name.split(" ")[0] == lib and size in dict(pts)
    ]
    return min(times) / ours if times else None


def ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """``panel -> library -> best setup's µs / rlreplay's µs`` (None: no value)."""
    s = series(results)
    return {
        panel: {lib: _ratio(s[panel], lib, size) for lib, _ in LIBRARIES}
        for panel, _label, size in PANELS
    }


def missing(results: dict[str, Any], lib: str, panel: str, size: int) -> str:
    """What stands where a bar is missing: why, or the largest smaller size it was run at."""
    if (lib, panel) in MISSING:
        return MISSING[lib, panel]
    lines = series(results)[panel]
    smaller = sorted(
        {n for name, pts in lines.items() if name.split(" ")[0] == lib for n, _ in pts if n < size}
    )
    if smaller and (r := _ratio(lines, lib, smaller[-1])) is not None:
        return f"run at 10^{len(str(smaller[-1])) - 1} only ({r:,.0f}x there)"
    return "not measured"


def draw(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Text stays text (small, searchable); no date in the file, so reruns give the same bytes.
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "rlreplay"})
    table = ratios(results)
    colors = ["#9e9e9e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    height = 0.8 / len(LIBRARIES)
    fig, ax = plt.subplots(figsize=(9, 7.2))
    for k, (lib, label) in enumerate(LIBRARIES):
        for i, (panel, _, size) in enumerate(PANELS):
            y = len(PANELS) - 1 - i + (k - (len(LIBRARIES) - 1) / 2) * height
            value = table[panel][lib]
            if value is None:
                note = f"{label.split(' ')[0]}: {missing(results, lib, panel, size)}"
                ax.text(1.05, y, note, va="center", fontsize=7, color="#555555")
                continue
            # From 1 (rlreplay) to the value: right of the line, slower than rlreplay.
            ax.barh(
                y,
                value - 1,
                height,
                left=1,
                color=colors[k],
                label=label if i == 0 else None,
                hatch="///" if lib == "numpy-limit" else None,
                edgecolor="white",
                linewidth=0,
            )
            ax.text(
                value * 1.04 if value >= 1 else value / 1.04,
                y,
                f"{value:.2f}x",
                va="center",
                ha="left" if value >= 1 else "right",
                fontsize=7,
            )
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(0.2, 3000)
    ticks = [0.25, 0.5, 1, 2, 5, 10, 100, 1000]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(len(PANELS)))
    ax.set_yticklabels([label for _, label, _ in reversed(PANELS)])
    ax.set_xlabel(
        "time per call over rlreplay's (log scale; 1 = rlreplay, right of the line: slower)"
    )
    ax.set_title(
        f"CPU time per call at 10^6 stored transitions ({results['machine']} of a shared VM, "
        f"{results['started'].split(' ')[0]})",
        fontsize=9,
    )
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=8, loc="lower right")
    ax.grid(True, axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=HERE.parent / "docs" / "curves.json")
    p.add_argument("--out", type=Path, default=HERE.parent / "docs" / "speed.svg")
    args = p.parse_args(argv)
    results = json.loads(args.results.read_text())
    draw(results, args.out)
    for panel, label, _ in PANELS:
        cells = ", ".join(
            f"{lib} {r:.2f}x" if r is not None else f"{lib} -"
            for lib, r in ratios(results)[panel].items()
        )
        print(f"{label}: {cells}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
