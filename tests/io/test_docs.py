"""Every Python snippet of docs/ecosystem.md runs, in order, in one namespace (the README's
own snippet runs in tests/test_readme.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "ecosystem.md"


def snippets(text: str | None = None) -> list[str]:
    text = DOC.read_text() if text is None else text
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_doc_has_a_snippet_per_piece() -> None:
    text = "\n".join(snippets())
    for call in ("to_arrow", "to_pandas", "to_parquet", "from_parquet(", "next_obs", "to_minari",
                 "from_minari", "convert(",
                 "iterate(", "inspect_checkpoint", 'as_="torch"', 'as_="jax"', "progress=",
                 "sample_episodes(2, as_="):  # fmt: skip
        assert call in text, call


def test_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    for name in ("pyarrow", "pandas", "minari", "torch", "jax", "rich"):
        pytest.importorskip(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setattr("tempfile.mkdtemp", lambda: str(tmp_path / "minari"))
    namespace: dict[str, Any] = {}
    for k, code in enumerate(snippets()):
        exec(compile(code, f"{DOC.name}[snippet {k}]", "exec"), namespace)
    out = capsys.readouterr().out
    assert "6 300 0 0" in out  # the to_minari line prints what its comment says
    assert "Integrity" in out and (tmp_path / "steps.parquet").is_file()
