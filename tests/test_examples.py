"""Every script under ``examples/migrating/`` runs to completion, as a user would run it.

Each script is written in the original library's style with only the import line changed; it
checks what it prints against the original's documented behaviour itself (``assert``), so a
non-zero exit is a behaviour change a migrating user would meet.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted((EXAMPLES / "migrating").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_migrating_example_runs(script: Path) -> None:
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout}\n{done.stderr}"


def test_there_is_an_example_per_library() -> None:
    stems = {s.stem for s in SCRIPTS}
    for lib in ("reagent", "alf", "keras_gym", "nnabla_rl"):
        assert any(stem.startswith(lib) for stem in stems), f"no examples/migrating/{lib}_*.py"
