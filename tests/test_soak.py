"""The soak of ``benchmarks/soak.py``, short: every invariant holds under concurrent use.

Four writers, two samplers, a priority updater and a periodic saver share one prioritized
buffer for 20,000 operations (a few seconds); the long run is ``python benchmarks/soak.py``
(10^6 operations). A second test shows the checks catch what they claim to: a corrupted column
and an id sampled past its writer's ring are reported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

SOAK = Path(__file__).resolve().parent.parent / "benchmarks" / "soak.py"


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rlreplay_soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_short_soak_holds_every_invariant(soak: ModuleType) -> None:
    report = soak.run(ops=20_000, capacity=2048, batch=32, save_every=5_000, seed=1)
    assert report.violations == []
    assert report.ops == 20_000
    assert report.adds > 1000 and report.samples > 100 and report.updates > 50
    assert report.sampled_transitions == 32 * report.samples
    assert report.saves >= 2
    assert report.tree_checks >= report.saves * 2 + 1


def test_the_checks_report_corruption(soak: ModuleType) -> None:
    run = soak.Soak(ops=3_000, capacity=512, batch=16, save_every=10**9, seed=2)
    report = run.run()
    assert report.violations == []
    buf = run.buf
    before = list(run.stored)
    run.check_batch(buf.sample(16), [n + buf.env_capacity + 1 for n in before], "ahead")
    assert any("after it was overwritten" in v for v in report.violations)
    report.violations.clear()
    buf._cols.steps["obs"][:] += 1.0  # every stored observation changes
    run.check_batch(buf.sample(16), before, "corrupt")
    assert any("obs or reward" in v or "next_obs" in v for v in report.violations)
    report.violations.clear()
    buf._cols.steps["tag"][:] += 1
    run.check_batch(buf.sample(16), before, "corrupt")
    assert any("holds the step tagged" in v for v in report.violations)
    with buf._lock:  # a leaf changed behind the tree's back: the root no longer matches
        buf._prios.sum_tree._flat()[0] += 5.0
    run.check_tree(buf, "tampered")
    assert any("sum tree root" in v for v in report.violations)
    assert np.isfinite(report.seconds)


def test_the_cli_pins_the_allocator_in_its_own_process(soak: ModuleType, tmp_path: Path) -> None:
    # A run in a subprocess (the pinned threshold is for the rest of a process's life).
    out = tmp_path / "report.json"
    cmd = [sys.executable, str(SOAK), "--ops", "3000", "--capacity", "512", "--save-every",
           "1000", "--saver", "on", "--json", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=300)
    report = json.loads(out.read_text())["with_saver"]
    assert report["violations"] == [] and report["saves"] >= 1
    try:  # glibc (which has mallopt): the CLI pins its threshold by default
        expected = "pinned" if hasattr(ctypes.CDLL("libc.so.6"), "mallopt") else "dynamic"
    except OSError:
        expected = "dynamic"
    assert report["malloc"] == expected
    assert soak.run(ops=1000, capacity=256, batch=8, save_every=10**9).malloc == "dynamic"
