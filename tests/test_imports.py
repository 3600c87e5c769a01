"""Imports: every module imports alone and quietly, ``import rlreplay`` stays light, and no
import cycle exists, whether type-checked or run.

* Every module under ``src/rlreplay`` (front-ends included) is imported first, alone, in a
  fresh process (forked from an interpreter that has loaded only NumPy and Numba), a few at a
  time: no error, no warning, no thread or process
  started, no file or directory written, no environment variable changed. An audit hook
  (:func:`sys.addaudithook`) installed before the import sees every ``open`` for writing,
  ``mkdir``, rename, removal, fork, exec and socket connection; a wrapper of ``_thread``
  counts thread starts. Not counted: creating ``__pycache__`` directories (the interpreter's
  bytecode cache and Numba's compiled-kernel cache live there; files written into them do
  count, so a kernel compiled at import shows) and directories opened for writing, which can
  only make anonymous files (``O_TMPFILE``: Numba's check that its cache directory is
  writable).
* ``import rlreplay`` loads none of the optional libraries beyond what NumPy and Numba load by
  themselves.
* The import graph has no cycle, in two readings. *Static*: every import a module makes at
  import or type-check time (``TYPE_CHECKING`` blocks included, imports inside functions left
  out, relative imports resolved). *Run time*: the imports that run, plus what Python runs
  first for them: importing ``a.b.c`` executes the packages ``a`` and ``a.b`` (their
  ``__init__``) unless the importer is inside them already. A cycle of the second kind is
  order-dependent: it breaks as soon as something imports its modules in another order.
"""

from __future__ import annotations

import ast
import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import rlreplay

SRC = Path(rlreplay.__file__).resolve().parents[1]

# Known run-time cycle: rlreplay.transforms (its __init__) imports rlreplay.buffer.host, which
# runs rlreplay.buffer's __init__, whose modules import rlreplay.transforms back. It holds only
# because rlreplay's own __init__ imports rlreplay.buffer before rlreplay.transforms.
# Name -> packages of a run-time cycle tolerated for now (none: keep it that way).
KNOWN_RUNTIME_CYCLES: dict[str, tuple[str, ...]] = {}
# Environment variables that a framework an integration adapts sets when it is imported.
FRAMEWORK_ENVIRON = {"PYGAME_HIDE_SUPPORT_PROMPT"}


def module_names(root: Path = SRC, package: str = "rlreplay") -> dict[str, Path]:
    """Module name -> file of every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


# ---------------------------------------------------------------------- each module alone
# Run in a fresh interpreter as ``python -B -c CHILD module``; prints one JSON line.
CHILD = r"""
import os, sys
name = sys.argv[1]
seen = []
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
WATCHED = {
    "os.mkdir", "os.rename", "os.replace", "os.remove", "os.unlink", "os.rmdir", "os.symlink",
    "os.link", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.copyfile",
    "shutil.rmtree", "_thread.start_new_thread", "subprocess.Popen", "os.system", "os.fork",
    "os.forkpty", "os.posix_spawn", "os.exec", "os.kill", "socket.connect", "socket.bind",
    "signal.signal",
}

def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else flags & WRITE
        if writes and not (isinstance(path, (str, bytes)) and os.path.isdir(path)):
            seen.append(f"open({path!r}, {mode!r}) for writing")
    elif event in WATCHED:
        if event == "os.mkdir" and os.path.basename(os.fsdecode(args[0])) == "__pycache__":
            return
        seen.append(f"{event}{args!r}"[:300])

sys.addaudithook(hook)
# Python 3.11 raises no audit event for a new thread: count the calls that start one (before
# threading takes its reference to them).
import _thread

def counted(start):
    def start_thread(*args, **kwargs):
        seen.append("thread started")
        return start(*args, **kwargs)
    return start_thread

for attr in ("start_new_thread", "start_joinable_thread"):
    if hasattr(_thread, attr):
        setattr(_thread, attr, counted(getattr(_thread, attr)))
# A site hook (a .pth file) may have imported threading already, which then holds its own
# reference: wrap that one too.
threading_module = sys.modules.get("threading")
for attr in ("_start_new_thread", "_start_joinable_thread"):
    if threading_module is not None and hasattr(threading_module, attr):
        setattr(threading_module, attr, counted(getattr(threading_module, attr)))
import importlib, json, threading, warnings
environ = dict(os.environ)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    importlib.import_module(name)
changed = sorted(k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k))
print(json.dumps({
    "events": seen,
    "warnings": [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught],
    "threads": [t.name for t in threading.enumerate() if t is not threading.main_thread()],
    "environ": changed,
}))
"""


# The parent of the children above: it imports NumPy and Numba (which every module of the
# package imports first, through ``rlreplay``'s ``__init__``; what they do at import is theirs,
# not the package's), then forks a child per module name read from stdin. The child runs CHILD
# with its stdout and stderr captured and reports them, with its exit status, as one JSON line
# on the parent's stdout. Forking after NumPy and Numba are loaded takes about 0.5 s of CPU off
# each of the ~200 imports.
PARENT = r"""
import json, os, sys, tempfile, traceback
import numpy, numba

