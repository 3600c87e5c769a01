"""ReAgent's pickled ``sum_tree`` checkpoint file (private to the ReAgent front-end).

ReAgent's prioritized buffer (like Dopamine's, whose ``save``/``load`` it reuses) writes every
public attribute that is not an array with ``pickle``: its ``sum_tree`` attribute, a
``reagent.replay_memory.sum_tree.SumTree`` whose state is ``{"nodes": [level arrays, root
first], "max_recorded_priority": float}``. Unpickling an arbitrary file runs code named by the
file, so :class:`RestrictedUnpickler` resolves only the globals such a file needs:

* NumPy's array and scalar reconstruction (``numpy.core.multiarray._reconstruct`` /
  ``scalar``, their ``numpy._core`` spellings, ``numpy.core.numeric._frombuffer`` for pickle
  protocol 5, ``numpy.ndarray``, ``numpy.dtype``), which build arrays and dtypes from bytes;
* plain builtin containers (``list``, ``tuple``, ``dict``, ``set``, ``frozenset``) and, for
  the text protocols 0-2, ``_codecs.encode`` restricted to latin-1 (how they spell bytes) and
  ``copyreg._reconstructor`` restricted to building a ``SumTree``;
* a torch tensor where ReAgent's tree kept one (``max_recorded_priority`` after priorities
  given as tensors): ``torch._utils._rebuild_tensor_v2``, ``collections.OrderedDict`` and
  ``torch.storage._load_from_bytes``, the last through torch's weights-only loader;
* ReAgent's and Dopamine's ``SumTree`` class paths, mapped to the front-end's
  :class:`~rlreplay.compat.reagent.sum_tree.SumTree` (its ``__setstate__`` reads their state).

Any other global raises :class:`rlreplay.CheckpointError` naming it, before anything is called.
:func:`dumps_sum_tree` writes a front-end ``SumTree`` as ReAgent's own file would hold it (the
class named by ReAgent's path, arrays by NumPy's long-standing ``numpy.core.multiarray`` path),
so ReAgent's ``load`` reads a checkpoint the front-end saved.
"""

from __future__ import annotations

import codecs
import collections
import gzip
import importlib
import io
import pickle
from typing import Any, ClassVar

import numpy as np

from rlreplay import CheckpointError
from rlreplay.compat.reagent.sum_tree import SumTree

__all__ = [
    "REAGENT_SUM_TREE",
    "RestrictedUnpickler",
    "dumps_sum_tree",
    "loads_sum_tree",
    "read_sum_tree_file",
]

Array = np.ndarray[Any, Any]

#: Where ReAgent's ``SumTree`` class lives (the global its pickled ``sum_tree`` file names).
REAGENT_SUM_TREE = ("reagent.replay_memory.sum_tree", "SumTree")
_SUM_TREE_PATHS = {
    REAGENT_SUM_TREE,
    ("dopamine.replay_memory.sum_tree", "SumTree"),
    ("rlreplay.compat.reagent.sum_tree", "SumTree"),
}
_NPY_MAGIC = b"\x93NUMPY"
_PY2_MODULES = {"copy_reg": "copyreg", "__builtin__": "builtins"}


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """The NumPy callables and classes an array or scalar pickle names, under both spellings."""
    try:  # NumPy 2 (numpy.core is its deprecated alias)
        multiarray = importlib.import_module("numpy._core.multiarray")
        numeric = importlib.import_module("numpy._core.numeric")
    except ImportError:  # NumPy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
        numeric = importlib.import_module("numpy.core.numeric")
    out: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }
    for core in ("numpy.core", "numpy._core"):
        out[(f"{core}.multiarray", "_reconstruct")] = multiarray._reconstruct
        out[(f"{core}.multiarray", "scalar")] = multiarray.scalar
        out[(f"{core}.numeric", "_frombuffer")] = getattr(numeric, "_frombuffer")  # noqa: B009
    return out


_CONTAINERS: dict[tuple[str, str], Any] = {
    ("builtins", "list"): list,
    ("builtins", "tuple"): tuple,
    ("builtins", "dict"): dict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    # Protocol 0/1 spell `object` as the base of copyreg._reconstructor.
    ("builtins", "object"): object,
}


def _latin1_encode(text: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as protocols 0-2 use it to spell bytes: latin-1 only."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise CheckpointError(f"refused _codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, "latin1", errors)


def _torch_load_from_bytes(data: bytes) -> Any:
    """``torch.storage._load_from_bytes``, through torch's own restricted (weights-only) load.

    ReAgent's ``SumTree.set`` keeps ``max(value, max_recorded_priority)``: a priority given
    as a torch tensor leaves a 0-d tensor there, pickled through torch's storage bytes.
    """
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


def _torch_rebuild_tensor_v2(*args: Any) -> Any:
    """``torch._utils._rebuild_tensor_v2``: a tensor view of a storage already loaded."""
    rebuild: Any = getattr(importlib.import_module("torch._utils"), "_rebuild_tensor_v2")  # noqa: B009
    return rebuild(*args)


