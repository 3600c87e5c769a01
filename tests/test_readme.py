"""The README is a front page: its Python runs as written, and every file it points at exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# A Markdown link or image target without a scheme: ](target) or ](target#anchor).
_LINK = re.compile(r"\]\((?P<target>[^)\s#:]+)(?:#[^)\s]*)?\)")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_gymnasium_loop_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gymnasium")
    import rlreplay as rr

    blocks = python_blocks(README.read_text())
    assert any("CartPole-v1" in b and "from_spaces" in b for b in blocks), blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for k, code in enumerate(blocks):
        exec(compile(code, f"README.md[python {k}]", "exec"), namespace)
    batch, buf = namespace["batch"], namespace["buf"]
    assert batch.obs.shape == (256, 4) and batch.next_obs.shape == (256, 4)
    assert batch.action.shape == (256,) and batch.discount.shape == (256,)
    # 3-step windows: a discount is gamma**steps, or 0 when the episode terminated inside.
    expected = np.where(batch.terminated, 0.0, 0.99**batch.steps)
    assert np.allclose(batch.discount, expected) and set(batch.steps) <= {1, 2, 3}
    # The comment on the checkpoint line: the reloaded buffer draws what the original draws.
    again = rr.load(tmp_path / "replay.ckpt")
    assert np.array_equal(again.sample(64).ids, buf.sample(64).ids)


def test_every_file_the_readme_points_at_exists() -> None:
    targets = _LINK.findall(README.read_text())
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def test_the_speed_figure_is_on_the_readme_and_the_site() -> None:
    assert (ROOT / "docs" / "speed.svg").is_file()
    assert "](docs/speed.svg)" in README.read_text()
    assert "](speed.svg)" in (ROOT / "docs" / "index.md").read_text()
    assert "benchmarks/speed_figure.py" in (ROOT / "benchmarks" / "README.md").read_text()
