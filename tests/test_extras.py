"""Each extra, installed alone in a fresh virtualenv, runs its snippet of docs/install.md.

The fresh installs are slow (a virtualenv, NumPy, Numba and the extra's libraries, and Numba
compiling from an empty cache), so they are marked ``slow``: ``python -m pytest -m slow
tests/test_extras.py`` (``-n0`` prints each extra's install and run times with ``-s``). The
snippets also run, each in its own interpreter, in the test environment (everything
installed) with the fast suite.

The wheel under test is built once from this checkout and installed with the extra under
``constraints.txt``, as a user would install a release.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "install.md"
CONSTRAINTS = ROOT / "constraints.txt"
#: Extras that are not features: tools (tests, the documentation site), peers and their union.
NOT_FEATURES = {"bench", "dev", "docs", "all"}
#: Snippets too slow for the fast suite (a Ray session; a short training run).
SLOW_SNIPPETS = {"ray", "demo"}


def snippets() -> dict[str, str]:
    """``extra -> code`` of every Python block of docs/install.md (its first line names it)."""
    out: dict[str, str] = {}
    for code in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL):
        first = code.splitlines()[0]
        match = re.fullmatch(r"# extra: (\w+)", first)
        assert match, f"a snippet of {DOC.name} does not start with '# extra: NAME': {first!r}"
        assert match[1] not in out, f"two snippets for {match[1]}"
        out[match[1]] = code
    return out


def feature_extras() -> list[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return sorted(set(extras) - NOT_FEATURES)


def clean_env() -> dict[str, str]:
    """This environment, less what would let a fresh virtualenv see this one's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run_snippet(python: str | Path, extra: str, cwd: Path, env: dict[str, str]) -> float:
    """Run the snippet of ``extra`` with ``python`` in ``cwd``; returns its wall time."""
    script = cwd / f"snippet_{extra}.py"
    script.write_text(snippets()[extra])
    env = dict(env)
    env.update(MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    done = subprocess.run(
        [str(python), str(script)], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"snippet {extra!r} failed:\n{done.stdout}\n{done.stderr}"
    return time.monotonic() - started


def test_every_feature_extra_has_a_snippet() -> None:
    assert set(snippets()) == {"none", *feature_extras()}


def test_snippets_run_here(tmp_path: Path) -> None:
    """The fast snippets in one interpreter of this environment (one import, one compile),
    each in its own namespace and directory."""
    needs = {"gym": "gymnasium", "torch": "torch", "jax": "jax", "arrow": "pyarrow",
             "minari": "minari", "inspect": "rich", "plot": "matplotlib",
             "sb3": "stable_baselines3", "torchrl": "tensordict"}  # fmt: skip
    extras = sorted(set(snippets()) - SLOW_SNIPPETS)
    missing = [
        needs[e] for e in extras if e in needs and importlib.util.find_spec(needs[e]) is None
    ]
    if missing:
        pytest.skip(f"not installed: {missing}")
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, sys\n"
        "for path in sys.argv[1:]:\n"
        "    here = os.path.join(os.path.dirname(path), os.path.basename(path)[:-3])\n"
        "    os.makedirs(here)\n"
        "    os.chdir(here)\n"
        "    code = compile(open(path).read(), path, 'exec')\n"
        "    exec(code, {'__name__': '__main__'})\n"
        "    print('ran', path)\n"
    )
    scripts = []
    for extra in extras:
        scripts.append(tmp_path / f"snippet_{extra}.py")
        scripts[-1].write_text(snippets()[extra])
    env = dict(os.environ, MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, str(driver), *map(str, scripts)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.count("ran ") == len(extras), done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        check=True, timeout=600,
    )  # fmt: skip
    return next(out.glob("rlreplay-*.whl"))


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["none", *feature_extras()])
def test_extra_alone_in_a_fresh_virtualenv(extra: str, wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    requirement = str(wheel) if extra == "none" else f"rlreplay[{extra}] @ {wheel.as_uri()}"
    env = clean_env()
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "-c", str(CONSTRAINTS), requirement],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"pip install {requirement!r} failed:\n{done.stderr[-4000:]}"
    installed = time.monotonic() - started
    ran = run_snippet(venv / "bin" / "python", extra, tmp_path, clean_env())
    print(f"\nextra {extra}: install {installed:.0f} s, snippet {ran:.0f} s")