def _fresh(fn: Any) -> Any:
    """A new function object calling ``fn``: a hostile BUILD may set attributes on what
    ``find_class`` returns, and must only ever reach objects made for that one load."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals of a pickled ReAgent/Dopamine ``SumTree``.

    Every load gets its own objects for the Python-level globals (a throwaway ``SumTree``
    subclass, fresh wrapper functions); the shared ones it hands out are C types and
    functions, which take no attributes. So a pickle's ``BUILD`` on a global (``setattr`` on
    what it resolves to) cannot patch a class or function outside this load. The trees the
    load builds are validated copies, in :attr:`trees` by ``id`` of the loaded object.

    Raises:
        rlreplay.CheckpointError: From :meth:`find_class`, for any other global.
    """

    _shared: ClassVar[dict[tuple[str, str], Any] | None] = None

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self.trees: dict[int, SumTree] = {}
        trees = self.trees

        class _Loading(SumTree):
            def __setstate__(self, state: Any) -> None:
                tree = SumTree.__new__(SumTree)
                SumTree.__setstate__(tree, state)  # validates
                trees[id(self)] = tree

        def reconstructor(cls: Any, base: Any, state: Any) -> Any:
            # copyreg._reconstructor as protocols 0/1 use it for a plain class: SumTree only.
            if cls is not _Loading or base is not object or state is not None:
                raise CheckpointError(f"refused copyreg._reconstructor({cls!r}, {base!r})")
            return object.__new__(_Loading)

        self.sum_tree_class: type = _Loading
        table = dict(self.shared())
        table.update({path: _Loading for path in _SUM_TREE_PATHS})
        table[("copyreg", "_reconstructor")] = reconstructor
        for key in (("_codecs", "encode"), ("torch.storage", "_load_from_bytes")):
            table[key] = _fresh(table[key])
        table[("torch._utils", "_rebuild_tensor_v2")] = _fresh(_torch_rebuild_tensor_v2)
        for core in ("numpy.core", "numpy._core"):  # _frombuffer is a Python function
            key = (f"{core}.numeric", "_frombuffer")
            table[key] = _fresh(table[key])
        self._table = table

    @classmethod
    def shared(cls) -> dict[tuple[str, str], Any]:
        """``(module, name)`` -> the object it resolves to, before the per-load wrappers."""
        if cls._shared is None:
            table = {**_numpy_globals(), **_CONTAINERS}
            table[("_codecs", "encode")] = _latin1_encode
            table[("torch.storage", "_load_from_bytes")] = _torch_load_from_bytes
            table[("collections", "OrderedDict")] = collections.OrderedDict
            cls._shared = table
        return cls._shared

    def find_class(self, module: str, name: str) -> Any:
        # Protocols 0-2 spell these modules by their Python 2 names (pickle's fix_imports).
        module = _PY2_MODULES.get(module, module)
        try:
            return self._table[(module, name)]
        except KeyError:
            raise CheckpointError(
                f"refused global {module}.{name}: a ReAgent sum_tree checkpoint names only "
                "NumPy arrays, builtin containers and the SumTree class"
            ) from None


def loads_sum_tree(data: bytes) -> SumTree:
    """The ``SumTree`` of a pickled ReAgent/Dopamine ``sum_tree`` file's (decompressed) bytes.

    Raises:
        rlreplay.CheckpointError: A refused global, a malformed pickle, or anything but a
            ``SumTree`` with valid levels.
    """
    unpickler = RestrictedUnpickler(io.BytesIO(data))
    try:
        out = unpickler.load()
    except CheckpointError:
        raise
    except Exception as exc:  # a malformed pickle fails in many ways; none runs foreign code
        msg = f"sum_tree: not a readable pickle ({type(exc).__name__}: {exc})"
        raise CheckpointError(msg) from None
    tree = unpickler.trees.get(id(out)) if type(out) is unpickler.sum_tree_class else None
    if tree is None:
        raise CheckpointError(f"sum_tree: expected a pickled SumTree, got {type(out).__name__}")
    return tree


_PurePickler: Any = pickle._Pickler  # the pure-Python pickler (typeshed lists few members)


class _ReAgentPickler(_PurePickler):  # type: ignore[misc]
    """The pure-Python pickler, naming globals as ReAgent's environment has them.

    The front-end's ``SumTree`` is written as ``reagent.replay_memory.sum_tree.SumTree`` and
    NumPy's ``numpy._core`` modules as ``numpy.core`` (what NumPy 1.x, which ReAgent runs on,
    imports; NumPy 2 reads that spelling too).
    """

    dispatch = _PurePickler.dispatch.copy()

    def save_global(self, obj: Any, name: str | None = None) -> None:
        module, qualname = getattr(obj, "__module__", None), name or obj.__qualname__
        if obj is SumTree:
            module, qualname = REAGENT_SUM_TREE
        elif isinstance(module, str) and module.startswith("numpy._core."):
            module = "numpy.core." + module[len("numpy._core.") :]
        else:
            super().save_global(obj, name)
            return
        self.save(module)
        self.save(qualname)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)


_ReAgentPickler.dispatch[type] = _ReAgentPickler.save_global


def dumps_sum_tree(tree: SumTree) -> bytes:
    """``tree`` pickled as ReAgent's ``save`` pickles its ``sum_tree`` (protocol 4)."""
    buf = io.BytesIO()
    _ReAgentPickler(buf, protocol=4).dump(tree)
    return buf.getvalue()


def read_sum_tree_file(path: str) -> tuple[Array, float | None]:
    """The leaves and ``max_recorded_priority`` of a ``sum_tree_ckpt`` file.

    The file is either ReAgent's pickled ``SumTree`` (read with :class:`RestrictedUnpickler`;
    its leaves are padded to a power of two) or a plain ``.npy`` array of leaves, which earlier
    front-end versions wrote (no ``max_recorded_priority``: ``None``).

    Raises:
        rlreplay.CheckpointError: Unreadable, refused or malformed contents.
    """
    try:
        with open(path, "rb") as f, gzip.GzipFile(fileobj=f, mode="rb") as infile:
            data = infile.read()
    except (OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: expected a gzipped sum_tree file; {exc}") from None
    if data.startswith(_NPY_MAGIC):
        try:
            leaves: Array = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise CheckpointError(f"{path}: expected a NumPy array of priorities; {exc}") from None
        return leaves, None
    try:
        tree = loads_sum_tree(data)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return tree.nodes[-1], float(tree.max_recorded_priority)
