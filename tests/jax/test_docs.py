"""Every Python snippet of the JAX section of docs/accelerator.md runs, in order, in one
namespace, and prints what its comments say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax")

DOC = Path(__file__).resolve().parents[2] / "docs" / "accelerator.md"


def jax_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## JAX\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_jax_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    snippets = re.findall(r"```python\n(.*?)```", jax_section(), flags=re.DOTALL)
    assert len(snippets) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    for k, code in enumerate(snippets):
        exec(compile(code, f"{DOC.name}[JAX snippet {k}]", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    # Each print's expected output is the comment on its line.
    expected = [
        m.group(1).strip()
        for code in snippets
        for m in re.finditer(r"^print\(.*#\s*(.*)$", code, flags=re.MULTILINE)
        if not m.group(1).startswith("the keys")
    ]
    assert [line for line in out if not line.startswith("[")] == expected
    assert (tmp_path / "replay.rr").is_file()
