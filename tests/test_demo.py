"""Tests for ``rlreplay demo`` (src/rlreplay/demo.py, cli.py, __main__.py).

The training runs here use budgets of a few hundred env steps: they check the plumbing (buffer
in, history and PNG out, exit-code semantics), not that the DQN learns; ``rlreplay demo``
itself is the learning check. No test asserts on timing.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlreplay
from rlreplay import demo
from rlreplay.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _subprocess_env() -> dict[str, str]:
    """The environment for a child Python that must import this checkout's rlreplay."""
    src = str(Path(rlreplay.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _require_extras() -> None:
    for name in ("torch", "gymnasium", "matplotlib", "tqdm"):
        pytest.importorskip(name)


def _tiny(tmp_path: Path, **overrides: object) -> demo.DemoConfig:
    """A config small enough to run in about a second: few steps, a tiny net, short evals."""
    settings: dict[str, object] = {
        "seed": 0,
        "max_steps": 600,
        "eval_every": 200,
        "eval_episodes": 3,
        "learning_starts": 100,
        "batch_size": 32,
        "hidden": 32,
        "eps_decay_steps": 300,
        "out_dir": tmp_path,
        "quiet": True,
    }
    settings.update(overrides)
    return demo.DemoConfig(**settings)  # type: ignore[arg-type]


def _assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_smoke_run_records_history_and_writes_png(tmp_path: Path) -> None:
    _require_extras()
    cfg = _tiny(tmp_path, pass_return=1e9)  # unreachable: the run uses its whole budget
    result = demo.run_demo(cfg)
    assert [r.step for r in result.history] == [200, 400, 600]
    for record in result.history:
        # CartPole pays 1 per step and truncates at 500, so a mean return lies in [1, 500].
        assert 1.0 <= record.mean_return <= 500.0
        assert record.wall_time >= 0.0
    assert [r.wall_time for r in result.history] == sorted(r.wall_time for r in result.history)
    assert result.steps == 600
    assert result.episode_returns, "600 random-ish CartPole steps end several episodes"
    assert sum(ret for _, ret in result.episode_returns) <= 600
    assert not result.passed
    assert result.exit_code == demo.EXIT_FAILED
    assert "step budget" in result.stop_reason
    assert result.png_path == tmp_path / demo.PNG_NAME
    _assert_png(result.png_path)


def test_run_stops_at_first_passing_evaluation(tmp_path: Path) -> None:
    _require_extras()
    result = demo.run_demo(_tiny(tmp_path, pass_return=0.0))  # any return passes
    assert result.passed
    assert result.exit_code == demo.EXIT_PASSED
    assert result.steps == 200
    assert len(result.history) == 1
    _assert_png(result.png_path)


def test_same_seed_same_history(tmp_path: Path) -> None:
    _require_extras()
    first = demo.run_demo(_tiny(tmp_path / "a", max_steps=400))
    second = demo.run_demo(_tiny(tmp_path / "b", max_steps=400))
    assert [r.mean_return for r in first.history] == [r.mean_return for r in second.history]
    assert first.episode_returns == second.episode_returns


def test_time_limit_stops_training_and_fails(tmp_path: Path) -> None:
    _require_extras()
    cfg = _tiny(tmp_path, time_limit=1.0, pass_return=0.0)
    # The clock started long ago: the first check (after 100 steps) is already over the limit,
    # so even an evaluation that would pass is never reached.
    result = demo.run_demo(cfg, started_at=time.perf_counter() - 3600.0)
    assert not result.passed
    assert result.exit_code == demo.EXIT_FAILED
    assert result.steps == 100
    assert result.history == []
    assert "time limit" in result.stop_reason
    _assert_png(result.png_path)


def test_demo_main_prints_table_and_verdict(tmp_path: Path) -> None:
    _require_extras()
    out = io.StringIO()
    assert demo.demo_main(_tiny(tmp_path, pass_return=0.0), out=out) == 0
    text = out.getvalue()
    assert "step" in text and "mean return" in text and "wall time" in text
    assert "PASSED" in text

    out = io.StringIO()
    assert demo.demo_main(_tiny(tmp_path, max_steps=200, pass_return=1e9), out=out) == 1
    assert "FAILED" in out.getvalue()


def test_missing_extra_returns_2_with_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A None entry in sys.modules makes ``import torch`` raise ImportError, installed or not.
    monkeypatch.setitem(sys.modules, "torch", None)
    assert demo.demo_main(_tiny(tmp_path)) == demo.EXIT_MISSING_EXTRA
    err = capsys.readouterr().err
    assert "torch" in err
    assert "pip install 'rlreplay[demo]'" in err
    assert not (tmp_path / demo.PNG_NAME).exists()


def test_epsilon_decays_linearly_then_stays() -> None:
    cfg = demo.DemoConfig(eps_start=1.0, eps_end=0.1, eps_decay_steps=100)
    assert cfg.epsilon(0) == 1.0
    assert cfg.epsilon(50) == pytest.approx(0.55)
    assert cfg.epsilon(100) == pytest.approx(0.1)
    assert cfg.epsilon(10_000) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "overrides",
    [{"eval_every": 0}, {"max_steps": -1}, {"n_step": 1.5}, {"time_limit": 0.0}, {"tau": 0.0}],
)
def test_config_rejects_bad_values(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(overrides))):
        demo.DemoConfig(**overrides)  # type: ignore[arg-type]


