"""Arrow, pandas and Parquet exports: one row per stored step (extra ``rlreplay[arrow]``).

Columns, in order: ``env_id``, ``episode_id`` (the id of the episode's first step, which may
have been overwritten since), ``step`` (position in the episode, 0 at its first step), ``id``
(the step's transition id), ``episode_end`` (whether the step ends its episode),
``episode_abandoned`` (whether that end is an abandoned one, see below), then every stored
field in declaration order (``reward``, ``terminated``, ``truncated`` last). A field of
shape ``(d1, ..., dk)`` is a column of nested fixed-size lists (``d1`` lists of ... of ``dk``
values); its values come straight from the stored arrays, so the Arrow column holds exactly
the stored bytes. Rows are env by env in time order.

Episode ends. A step with ``episode_end`` ends its episode: normally with ``terminated`` or
``truncated`` set and a final observation (kept by the buffer, not a row here: the next
observation of any other step is the next row's within its episode). An episode ended by
:meth:`~rlreplay.ReplayBuffer.abandon_episode` ends at its newest step with neither flag and
no final observation: that step has ``episode_end`` and ``episode_abandoned`` True
(``episode_abandoned == episode_end & ~terminated & ~truncated``). Its transition has no next
state, so a reader building ``(s, a, r, s')`` tuples drops that row (and every n-step window
reaching it), as the buffer never samples those steps; the episode was neither terminated nor
truncated, so it must not be bootstrapped as either. No final step is made up for it. A
running episode's steps all have ``episode_end`` False.

The table's schema metadata ``b"rlreplay"`` holds the fields (shapes and dtypes) as JSON, so a
reader can restore each column's shape: :func:`column_to_numpy` does.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.errors import FieldError
from rlreplay.io._steps import stored_steps

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rlreplay.buffer.replay import ReplayBuffer

__all__ = ["column_to_numpy", "to_arrow", "to_pandas", "to_parquet"]

Array = np.ndarray[Any, Any]
INSTALL_HINT = "pip install 'rlreplay[arrow]'"
#: Columns that come before the fields.
INDEX_COLUMNS = ("env_id", "episode_id", "step", "id", "episode_end", "episode_abandoned")


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover - exercised without pyarrow installed
        raise ImportError(f"Arrow export needs pyarrow: {INSTALL_HINT}") from exc
    return pyarrow


def _nested(pa: Any, values: Array) -> Any:
    """``values`` (shape ``(rows, d1, ..., dk)``) as an Arrow array of nested fixed-size lists."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.dtype.kind == "c":
        raise FieldError(f"Arrow has no complex type; cannot export a field of dtype {flat.dtype}")
    out = pa.array(flat)
    for size in reversed(values.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, size)
    return out


def to_arrow(buf: ReplayBuffer) -> pa.Table:
    """Every stored step of ``buf`` as a :class:`pyarrow.Table` (see the module docstring).

    Raises:
        FieldError: A complex-valued field (Arrow has no complex type).
    """
    pa = _pyarrow()
    with buf.atomic():
        steps = stored_steps(buf)
        columns: dict[str, Any] = {
            "env_id": pa.array(steps.env_ids),
            "episode_id": pa.array(steps.episode_ids),
            "step": pa.array(steps.step_in_episode),
            "id": pa.array(steps.ids),
            "episode_end": pa.array(steps.to_end == 0),
            "episode_abandoned": pa.array(steps.abandoned),
        }
        for name in buf.schema.names:
            f = buf.schema.fields[name]
            values = (
                buf.get_field(name, steps.ids)
                if steps.ids.size
                else np.zeros((0, *f.shape), f.dtype)
            )
            columns[name] = _nested(pa, values)
        meta = {"fields": buf.schema.to_json(), "num_envs": buf.num_envs}
    table = pa.table(columns)
    return table.replace_schema_metadata({b"rlreplay": json.dumps(meta).encode()})


def column_to_numpy(table: pa.Table, name: str) -> Array:
    """Column ``name`` of an exported table as one NumPy array ``(rows, *field_shape)``.

    Raises:
        FieldError: ``name`` is not a column of ``table``.
    """
    if name not in table.column_names:
        raise FieldError(f"column_to_numpy: no column {name!r}; columns: {table.column_names}")
    column = table.column(name).combine_chunks()
    shape: list[int] = []
    while hasattr(column.type, "list_size"):
        shape.append(column.type.list_size)
        column = column.flatten()
    values: Array = column.to_numpy(zero_copy_only=False)
    meta = (table.schema.metadata or {}).get(b"rlreplay")
    if meta is not None:
        fields = json.loads(meta)["fields"]
        if name in fields:
            values = values.astype(np.dtype(fields[name]["dtype"]), copy=False)
    return values.reshape(table.num_rows, *shape)


def to_pandas(buf: ReplayBuffer) -> pd.DataFrame:
    """Every stored step as a :class:`pandas.DataFrame` (a field of shape ``s`` per row is an
    array of shape ``s`` in its cell; scalar fields are plain columns)."""
    table = to_arrow(buf)
    frame = table.to_pandas()
    for name in buf.schema.names:
        shape = buf.schema.fields[name].shape
        if len(shape) > 1:  # Arrow gives nested object arrays; cells become (d1, ..., dk) arrays
            values = column_to_numpy(table, name)
            frame[name] = list(values)
    return frame


def to_parquet(buf: ReplayBuffer, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """Write :func:`to_arrow`'s table to a Parquet file (``kwargs`` go to
    :func:`pyarrow.parquet.write_table`, e.g. ``compression="zstd"``)."""
    _pyarrow()
    import pyarrow.parquet as pq

    pq.write_table(to_arrow(buf), os.fspath(path), **kwargs)
