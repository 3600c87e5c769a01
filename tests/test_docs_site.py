"""The documentation site (mkdocs.yml): every page is reachable, every public name documented.

`mkdocs build --strict` (run by CI after the tests) checks links, anchors and docstrings;
these tests check what it cannot: that no page under docs/ is left out of the navigation by
accident, and that the API reference renders every public name of the package. Skipped where
mkdocs is not installed (`pip install -e ".[docs]"`).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mkdocs")
yaml = pytest.importorskip("yaml")
pathspec = pytest.importorskip("pathspec")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "api"

# Modules whose whole `__all__` is public API (rlreplay's version policy), each rendered by
# the API reference.
PUBLIC_MODULES = [
    "rlreplay",
    "rlreplay.sampling",
    "rlreplay.storage",
    "rlreplay.spec",
    "rlreplay.transforms",
    "rlreplay.io",
    "rlreplay.io.arrow",
    "rlreplay.io.minari",
    "rlreplay.io.inspect",
    "rlreplay.distributed",
    "rlreplay.jax",
    "rlreplay.torch",
    "rlreplay.integrations.sb3",
    "rlreplay.integrations.torchrl",
]
# Front-ends: the classes of their `__all__` (their modules mirror another library's layout).
FRONT_ENDS = [
    "rlreplay.compat.reagent",
    "rlreplay.compat.alf",
    "rlreplay.compat.keras_gym",
    "rlreplay.compat.nnabla_rl",
    "rlreplay.compat.nnabla_rl.replay_buffers",
]
# Public names that no docstring renderer can show, and where the reference states them.
DESCRIBED_IN_TEXT = {"rlreplay.__version__": "api/rlreplay.md"}

_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
_LINK = re.compile(r"\[`([\w.]+)`\]\[([\w.]+)\]")


def _config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return config


def _nav_pages(nav: Any) -> list[str]:
    """Every page path in a nav tree (lists of pages, `{title: page}` and sections)."""
    if isinstance(nav, str):
        return [nav] if nav.endswith(".md") else []
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    return []


def _spec(config: dict[str, Any], key: str) -> Any:
    return pathspec.GitIgnoreSpec.from_lines((config.get(key) or "").splitlines())


def _object(path: str) -> Any:
    """The object a dotted path names (module, then attributes)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _api_text() -> dict[str, str]:
    return {f"api/{p.name}": p.read_text(encoding="utf-8") for p in sorted(API.glob("*.md"))}


def test_every_page_is_in_the_nav_or_excluded_with_a_reason() -> None:
    config = _config()
    nav = _nav_pages(config["nav"])
    excluded = _spec(config, "exclude_docs")
    not_in_nav = _spec(config, "not_in_nav")
    pages = sorted(
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if not excluded.match_file(p.relative_to(DOCS).as_posix())
    )
    missing = [page for page in pages if page not in nav and not not_in_nav.match_file(page)]
    assert not missing, (
        f"pages under docs/ that the site's navigation does not list: {missing}; add each to "
        "`nav` in mkdocs.yml (or to `not_in_nav`, after a `# reason` line)"
    )
    assert not [page for page in nav if page not in pages], "nav names a page that is not there"
    assert len(nav) == len(set(nav)), "a page is listed twice in nav"


def test_pages_left_out_of_the_nav_say_why() -> None:
    lines = (_config().get("not_in_nav") or "").splitlines()
    for i, line in enumerate(lines):
        if line.strip() and not line.lstrip().startswith("#"):
            assert i > 0 and lines[i - 1].lstrip().startswith("#"), (
                f"not_in_nav pattern {line.strip()!r} needs a `# reason` line above it"
            )


def _required() -> list[tuple[str, str]]:
    """(module, name) for every public name the API reference must render."""
    required = []
    for module in PUBLIC_MODULES:
        required += [(module, name) for name in importlib.import_module(module).__all__]
    for module in FRONT_ENDS:
        mod = importlib.import_module(module)
        required += [(module, n) for n in mod.__all__ if isinstance(getattr(mod, n), type)]
    return required


def test_every_public_name_is_in_the_api_reference() -> None:
    pages = _api_text()
    rendered = {path for text in pages.values() for path in _DIRECTIVE.findall(text)}
    linked = {(name, target) for text in pages.values() for name, target in _LINK.findall(text)}
    missing = []
    for module, name in _required():
        path = f"{module}.{name}"
        if path in rendered:
            continue
        if path in DESCRIBED_IN_TEXT:
            if name in pages[DESCRIBED_IN_TEXT[path]]:
                continue
        else:
            # Re-exported: documented once where it is rendered, linked from here.
            obj = getattr(importlib.import_module(module), name)
            if any(n == name and t in rendered and _object(t) is obj for n, t in linked):
                continue
        missing.append(path)
    assert not missing, (
        f"public names missing from docs/api/*.md: {missing}; render each with "
        "`::: module.name` (or, for a re-export rendered elsewhere, link it as "
        "[`name`][where.it.is.rendered])"
    )


def test_every_rendered_name_exists() -> None:
    for page, text in _api_text().items():
        for path in _DIRECTIVE.findall(text):
            try:
                _object(path)
            except (ImportError, AttributeError) as exc:
                pytest.fail(f"{page} renders {path}, which does not exist ({exc!r})")
