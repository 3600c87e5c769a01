"""benchmarks/report.py: the comparison with the best peers speaks of figures only, and a run
without peers compares nothing instead of printing a column of misses."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_report() -> Any:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results(libs: dict[str, dict[str, float]]) -> dict[str, Any]:
    """A run of workload ``single`` with ``{lib: {metric: median}}``."""
    cells = {
        f"{lib}/single": {"metrics": {k: {"median": v, "spread_pct": 1.0} for k, v in m.items()}}
        for lib, m in libs.items()
    }
    return {"workloads": ["single"], "libraries": list(libs), "cells": cells}


def test_a_run_without_peers_compares_nothing() -> None:
    report = load_report()
    text, data = report.targets(results({"rlreplay": {"add": 5e5, "sample": 6e6}}))
    assert "|" not in text and "NO" not in text and "no |" not in text
    assert text.startswith("Not compared (no peer measured on the row): 1. per-step add")
    assert [row["met"] for row in data] == [None, None]


def test_rows_with_a_peer_are_compared() -> None:
    report = load_report()
    text, data = report.targets(
        results({"rlreplay": {"add": 6e5, "sample": 6e6}, "sb3": {"add": 4e5}})
    )
    assert "| 1. per-step add (adds/s) | 1.50x | SB3 | >= 1.0x | yes |" in text
    assert "Not compared (no peer measured on the row): 1. sample(256)" in text
    assert [row["met"] for row in data] == [True, None]


def test_user_facing_text_names_no_process() -> None:
    words = ("issue", "seed's", "seeds/", "the team")
    paths = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "CHANGELOG.md"]
    paths += sorted((ROOT / "docs").rglob("*.md"))
    paths += [ROOT / "benchmarks" / "report.py", ROOT / "benchmarks" / "run.py"]
    paths += sorted((ROOT / "examples").rglob("*.py"))
    found = []
    for path in paths:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            lowered = line.lower().replace("never-issued", "").replace("issued", "")
            found += [f"{path.relative_to(ROOT)}:{n}: {w}" for w in words if w in lowered]
    assert not found, "\n".join(found)
