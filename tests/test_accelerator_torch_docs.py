"""Every Python snippet of the torch section of docs/accelerator.md runs, in order, in one
namespace, and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")

DOC = Path(__file__).resolve().parents[1] / "docs" / "accelerator.md"


def torch_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## torch, on any device\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_torch_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    snippets = re.findall(r"```python\n(.*?)```", torch_section(), flags=re.DOTALL)
    assert len(snippets) == 7
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for k, code in enumerate(snippets):
        exec(compile(code, f"{DOC.name}[torch snippet {k}]", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    expected = [  # each print's expected output is the comment on its line
        m.group(1).strip()
        for code in snippets
        for m in re.finditer(r"^print\(.*#\s*(.*)$", code, flags=re.MULTILINE)
    ]
    assert out == expected
    assert (tmp_path / "replay.rr").is_file()