def test_format_history_and_verdict() -> None:
    history = [demo.EvalRecord(5_000, 120.5, 12.25), demo.EvalRecord(10_000, 480.0, 30.0)]
    table = demo.format_history(history).splitlines()
    assert table[0].split() == ["step", "mean", "return", "wall", "time", "(s)"]
    assert table[1].split() == ["5,000", "120.5", "12.2"]
    assert table[2].split() == ["10,000", "480.0", "30.0"]
    assert "no evaluation" in demo.format_history([])

    cfg = demo.DemoConfig()
    result = demo.DemoResult(True, history, [], 10_000, 31.0, Path("x.png"), "evaluation")
    assert demo.format_verdict(result, cfg).startswith("PASSED: mean return 480.0 >= 450")
    result = demo.DemoResult(False, history[:1], [], 9, 301.0, Path("x.png"), "time limit")
    verdict = demo.format_verdict(result, cfg)
    assert verdict.startswith("FAILED: best mean return 120.5 < 450")
    assert "time limit" in verdict
    result = demo.DemoResult(False, [], [], 300, 2.0, Path("x.png"), "step budget")
    assert demo.format_verdict(result, cfg).startswith("FAILED: no evaluation ran; stopped after")


def test_process_start_time_is_in_the_past() -> None:
    assert demo.process_start_time() <= time.perf_counter()


def test_cli_demo_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in ("--seed", "--steps", "--out", "--time-limit", "--n-step", "--quiet"):
        assert option in text


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["demo", "--steps", "0"],
        ["demo", "--steps", "many"],
        ["demo", "--time-limit", "-5"],
        ["demo", "--time-limit", "nan"],
        ["demo", "--n-step", "0"],
        ["demo", "--bogus"],
    ],
)
def test_cli_rejects_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_cli_demo_short_budget_fails_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _require_extras()
    # 300 steps: no evaluation (every 5,000) and no learning (starts at 1,000), so this is fast
    # and fails for sure.
    code = main(["demo", "--steps", "300", "--out", str(tmp_path), "--quiet", "--seed", "3"])
    assert code == demo.EXIT_FAILED
    assert "FAILED" in capsys.readouterr().out
    _assert_png(tmp_path / demo.PNG_NAME)


def test_importing_rlreplay_does_not_import_the_extras() -> None:
    code = (
        "import sys, rlreplay, rlreplay.cli, rlreplay.demo\n"
        "print(sorted(m for m in ('torch', 'gymnasium', 'matplotlib', 'tqdm') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=_subprocess_env(),
    ).stdout
    assert out.strip() == "[]"


def test_python_dash_m_rlreplay_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlreplay", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_subprocess_env(),
    )
    assert proc.returncode == 0
    assert "--time-limit" in proc.stdout