CHILD = sys.argv[1]
report = sys.stdout
for line in sys.stdin:
    name = line.strip()
    out_r, out_w = os.pipe()
    err = tempfile.TemporaryFile()
    report.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.dup2(out_w, 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["-c", name]
        code = 0
        try:
            exec(compile(CHILD, "<child>", "exec"), {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        out = f.read()
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    err.seek(0)
    report.write(json.dumps({
        "returncode": status,
        "stdout": out.decode(errors="replace"),
        "stderr": err.read().decode(errors="replace"),
    }) + "\n")
    report.flush()
    err.close()
"""


class ImportChildren:
    """One :data:`PARENT` process: :meth:`report` imports a module in a fresh child of it."""

    def __init__(self, cwd: Path, path: Path = SRC) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-B", "-c", PARENT, CHILD],
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def report(self, module: str) -> dict[str, Any]:
        """What importing ``module`` first, in a fresh child, did (or its error)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(module + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 300)
        assert ready, f"importing {module} took more than 300 s"
        line = self.proc.stdout.readline()
        assert line, f"the import parent died before reporting {module}"
        child = json.loads(line)
        if child["returncode"] != 0:
            return {"error": child["stderr"].strip().splitlines()[-12:]}
        report: dict[str, Any] = json.loads(child["stdout"].strip().splitlines()[-1])
        if child["stderr"].strip():  # printed at import: a side effect too
            report["stderr"] = child["stderr"].strip().splitlines()[-5:]
        return report

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()


ALL_MODULES = sorted(module_names())


@pytest.fixture(scope="module")
def import_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every module's import report, computed at once: a few import parents in parallel, each
    forking a child per module; the front-ends that load torch first (the longest)."""
    cwd = tmp_path_factory.mktemp("imports")
    order = sorted(ALL_MODULES, key=lambda m: not m.startswith("rlreplay.compat.alf"))
    workers = min(4, (os.cpu_count() or 1) + 1)
    parents = [ImportChildren(cwd) for _ in range(workers)]
    shares = [order[i::workers] for i in range(workers)]
    try:
        with ThreadPoolExecutor(workers) as pool:
            done = pool.map(lambda p, ms: {m: p.report(m) for m in ms}, parents, shares)
            reports = {m: r for share in done for m, r in share.items()}
    finally:
        for parent in parents:
            parent.close()
    assert list(cwd.iterdir()) == [], "an import wrote into its working directory"
    return {m: reports[m] for m in order}


@pytest.mark.parametrize("module", ALL_MODULES)
def test_module_imports_alone_without_side_effects(
    module: str, import_reports: dict[str, dict[str, Any]]
) -> None:
    report = import_reports[module]
    assert "error" not in report, "\n".join(report["error"])
    if module.startswith("rlreplay.integrations"):
        # An adapter imports its framework, and `import gymnasium` (under Stable-Baselines3)
        # sets this variable itself; anything else the adapter changes still fails.
        report = {**report, "environ": sorted(set(report["environ"]) - FRAMEWORK_ENVIRON)}
    assert report == {"events": [], "warnings": [], "threads": [], "environ": []}


def test_every_module_is_checked() -> None:
    assert len(ALL_MODULES) > 100
    for name in ("rlreplay", "rlreplay.storage.base", "rlreplay.compat.reagent", "rlreplay.cli"):
        assert name in ALL_MODULES


def test_the_side_effect_hook_sees_writes_and_threads(tmp_path: Path) -> None:
    """A child reports what a module does at import (a module written for the purpose), and
    what it printed."""
    (tmp_path / "noisy_module.py").write_text(
        "import threading, warnings, os\n"
        "open('written.txt', 'w').close()\n"
        "threading.Thread(target=lambda: None).start()\n"
        "warnings.warn('loud')\n"
        "os.environ['NOISY'] = '1'\n"
        "import sys; print('noise', file=sys.stderr)\n"
    )
    (tmp_path / "broken_module.py").write_text("raise RuntimeError('broken at import')\n")
    children = ImportChildren(tmp_path, path=tmp_path)
    try:
        report = children.report("noisy_module")
        broken = children.report("broken_module")
        again = children.report("noisy_module")  # a fresh child: the first import left nothing
    finally:
        children.close()
    assert "RuntimeError: broken at import" in broken["error"][-1]
    assert again == report
    assert report["stderr"] == ["noise"]
    assert any("written.txt" in e for e in report["events"])
    assert "thread started" in report["events"]
    assert report["warnings"] and "loud" in report["warnings"][0]
    assert report["environ"] == ["NOISY"]


# ---------------------------------------------------------------------- import rlreplay
HEAVY = [
    "torch", "jax", "pandas", "pyarrow", "minari", "ray", "gymnasium", "rich", "matplotlib",
    "tqdm", "scipy",
]  # fmt: skip


def top_level_modules(code: str) -> set[str]:
    """Top-level packages in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return {m.split(".")[0] for m in json.loads(out.stdout.strip().splitlines()[-1])}


def test_import_rlreplay_loads_no_optional_library() -> None:
    """``import rlreplay`` loads none of ``HEAVY`` beyond what its dependencies NumPy and Numba
    load themselves (Numba imports SciPy when it is installed)."""
    baseline = top_level_modules("import numpy, numba") & set(HEAVY)
    assert baseline <= {"scipy"}
    loaded = top_level_modules("import rlreplay") & set(HEAVY)
    assert loaded <= baseline, sorted(loaded - baseline)


# ---------------------------------------------------------------------- cycles
def _import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement that runs at import or type-check time (module body, top-level
    ``if``/``try``/``with``/class bodies; not function bodies), and whether it sits under
    ``if TYPE_CHECKING:`` (type-check time only)."""
    todo: list[tuple[ast.AST, bool]] = [(node, False) for node in tree.body]
    while todo:
        node, typing_only = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, typing_only
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += [(n, True) for n in node.body] + [(n, typing_only) for n in node.orelse]
            continue
        todo += [(child, typing_only) for child in ast.iter_child_nodes(node)]


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             known: dict[str, Path]) -> list[str]:  # fmt: skip
    """The modules an import statement imports (``from p import m`` of a submodule ``m`` is
    ``p.m``, of any other name ``p``); relative imports resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def _parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph(
    root: Path = SRC, package: str = "rlreplay", *, runtime: bool
) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports.

    ``runtime=False``: every import at import or type-check time. ``runtime=True``: the
    imports that run, each also reaching the packages Python executes first for it (the
    imported module's parents that are not the importer's own).
    """
    known = module_names(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        deps: set[str] = set()
        for node, typing_only in _import_nodes(ast.parse(path.read_text())):
            if runtime and typing_only:
                continue
            for target in _targets(node, module, path.name == "__init__.py", known):
                deps.add(target)
                if runtime:
                    deps |= _parents(target) - _parents(module) - {module}
        graph[module] = {d for d in deps if d in known and d != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected component of ``graph``
    with more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, deps = work[-1]
            dep = next(deps, None)
            if dep is not None:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                elif dep in on_stack:
                    low[node] = min(low[node], index[dep])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_in(graph, c) for c in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle through the smallest module of a strongly connected component (breadth first:
    a shortest one)."""
    start = min(component)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for dep in sorted(graph[node] & component):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start] * 2
                if dep not in came:
                    came[dep] = node
                    nxt.append(dep)
        frontier = nxt
    raise AssertionError("not a cycle")  # pragma: no cover


def _known(cycle: list[str]) -> str | None:
    """The name of the known cycle ``cycle`` belongs to (all its modules in those packages)."""
    for name, packages in KNOWN_RUNTIME_CYCLES.items():
        inside = [m for m in cycle if any(m == p or m.startswith(p + ".") for p in packages)]
        if len(inside) == len(cycle):
            return name
    return None


def test_no_import_cycle_when_type_checked() -> None:
    """No cycle among the imports made at import or type-check time, front-ends included."""
    graph = import_graph(runtime=False)
    assert "rlreplay.compat.reagent.circular_replay_buffer" in graph
    assert "rlreplay.storage.base" in graph["rlreplay.storage"]
    found = cycles(graph)
    assert found == [], "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_import_cycle_at_run_time_but_the_known_ones() -> None:
    """No cycle among the imports that run (with the package ``__init__`` each one runs
    first), front-ends included, but those of ``KNOWN_RUNTIME_CYCLES``."""
    found = [c for c in cycles(import_graph(runtime=True)) if _known(c) is None]
    assert found == [], "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_graphs_see_package_init_and_relative_cycles(tmp_path: Path) -> None:
    """A cycle through a package's ``__init__`` counts at run time only; a relative-import
    cycle and a ``TYPE_CHECKING`` one count when type-checked; a module importing a sibling
    of its own package does not make a cycle with the package."""
    files = {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "from pkg.sub.leaf import X\nA = 1\n",
        "pkg/b.py": "from . import a\n",  # pkg.b -> pkg.a; pkg itself is b's own parent
        "pkg/sub/__init__.py": "from pkg.sub.back import Y\n",
        "pkg/sub/leaf.py": "X = 1\n",
        "pkg/sub/back.py": "from pkg.a import A\nY = 1\n",  # sub runs back -> a: a cycle
        "pkg/rel/__init__.py": "",
        "pkg/rel/one.py": "from .two import T\nO = 1\n",
        "pkg/rel/two.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from .one import O\nT = 1\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    static = import_graph(tmp_path, "pkg", runtime=False)
    runtime = import_graph(tmp_path, "pkg", runtime=True)
    assert cycles(static) == [["pkg.rel.one", "pkg.rel.two", "pkg.rel.one"]]
    assert "pkg.sub" in runtime["pkg.a"] and "pkg.sub" not in static["pkg.a"]
    assert "pkg" not in runtime["pkg.b"]
    assert cycles(runtime) == [["pkg.a", "pkg.sub", "pkg.sub.back", "pkg.a"]]
