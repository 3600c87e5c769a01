"""The per-step fast path of a shared-memory writer: ``add`` of one step of a one-env writer,
generated once per schema and layout (as the in-process core generates its ``add``).

A :class:`rlreplay.sharing.writer.SharedWriter` owning one env answers ``add`` with a
function built here (:func:`build_add`), which has one keyword parameter per field and
``next_<obs>`` and stores a step straight into the shared columns when

* no option is given (``env_ids`` or an unknown name go to the general path),
* every field is given and every value is already of its field's dtype and shape (the test of
  the core's fast path, :meth:`rlreplay.spec.schema.Schema.plain_check_source`: NumPy arrays, Python
  scalars that fit, NumPy scalars), with every ``next_<obs>`` or none (``None`` counts as none),
  and a step that ends its episode has them,
* the writer has nothing to check: the owner did not close the buffer, and the owner's
  liveness check (once a second) is not due.

Anything else changes nothing and goes on to the general path
(:meth:`SharedWriter.add <rlreplay.sharing.writer.SharedWriter.add>`), which converts,
validates and names what is wrong, or stores. Both store the same bytes
(``tests/shared/test_shared_fastpath.py``).

Cost: about 3.2 µs of CPU per call with the benchmark's fields (``obs: float32[4]``,
``action``, ``reward``, two flags), against 10.3 µs on the general path. What it saves: no
``**values`` dict, no ``convert_all``, no NumPy scalar reads of the writer's counters, no Numba
call with arguments (Numba's dispatcher types each argument, 150-250 ns apiece), no fresh id
buffer. The protocol is unchanged (see
:mod:`rlreplay.sharing.handle`): ``BEGIN`` is raised, a fence, the columns (and at an episode
end the final observations), the slot's record, a fence, then ``PUB``. The fences are calls of the
argument-free Numba :func:`rlreplay.storage.shared.fence` (about 70 ns each). The int64 words
are stored through ``memoryview`` casts to ``"q"`` (counters) and ``struct.pack_into("4q")``
(a slot's record), both of which CPython packs with a fixed-size 8-byte ``memcpy`` into the
aligned word: one 8-byte store, as a NumPy or Numba store of that word is.
"""

from __future__ import annotations

import math
import struct
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from rlreplay.codegen import define
from rlreplay.errors import ConfigError
from rlreplay.spec.schema import ENDING, Schema
from rlreplay.storage.shared import fence
from rlreplay.writing.step_check import step_check_source

__all__ = ["IDS_BLOCK", "build_add", "words"]

Array = np.ndarray[Any, Any]

#: Ids handed out by the fast path are views of blocks of this many consecutive ids (one
#: allocation per block instead of a fresh one-element buffer per call; a block is never
#: written again, so a view is as good as a copy).
IDS_BLOCK = 4096


class _Missing:
    """The default of a keyword not given."""

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


def words(arr: Array) -> memoryview:
    """A flat ``memoryview`` of the int64 words of the C-contiguous int64 array ``arr``."""
    if arr.dtype != np.int64 or not arr.flags.c_contiguous:
        raise ConfigError(f"words: expected a C-contiguous int64 array, got {arr.dtype}")
    return arr.data.cast("B").cast("q")


def _row_view(col: Array) -> memoryview | None:
    """A flat ``memoryview`` of a column whose rows a same-dtype 1-D value can be copied into
    by slice (``flat[r * k:(r + 1) * k] = value``: a plain copy, faster than NumPy's row
    assignment), or ``None`` where NumPy assigns: scalar and multi-axis fields, and dtypes
    whose buffer format ``memoryview`` does not copy (complex: ``Zf``)."""
    if col.ndim != 2 or col.shape[1] == 0 or not col.flags.c_contiguous:
        return None
    k = col.shape[1]
    probe = np.zeros((2, k), col.dtype).reshape(-1).data
    try:
        probe[k : 2 * k] = np.ones(k, col.dtype).data  # as the generated code will
    except (NotImplementedError, TypeError, ValueError):
        return None
    return col.reshape(-1).data


class _Ids:
    """Blocks of precomputed ids ``t * E + e`` of one env, handed out as one-element views."""

    def __init__(self, num_envs: int, env: int) -> None:
        self.num_envs, self.env = num_envs, env
        self.first = 0
        self.block = np.zeros(0, np.int64)

    def refill(self, t: int) -> Array:
        """Make the block that holds step ``t``; returns it (its first step is ``first``)."""
        self.first = t - t % IDS_BLOCK
        steps = np.arange(self.first, self.first + IDS_BLOCK, dtype=np.int64)
        self.block = steps * self.num_envs + self.env
        return self.block


