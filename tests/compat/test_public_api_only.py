"""Every front-end uses only the core's public API (issue 13: thin adapters).

Imports: every module under ``src/rlreplay/compat/`` and ``src/rlreplay/distributed/`` takes
core names only from ``rlreplay`` or a core subpackage (``rlreplay.spec``; never a leaf module
such as ``rlreplay.spec.schema`` or ``rlreplay.errors``), and only names in that package's
``__all__`` (read from its ``__init__.py``). Imports inside functions count too.

Private attributes: scans every module under ``src/rlreplay/compat/`` (AST) and fails on a
private attribute (a leading underscore, dunders aside) read or written on a *core object*: the
core buffer a front-end holds (``self._core._x``, ``core._x``, ``buf._core._x``, ``pcore._x``)
or anything the module builds from, or annotates with, a class of the core
(``self._tree = SumTree(...)`` then ``self._tree._x``; ``def f(b: ReplayBuffer): b._x``). Also
refused: importing a private name or module of the core, and ``getattr(core, "_x")``. A
front-end's own private attributes (``self._x``) are fine, and so are its own private modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
COMPAT = SRC / "rlreplay" / "compat"
DISTRIBUTED = SRC / "rlreplay" / "distributed"
FILES = sorted(COMPAT.rglob("*.py"))
FRONT_END_FILES = FILES + sorted(DISTRIBUTED.rglob("*.py"))
_CORE_NAME = re.compile(r"core", re.IGNORECASE)  # core, _core, pcore, _pcore, core_buffer, ...


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_core_module(module: str) -> bool:
    """``rlreplay`` and its modules, the front-ends over it (compat, distributed) aside."""
    return (module == "rlreplay" or module.startswith("rlreplay.")) and not module.startswith(
        ("rlreplay.compat", "rlreplay.distributed")
    )


def _terminal(node: ast.expr) -> str | None:
    """``x`` of ``x``, ``a.b.x``; None for anything else (calls, subscripts, ...)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Scanner(ast.NodeVisitor):
    """Collects ``(line, text)`` of every use of a core object's private attribute."""

    def __init__(self) -> None:
        self.core_classes: set[str] = set()  # names of core classes imported here
        self.core_modules: set[str] = set()  # aliases of core modules (``rr``)
        self.core_names: set[str] = set()  # names / self-attributes holding core objects
        self.found: list[tuple[int, str]] = []

    # -- what is a core object
    def _is_core_class(self, node: ast.expr | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return False
        if isinstance(node, ast.BinOp):  # X | None
            return self._is_core_class(node.left) or self._is_core_class(node.right)
        if isinstance(node, ast.Subscript):  # Optional[X], type[X]
            return self._is_core_class(node.slice)
        if isinstance(node, ast.Name):
            return node.id in self.core_classes
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id in self.core_modules and node.attr[:1].isupper()
        return False

    def is_core(self, node: ast.expr) -> bool:
        name = _terminal(node)
        if name is None:
            return False
        if _CORE_NAME.search(name):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.core_names
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id in ("self", "cls") and f"self.{node.attr}" in self.core_names
        return False

    def _bind(self, target: ast.expr, value: ast.expr | None, annotation: ast.expr | None) -> None:
        built = isinstance(value, ast.Call) and self._is_core_class(value.func)
        if not (built or self._is_core_class(annotation)):
            return
        if isinstance(target, ast.Name):
            self.core_names.add(target.id)
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id in ("self", "cls")
        ):
            self.core_names.add(f"self.{target.attr}")

    # -- collecting bindings (first pass)
    def collect(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if _is_core_module(node.module):
                    for alias in node.names:
                        if alias.name[:1].isupper():
                            self.core_classes.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_core_module(alias.name):
                        self.core_modules.add(alias.asname or alias.name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value, None)
            elif isinstance(node, ast.AnnAssign):
                self._bind(node.target, node.value, node.annotation)
            elif isinstance(node, ast.arg) and self._is_core_class(node.annotation):
                self.core_names.add(node.arg)

    # -- finding uses (second pass)
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _is_private(node.attr) and self.is_core(node.value):
            self.found.append((node.lineno, ast.unparse(node)))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        reflective = isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr")
        if reflective and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            attr = node.args[1].value
            if isinstance(attr, str) and _is_private(attr) and self.is_core(node.args[0]):
                self.found.append((node.lineno, ast.unparse(node)))
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level and _is_core_module(node.module):
            private = [a.name for a in node.names if _is_private(a.name)]
            if private or any(_is_private(p) for p in node.module.split(".")):
                self.found.append((node.lineno, ast.unparse(node)))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if _is_core_module(alias.name) and any(_is_private(p) for p in parts):
                self.found.append((node.lineno, ast.unparse(node)))


def private_core_uses(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every private access to a core object in ``source``."""
    tree = ast.parse(source)
    scanner = _Scanner()
    scanner.collect(tree)
    scanner.visit(tree)
    return scanner.found


@pytest.mark.parametrize("path", FRONT_END_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_front_end_uses_only_the_public_core_api(path: Path) -> None:
    found = private_core_uses(path.read_text())
    assert not found, f"{path.relative_to(SRC)} reads core internals: " + "; ".join(
        f"line {line}: {code}" for line, code in found
    )


def test_every_front_end_is_scanned() -> None:
    for lib in ("alf", "reagent", "keras_gym", "nnabla_rl"):
        assert any(p.relative_to(COMPAT).parts[0] == lib for p in FILES), lib


# ---------------------------------------------------------------------- the scanner itself
@pytest.mark.parametrize(
    "source",
    [
        "self._core._lock",
        "x = self._core._index.env",
        "core._rng.random()",
        "buf._core._draw_starts(1)",
        "pcore._prios",
        "self._pcore._priorities = None",
        "getattr(self._core, '_rng')",
        "from rlreplay.buffer.replay import _check_timeout",
        "from rlreplay._private import thing",
        "from rlreplay.sampling.trees import SumTree\nself._tree = SumTree(4)\nself._tree._tree",
        "from rlreplay import ReplayBuffer\ndef f(b: ReplayBuffer) -> None:\n    b._cols",
        "from rlreplay import ReplayBuffer\ndef f(b: 'ReplayBuffer | None') -> None:\n    b._cols",
        "import rlreplay as rr\nbuf = rr.ReplayBuffer(4, {})\nbuf._index",
        "from rlreplay.buffer.prioritized import PrioritizedReplayBuffer as P\n"
        "t: P = make()\nt._prios",
    ],
)
def test_the_scanner_finds_private_core_access(source: str) -> None:
    assert private_core_uses(source), source


@pytest.mark.parametrize(
    "source",
    [
        "self._core.add(obs=1)",
        "self._x._y",  # a front-end object's own attribute holding its own object
        "self._lock",
        "core.stored_range().first",
        "buf._core.sample(4)",  # the front-end's own attribute, then public core API
        "from rlreplay.compat.alf._nest import pack_rows",  # the front-end's own modules
        "x.__class__.__name__",
        "from rlreplay.errors import ReplayError\nclass E(ReplayError):\n    def f(self):\n"
        "        return self._msg",
    ],
)
def test_the_scanner_allows_public_and_own_private_access(source: str) -> None:
    assert not private_core_uses(source), source


# ---------------------------------------------------------------------- imports of the core
def declared_all(init: Path) -> frozenset[str]:
    """The names of the literal ``__all__`` of a package's ``__init__.py`` (none without one)."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def core_packages() -> dict[str, frozenset[str]]:
    """Each core package (``rlreplay``, ``rlreplay.spec``, ...) -> the names of its ``__all__``."""
    out = {}
    for init in (SRC / "rlreplay").rglob("__init__.py"):
        package = ".".join(init.parent.relative_to(SRC).parts)
        if _is_core_module(package):
            out[package] = declared_all(init)
    return out


PUBLIC = core_packages()


def non_public_core_imports(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every use of the core from outside its public surface.

    Allowed: ``from P import name`` where ``P`` is a core package and ``name`` is in its
    ``__all__``; ``import P`` (with or without ``as``), and then ``P.name`` only for a name
    of that ``__all__`` or a core subpackage of ``P``. Everything else of the core is refused:
    leaf modules (``rlreplay.spec.schema``, ``rlreplay.errors``) and names outside ``__all__``.
    """
    found: list[tuple[int, str]] = []
    bound: dict[str, str] = {}  # local name -> the core package it is
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = PUBLIC.get(node.module) if _is_core_module(node.module) else None
            if _is_core_module(node.module) and (
                names is None or any(a.name not in names for a in node.names)
            ):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_core_module(alias.name):
                    continue
                if alias.name not in PUBLIC:
                    found.append((node.lineno, ast.unparse(node)))
                elif alias.asname:
                    bound[alias.asname] = alias.name
                else:  # ``import rlreplay.spec`` binds ``rlreplay``
                    bound[alias.name.split(".")[0]] = "rlreplay"

    def package_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            outer = package_of(node.value)
            full = f"{outer}.{node.attr}"
            return full if outer is not None and full in PUBLIC else None
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            package = package_of(node.value)
            full = f"{package}.{node.attr}"
            public = full in PUBLIC or not _is_core_module(full)
            if package is not None and not public and node.attr not in PUBLIC[package]:
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_public_surface_is_read() -> None:
    assert {"Field", "ReplayBuffer", "ConfigError"} <= PUBLIC["rlreplay"]
    assert "Schema" in PUBLIC["rlreplay.spec"] and "as_field" not in PUBLIC["rlreplay.spec"]
    assert "rlreplay.spec.schema" not in PUBLIC and "rlreplay.compat" not in PUBLIC


@pytest.mark.parametrize(
    "path", FRONT_END_FILES, ids=lambda p: str(p.relative_to(SRC / "rlreplay"))
)
def test_front_end_imports_only_the_public_core(path: Path) -> None:
    found = non_public_core_imports(path.read_text())
    assert not found, f"{path.relative_to(SRC)} imports the core from outside its public API: " + (
        "; ".join(f"line {line}: {code}" for line, code in found)
    )


@pytest.mark.parametrize(
    "source",
    [
        "from rlreplay.buffer.replay import ReplayBuffer",  # a leaf module
        "from rlreplay.errors import ConfigError",  # a top-level leaf module
        "from rlreplay.spec import as_field",  # not in rlreplay.spec.__all__
        "from rlreplay import spec",  # a subpackage is not a name of __all__
        "from rlreplay import ReplayBuffer, _private",
        "import rlreplay.spec.schema",
        "import rlreplay.errors as errors",
        "import rlreplay as rr\nrr.errors.ConfigError",
        "import rlreplay as rr\nrr.spec.as_field",
        "import rlreplay.spec\nrlreplay.spec.schema.Field",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from rlreplay.buffer.replay import ReplayBuffer",
        "def f():\n    from rlreplay.sampling.uniform import draw_mixed",  # deferred: counts
    ],
)
def test_the_import_scanner_finds_non_public_imports(source: str) -> None:
    assert non_public_core_imports(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from rlreplay import ReplayBuffer as CoreBuffer, ConfigError",
        "from rlreplay.spec import Schema",
        "import rlreplay",
        "import rlreplay as rr\nrr.Field((), float)\nrr.spec.Schema",
        "import rlreplay.spec as spec\nspec.positive_int",
        "from rlreplay.compat.alf._nest import pack_rows",  # a front-end's own modules
        "from rlreplay.distributed.wire import Reply",
        "import rlreplay.compat.nnabla_rl.random\nrlreplay.compat.nnabla_rl.random.drng",
    ],
)
def test_the_import_scanner_allows_the_public_surface(source: str) -> None:
    assert not non_public_core_imports(source), source
