"""``examples/dqn_jax_jit.py`` runs: a whole DQN training loop (CartPole in ``jax.numpy``,
``add``, prioritized ``sample``, the learner step, ``update_priorities``) as one jitted scan,
here with tiny settings; the full run's pass mark is the example's own."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "dqn_jax_jit.py"


def test_the_jitted_dqn_example_runs(capsys: Any) -> None:
    spec = importlib.util.spec_from_file_location("dqn_jax_jit", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = ["--iterations", "60", "--envs", "4", "--batch", "16", "--hidden", "8",
            "--capacity", "400", "--warmup", "32", "--rows", "3", "--pass-mark", "0"]  # fmt: skip
    assert module.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("60 iterations x 4 envs")
    rows = [re.split(r"\s+", line.strip()) for line in out[2:5]]
    assert [int(r[0]) for r in rows] == [80, 160, 240]  # env steps at the end of each stretch
    assert sum(int(r[1]) for r in rows) >= 4  # random play ends an episode every ~22 steps
    assert re.fullmatch(r"greedy policy: mean return [\d.]+ over 64 episodes \(pass mark 0.0\)",
                        out[5])  # fmt: skip
