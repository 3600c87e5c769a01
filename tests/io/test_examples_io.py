"""The ecosystem examples run to completion (each checks that its agent learned)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("script", "needs"), [("dqn_per_torch.py", "torch"), ("r2d2_jax.py", "jax")]
)
def test_example_runs_and_learns(script: str, needs: str) -> None:
    pytest.importorskip(needs)
    pytest.importorskip("gymnasium")
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=EXAMPLES,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    print(f"{script}: {time.monotonic() - started:.1f} s\n{done.stdout}")
