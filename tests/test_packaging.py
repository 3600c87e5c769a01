"""What a user meets before the code: the README's commands, the extras, the version, the
errors of missing extras and the plots of ``rlreplay inspect``."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]


def bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    blocks = bash_blocks((ROOT / "README.md").read_text())
    tests = [b for b in blocks if b.endswith("python -m pytest")]
    demo = [b for b in blocks if b.endswith("rlreplay demo")]
    assert len(tests) == 1 and len(demo) == 1, blocks
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests[0] in ci
    for command in (tests[0], demo[0]):
        # torch first, from the constraints file, then the package under the same constraints.
        first, second, *_ = command.split(" && ")
        assert first == "pip install -c constraints.txt torch", command
        assert second.startswith("pip install -c constraints.txt -e "), command


def test_constraints_pin_torch_and_the_extras_take_ranges() -> None:
    pins = [
        line.strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "torch==2.13.0" in pins
    for extra, requirements in EXTRAS.items():
        if extra == "dev":  # test and lint tools are pinned on purpose
            continue
        for requirement in requirements:
            assert "==" not in requirement, (extra, requirement)
    torch = [r for extra in EXTRAS.values() for r in extra if re.split(r"[<>=!~]", r)[0] == "torch"]
    assert torch and all(r == "torch>=2.3" for r in torch), torch


def test_minari_extra_declares_what_minari_imports() -> None:
    # Minari's storage modules import Pillow without declaring it.
    assert any(r.lower().startswith("pillow") for r in EXTRAS["minari"])
    assert {"pyarrow", "gymnasium"} <= {re.split(r"[<>=]", r)[0] for r in EXTRAS["minari"]}


def test_release_metadata() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert project["requires-python"] == ">=3.11"
    for minor in (11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in project["classifiers"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{project['version']}]" in changelog


def test_version_flag_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlreplay", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"rlreplay {version('rlreplay')}"


@pytest.mark.parametrize(
    ("module", "call", "extra"),
    [
        ("gymnasium", "from_spaces", "gym"),
        ("pyarrow", "to_arrow", "arrow"),
        ("minari", "to_minari", "minari"),
        ("torch", "torch", "torch"),
        ("jax", "jax", "jax"),
    ],
)
def test_a_missing_extra_is_named(
    module: str, call: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails
    fields = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
    buf = rr.ReplayBuffer(8, fields, seed=0)
    buf.add(obs=[0, 1], action=0, reward=1.0, terminated=True, truncated=False, next_obs=[1, 2])
    calls: dict[str, Any] = {
        "from_spaces": lambda: rr.ReplayBuffer.from_spaces(None, None, capacity=8),
        "to_arrow": buf.to_arrow,
        "to_minari": lambda: buf.to_minari("x-v0"),
        "torch": lambda: buf.sample(1, as_="torch"),
        "jax": lambda: buf.sample(1, as_="jax"),
    }
    with pytest.raises(ImportError, match=re.escape(f"rlreplay[{extra}]")):
        calls[call]()


def test_from_spaces_without_gymnasium_says_what_was_expected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(ModuleNotFoundError, match="expected gymnasium") as err:
        rr.ReplayBuffer.from_spaces(None, None, capacity=8)
    assert err.value.name == "gymnasium"


def test_plot_ticks_are_values_that_can_occur(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from rlreplay.io.inspect import inspect_checkpoint, write_plots

    buf = rr.PrioritizedReplayBuffer(120, {"obs": rr.Field((), np.float32)}, num_envs=3, seed=0)
    for t in range(40):  # every episode 10 steps long, with return 10: single-valued histograms
        ends = np.full(3, t % 10 == 9)
        buf.add(obs=np.full(3, t, np.float32), reward=np.ones(3), terminated=ends,
                truncated=np.zeros(3, bool), next_obs=np.zeros(3, np.float32))  # fmt: skip
    buf.save(tmp_path / "b.ckpt")
    report = inspect_checkpoint(tmp_path / "b.ckpt")
    figures: dict[str, Any] = {}
    close = plt.close

    def keep(fig: Any = None) -> None:  # the figures, before write_plots closes them
        figures[fig.axes[0].get_xlabel()] = fig
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    write_plots(report, tmp_path / "plots")

    def ticks(axis: Any) -> np.ndarray[Any, Any]:
        lo, hi = sorted(axis.get_view_interval())
        values = np.asarray(axis.get_ticklocs())
        return values[(values >= lo - 1e-9) & (values <= hi + 1e-9)]

    assert len(figures) == 4, list(figures)
    for label in ("episode length (steps)", "episode return"):  # both single-valued: 10
        ax = figures[label].axes[0]
        assert ax.get_title() == "12 complete episodes"
        np.testing.assert_array_equal(ticks(ax.xaxis), [10.0])
        counts = ticks(ax.yaxis)
        np.testing.assert_array_equal(counts, np.round(counts))
    fill = figures["env"].axes[0]
    np.testing.assert_array_equal(ticks(fill.xaxis), [0.0, 1.0, 2.0])