def build_add(
    writer: Any,
    general: Callable[..., Array],
    env: int,
    header_words: tuple[int, int, int],
    counters: tuple[Array, Array, Array],
    due: list[float],
) -> Callable[..., Array]:
    """Generate the ``add`` of a writer owning the one env ``env``.

    Args:
        writer: The :class:`~rlreplay.sharing.writer.SharedWriter` (held weakly);
            ``schema``, ``num_envs``, ``env_capacity``, ``finals_capacity`` and its arrays
            ``_steps``, ``_finals``, ``_hdr`` and ``_records`` are read once, here.
        general: The general path, ``general(writer, **keywords)``.
        env: The env the writer owns.
        header_words: The flat indices in the header of the env's ``PUB``, ``BEGIN`` and
            ``CLOSED`` words.
        counters: The writer's ``(next step, last episode end, ended episodes)`` arrays, by
            env (the general path reads and advances them too).
        due: ``[when]``: the ``time.monotonic()`` from which calls go to the general path
            (which checks the owner's liveness and moves it on; ``-inf`` once closed).

    Returns:
        ``add(*, <field>=..., next_<obs>=..., **options)``: the ids (one int64) of the stored
        step.
    """
    schema: Schema = writer.schema
    fields, next_names = tuple(schema.fields), schema.next_names()
    names = fields + next_names
    E, C, F, e = writer.num_envs, writer.env_capacity, writer.finals_capacity, env
    pub, begin, closed = header_words
    t_arr, last_end, fcount = counters
    lines, scope = _one_source(schema, e, C, begin, closed)
    ids = _Ids(E, e)
    scope.update(
        hdr=words(writer._hdr), tt=words(t_arr),
        le=words(last_end), fc=words(fcount), due=due, monotonic=time.monotonic, fence=fence,
        MISSING=_MISSING, ids=ids, block=ids.refill(0),
    )  # fmt: skip
    if writer._records.shape[1] != 4 or not writer._records.flags.c_contiguous:
        raise ConfigError(f"build_add: expected records of 4 int64, got {writer._records.shape}")
    scope.update(rec=writer._records.data.cast("B"), pack=struct.Struct("4q").pack_into)
    for i, (name, col) in enumerate(writer._steps.items()):
        flat, k = _row_view(col), math.prod(col.shape[1:])
        scope[f"col{i}"] = col if flat is None else flat
        at = "r" if flat is None else f"r * {k}:r * {k} + {k}"
        lines.append(f"    col{i}[{at}] = v{fields.index(name)}")
    lines += [f"    start = le[{e}] + 1", f"    fid = fc[{e}]", "    done = 0"]
    if next_names:
        lines += [
            f"    if kind == {ENDING}:",
            "        done = 1",
            f"        f = {e * F} + fid % {F}",
        ]
        for i, (name, col) in enumerate(writer._finals.items()):
            scope[f"fin{i}"] = col
            lines.append(f"        fin{i}[f] = v{names.index('next_' + name)}")
        lines += [f"        le[{e}] = t", f"        fc[{e}] = fid + 1"]
    lines += [
        "    pack(rec, r * 32, t, start, fid, done)  # one 8-byte store per word",
        "    fence()  # the columns and the record are visible before PUB",
        f"    p = hdr[{pub}]",
        f"    hdr[{pub}] = t1 if t1 > p else p",
        f"    tt[{e}] = t1",
        "    i = t - ids.first",
        f"    if not 0 <= i < {IDS_BLOCK}:",
        "        block = ids.refill(t)",
        "        i = t - ids.first",
        "    return block[i:i + 1]",
    ]
    one_fn = define(lines, "one", scope, "<rlreplay shared add one step>")
    # The keyword layer: field-named parameters; every other name starts with "_" (no field
    # name does), builtins too (a field may be called "type").
    args = ", ".join(names)
    outer = [
        f"def add(*, {', '.join(f'{n}=_MISSING' for n in names)}, **_options):",
        "    if not _options:",
        f"        _ids = _one({args})",
        "        if _type(_ids) is _nd:",
        "            return _ids",
        f"    _options.update(_given({args}))",
        "    return _general(_w, **_options)",
    ]
    outer_scope = {
        "_MISSING": _MISSING, "_nd": np.ndarray, "_type": type, "_one": one_fn, "_general": general,
        "_w": weakref.proxy(writer),  # the writer holds this function: no cycle
        "_given": lambda *v: {n: x for n, x in zip(names, v, strict=True) if x is not _MISSING},
    }  # fmt: skip
    add: Callable[..., Array] = define(outer, "add", outer_scope, "<rlreplay shared add>")
    add.__doc__, add.__qualname__ = general.__doc__, "SharedWriter.add"
    return add


def _one_source(
    schema: Schema, e: int, C: int, begin: int, closed: int
) -> tuple[list[str], dict[str, Any]]:
    """``one(v0, ..., vn)``, the values in field then ``next_<obs>`` order, up to the column
    writes: returns 0 for the general path before writing anything."""
    names, check, scope = step_check_source(schema, ())
    lines = [f"def one({', '.join(f'v{i}' for i in range(len(names)))}):", "    global block"]
    lines += check
    lines += [
        # Closed by the owner, or the owner's liveness is to be checked: the general path.
        f"    if hdr[{closed}] or monotonic() >= due[0]:",
        "        return 0",
        # From here on nothing can fail: every value was tested above.
        f"    t = tt[{e}]",
        f"    b = hdr[{begin}]",
        "    t1 = t + 1",
        f"    hdr[{begin}] = t1 if t1 > b else b",
        "    fence()  # BEGIN is visible before any slot of the env is overwritten",
        f"    r = {e * C} + t % {C}",
    ]
    return lines, scope
