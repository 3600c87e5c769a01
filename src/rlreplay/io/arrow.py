"""Arrow, pandas and Parquet exports and their inverse (extra ``rlreplay[arrow]``).

Out (:func:`to_arrow`, :func:`to_pandas`, :func:`to_parquet`): one row per stored step.
Columns, in order: ``env_id``, ``episode_id`` (the id of the episode's first step, which may
have been overwritten since), ``step`` (position in the episode, 0 at its first step), ``id``
(the step's transition id), ``episode_end`` (whether the step ends its episode),
``episode_abandoned`` (whether that end is an abandoned one, see below), then every stored
field in declaration order (``reward``, ``terminated``, ``truncated`` last), then
``next_<obs>`` for every observation field (declaration order). A field of shape
``(d1, ..., dk)`` is a column of nested fixed-size lists (``d1`` lists of ... of ``dk``
values); its values come straight from the stored arrays, so the Arrow column holds exactly
the stored bytes. Rows are env by env in time order.

Final observations. Every observation is stored once, so the next observation of a step is
the next row's within its episode, except at an episode's end, where it is the final
observation passed to :meth:`~rlreplay.ReplayBuffer.add` (or
:meth:`~rlreplay.ReplayBuffer.end_episode`). The export keeps those in the ``next_<obs>``
columns: on a row that ends its episode with ``terminated`` or ``truncated``, ``next_<obs>``
holds the final observation (the stored bytes); on every other row it is null. So the table
holds everything stored and nothing twice.

Episode ends. A step with ``episode_end`` ends its episode: normally with ``terminated`` or
``truncated`` set and a final observation in ``next_<obs>``. An episode ended by
:meth:`~rlreplay.ReplayBuffer.abandon_episode` ends at its newest step with neither flag and
no final observation: that step has ``episode_end`` and ``episode_abandoned`` True
(``episode_abandoned == episode_end & ~terminated & ~truncated``) and null ``next_<obs>``.
Its transition has no next state, so a reader building ``(s, a, r, s')`` tuples drops that
row (and every n-step window reaching it), as the buffer never samples those steps; the
episode was neither terminated nor truncated, so it must not be bootstrapped as either. No
final step is made up for it. A running episode's steps all have ``episode_end`` False.

The table's schema metadata ``b"rlreplay"`` holds, as JSON, the fields (shapes and dtypes),
``num_envs``, the buffer's class name and its configuration (``capacity``, ``n_step``,
``gamma``, ``frame_stack``, ...), so a reader can restore each column's shape
(:func:`column_to_numpy`) and the buffer itself.

In (:func:`from_arrow`, :func:`from_parquet`): a new buffer with the table's fields and
configuration, filled env by env with :meth:`~rlreplay.ReplayBuffer.extend` (final
observations from ``next_<obs>``) and :meth:`~rlreplay.ReplayBuffer.abandon_episode`. It
stores the same steps, with the same episodes, flags and final observations, so
:meth:`~rlreplay.ReplayBuffer.get_transitions` gives the same transitions, bit for bit. Each
env's steps are numbered from 0 again: ids equal the table's ``id`` when every env's first
row is its step 0 (nothing overwritten, cleared or dequeued), and otherwise differ by a
constant step offset per env. Priorities are not exported: a prioritized buffer gives every
step its initial priority.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.errors import ConfigError, FieldError
from rlreplay.io._steps import final_observations, stored_steps

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rlreplay.buffer.replay import ReplayBuffer

__all__ = [
    "column_to_numpy",
    "from_arrow",
    "from_parquet",
    "to_arrow",
    "to_pandas",
    "to_parquet",
]

Array = np.ndarray[Any, Any]
INSTALL_HINT = "pip install 'rlreplay[arrow]'"
#: Columns that come before the fields.
INDEX_COLUMNS = ("env_id", "episode_id", "step", "id", "episode_end", "episode_abandoned")
#: Constructor arguments kept in the schema metadata (``config``), read back by :func:`from_arrow`.
CONFIG_KEYS = (
    "capacity", "n_step", "gamma", "frame_stack", "stack_pad", "next_fields", "seed",
    "record_episodic_return", "reward_clip", "default_return", "recent_ratio", "recent_steps",
    "replacement", "as_", "device",
)  # fmt: skip


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover - exercised without pyarrow installed
        raise ImportError(f"Arrow export needs pyarrow: {INSTALL_HINT}") from exc
    return pyarrow


def _nested(pa: Any, values: Array, valid: Array | None = None) -> Any:
    """``values`` (shape ``(rows, d1, ..., dk)``) as an Arrow array of nested fixed-size lists;
    rows where ``valid`` is False are null (their slots keep the values given, as Arrow
    requires of a fixed-size list)."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.dtype.kind == "c":
        raise FieldError(f"Arrow has no complex type; cannot export a field of dtype {flat.dtype}")
    out = pa.array(flat)
    for size in reversed(values.shape[1:]):
        out = pa.FixedSizeListArray.from_arrays(out, size)
    if valid is None or valid.all():
        return out
    # The same array with a validity bitmap (Arrow's bit order: least significant bit first).
    bitmap = pa.py_buffer(np.packbits(np.asarray(valid, bool), bitorder="little").tobytes())
    if values.ndim > 1:
        return pa.Array.from_buffers(out.type, len(out), [bitmap], children=[out.values])
    return pa.Array.from_buffers(out.type, len(out), [bitmap, out.buffers()[1]])


def _config(buf: ReplayBuffer) -> dict[str, Any]:
    """The constructor arguments :func:`from_arrow` needs to rebuild ``buf`` (JSON-able)."""
    opts = buf.draw_options
    clip = buf.reward_clip
    config: dict[str, Any] = {
        "capacity": int(buf.capacity),
        "n_step": int(buf.n_step),
        "gamma": float(buf.gamma),
        "frame_stack": int(buf.frame_stack),
        "stack_pad": buf.stack_pad,
        "next_fields": list(buf.next_fields),
        "seed": buf.seed,
        "record_episodic_return": bool(buf.record_episodic_return),
        "reward_clip": None if clip is None else [float(clip[0]), float(clip[1])],
        "default_return": float(buf.default_return),
        "recent_ratio": opts.recent_ratio,
        "recent_steps": opts.recent_steps,
        "replacement": opts.replacement,
    }
    as_, device = buf.output
    if as_ != "numpy":  # a torch/JAX default output is part of the configuration
        config.update(as_=as_, device=device)
    return config


def to_arrow(buf: ReplayBuffer) -> pa.Table:
    """Every stored step of ``buf`` as a :class:`pyarrow.Table` (see the module docstring).

    Each episode's final observation is in the ``next_<obs>`` columns, on the row that ends
    the episode (null on every other row); :func:`from_arrow` rebuilds the buffer.

    Raises:
        FieldError: A complex-valued field (Arrow has no complex type).

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> buf = rr.ReplayBuffer(8, {"obs": rr.Field((2,), np.float32)})
        >>> _ = buf.add(obs=[0, 1], reward=1.0, terminated=True, truncated=False,
        ...             next_obs=[5, 6])
        >>> table = buf.to_arrow()
        >>> table.column_names[-4:], table.column("next_obs").to_pylist()
        (['reward', 'terminated', 'truncated', 'next_obs'], [[5.0, 6.0]])
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
        has_final, finals = final_observations(buf, steps)
        for name, values in finals.items():
            columns["next_" + name] = _nested(pa, values, has_final)
        meta = {
            "fields": buf.schema.to_json(),
            "num_envs": buf.num_envs,
            "class": type(buf).__name__,
            "config": _config(buf),
        }
    table = pa.table(columns)
    return table.replace_schema_metadata({b"rlreplay": json.dumps(meta).encode()})


def column_to_numpy(table: pa.Table, name: str) -> Array:
    """Column ``name`` of an exported table as one NumPy array ``(rows, *field_shape)``.

    Null rows (``next_<obs>`` off the episode ends) come back as zeros;
    ``table.column(name).is_valid()`` tells which rows hold a value.

    Raises:
        FieldError: ``name`` is not a column of ``table``.
    """
    if name not in table.column_names:
        raise FieldError(f"column_to_numpy: no column {name!r}; columns: {table.column_names}")
    column = table.column(name).combine_chunks()
    valid: Array | None = None
    if column.null_count:
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
        column = column.drop_null()
    shape: list[int] = []
    while hasattr(column.type, "list_size"):
        shape.append(column.type.list_size)
        column = column.flatten()
    values: Array = column.to_numpy(zero_copy_only=False)
    meta = (table.schema.metadata or {}).get(b"rlreplay")
    if meta is not None:
        fields = json.loads(meta)["fields"]
        key = name[len("next_") :] if name not in fields and name.startswith("next_") else name
        if key in fields:
            values = values.astype(np.dtype(fields[key]["dtype"]), copy=False)
    if valid is None:
        return values.reshape(table.num_rows, *shape)
    out = np.zeros((table.num_rows, *shape), values.dtype)
    out[valid] = values.reshape(-1, *shape)
    return out


def to_pandas(buf: ReplayBuffer) -> pd.DataFrame:
    """Every stored step as a :class:`pandas.DataFrame` (a field of shape ``s`` per row is an
    array of shape ``s`` in its cell; scalar fields are plain columns; ``next_<obs>`` cells
    off the episode ends are missing: ``None``, or ``NaN`` in a scalar column)."""
    table = to_arrow(buf)
    frame = table.to_pandas()
    for name in buf.schema.names:
        shape = buf.schema.fields[name].shape
        if len(shape) > 1:  # Arrow gives nested object arrays; cells become (d1, ..., dk) arrays
            values = column_to_numpy(table, name)
            frame[name] = list(values)
    for name in buf.schema.observation_names:
        if len(buf.schema.fields[name].shape) > 1:
            column = "next_" + name
            values = column_to_numpy(table, column)
            valid = np.asarray(table.column(column).is_valid().to_numpy(zero_copy_only=False))
            frame[column] = [v if ok else None for v, ok in zip(values, valid, strict=True)]
    return frame


def to_parquet(buf: ReplayBuffer, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """Write :func:`to_arrow`'s table to a Parquet file (``kwargs`` go to
    :func:`pyarrow.parquet.write_table`, e.g. ``compression="zstd"``)."""
    _pyarrow()
    import pyarrow.parquet as pq

    pq.write_table(to_arrow(buf), os.fspath(path), **kwargs)


def _metadata(table: pa.Table) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(b"rlreplay")
    if raw is None:
        raise ConfigError(
            "from_arrow: expected the schema metadata b'rlreplay' that to_arrow writes, got a "
            f"table without it (metadata keys: {sorted(table.schema.metadata or {})}); only "
            "tables written by to_arrow/to_parquet can be read back"
        )
    meta: dict[str, Any] = json.loads(raw)
    return meta


def _check_rows(table: pa.Table, env_ids: Array, ids: Array, num_envs: int) -> Array:
    """Row order env by env in time order; raises unless each env's rows are consecutive."""
    if env_ids.size and not (env_ids.min() >= 0 and env_ids.max() < num_envs):
        raise ConfigError(
            f"from_arrow: env_id: expected values in [0, {num_envs}), got "
            f"[{env_ids.min()}, {env_ids.max()}]"
        )
    order = np.lexsort((ids, env_ids))
    env_ids, ids = env_ids[order], ids[order]
    same_env = env_ids[1:] == env_ids[:-1]
    gaps = same_env & (np.diff(ids) != num_envs)
    wrong_env = ids % num_envs != env_ids
    if gaps.any() or wrong_env.any():
        row = int(order[np.flatnonzero(gaps)[0] + 1] if gaps.any() else order[wrong_env][0])
        raise ConfigError(
            f"from_arrow: id: expected each env's ids to run in steps of num_envs={num_envs} "
            f"(a whole export), got id {int(table.column('id')[row].as_py())} at row {row}; "
            "rows were dropped or the table was edited"
        )
    return order


def _episode_flags(table: pa.Table, order: Array) -> tuple[Array, Array]:
    """``(episode_end, abandoned)`` in row order, checked against the stored flags."""
    end = column_to_numpy(table, "episode_end")[order].astype(bool)
    abandoned = column_to_numpy(table, "episode_abandoned")[order].astype(bool)
    flagged = (
        column_to_numpy(table, "terminated")[order] | column_to_numpy(table, "truncated")[order]
    )
    bad = (end != (flagged | abandoned)) | (abandoned & flagged)
    if bad.any():
        row = int(order[np.flatnonzero(bad)[0]])
        raise ConfigError(
            "from_arrow: episode_end: expected episode_end == terminated | truncated | "
            f"episode_abandoned (and no abandoned end flagged), got a row that breaks it: row {row}"
        )
    return end, abandoned


def from_arrow(
    table: pa.Table,
    *,
    cls: type[ReplayBuffer] | None = None,
    capacity: int | None = None,
    **kwargs: Any,
) -> ReplayBuffer:
    """A new buffer holding what :func:`to_arrow` exported (see the module docstring).

    The buffer has the table's fields, ``num_envs`` and configuration (from the schema
    metadata; ``kwargs`` override it). Each env's rows are stored in time order with
    :meth:`~rlreplay.ReplayBuffer.extend`, final observations taken from ``next_<obs>``, and
    abandoned episodes abandoned again, so its stored steps, episodes and transitions are the
    exported buffer's. With ``frame_stack=k > 1``, the first ``k - 1`` rows of an episode whose
    first steps had been overwritten become sampleable (their stacks padded as at an episode
    start), which they were not in the exported buffer (their stacks reached overwritten
    frames); every transition the exported buffer could sample is the same.

    Args:
        table: A table written by :func:`to_arrow` (or read from :func:`to_parquet`'s file).
        cls: The buffer class (default :class:`rlreplay.ReplayBuffer`; a prioritized class
            gives every step its initial priority: priorities are not exported).
        capacity: Default: the exported buffer's capacity; a smaller one keeps each env's
            newest steps.
        **kwargs: Constructor arguments that override the exported configuration
            (``n_step``, ``gamma``, ``seed``, ``storage``, ``alpha``, ...).

    Returns:
        The new buffer. Env ``e``'s steps are numbered from 0: its ids are the table's ``id``
        minus ``first_step[e] * num_envs`` (the same ids when nothing was overwritten).

    Raises:
        ConfigError: The table has no rlreplay metadata, ``num_envs`` differs from the
            table's, or its rows are not a whole export (ids missing in an env, episode flags
            that contradict each other).
        FieldError: A column of a field or of a final observation is missing, or a row that
            ends its episode has no final observation.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> from rlreplay.io import from_arrow
        >>> buf = rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)}, n_step=2)
        >>> for t in range(5):
        ...     _ = buf.add(obs=t, reward=1.0, terminated=t == 2, truncated=False, next_obs=9)
        >>> again = from_arrow(buf.to_arrow())
        >>> again.n_step, again.get_transitions([1]).next_obs.tolist()
        (2, [9.0])
    """
    _pyarrow()
    from rlreplay.spec.schema import Schema

    meta = _metadata(table)
    num_envs = int(meta["num_envs"])
    if kwargs.pop("num_envs", num_envs) != num_envs:
        raise ConfigError(
            f"from_arrow: num_envs: expected the table's {num_envs} (ids depend on it), "
            "got another value"
        )
    schema = Schema.from_json(meta["fields"])
    finals = tuple("next_" + n for n in schema.observation_names)
    missing = [c for c in (*INDEX_COLUMNS, *schema.names, *finals) if c not in table.column_names]
    if missing:
        raise FieldError(
            f"from_arrow: expected columns {missing} (written by to_arrow), not in the table; "
            f"columns: {table.column_names}"
        )
    config = {k: v for k, v in meta.get("config", {}).items() if k in CONFIG_KEYS}
    config.update(kwargs)
    stored_capacity = config.pop("capacity", None)
    if capacity is None:
        per_env = np.bincount(column_to_numpy(table, "env_id"), minlength=num_envs).max(initial=0)
        minimum = int(config.get("n_step", 1)) + int(config.get("frame_stack", 1))
        capacity = stored_capacity or num_envs * max(int(per_env), minimum)
    if cls is None:
        from rlreplay.buffer.replay import ReplayBuffer

        cls = ReplayBuffer
    buf = cls(capacity=capacity, fields=dict(schema.fields), num_envs=num_envs, **config)
    if not table.num_rows:
        return buf

    env_ids = column_to_numpy(table, "env_id").astype(np.int64)
    order = _check_rows(table, env_ids, column_to_numpy(table, "id").astype(np.int64), num_envs)
    end, abandoned = _episode_flags(table, order)
    values = {n: column_to_numpy(table, n)[order] for n in schema.names}
    for name in finals:
        values[name] = column_to_numpy(table, name)[order]
        known = np.asarray(table.column(name).is_valid().to_numpy(zero_copy_only=False))[order]
        lacking = end & ~abandoned & ~known
        if lacking.any():
            row = int(order[np.flatnonzero(lacking)[0]])
            raise FieldError(
                f"from_arrow: {name}: expected the final observation on row {row}, which ends "
                "its episode, got null"
            )
    env_ids = env_ids[order]
    # One extend per run of rows that ends at an abandoned end (abandon_episode follows it)
    # or at the last row of an env: episodes ending with a flag end inside a run by themselves.
    last_of_env = np.r_[env_ids[1:] != env_ids[:-1], True]
    cuts = np.flatnonzero(abandoned | last_of_env) + 1
    for a, b in zip(np.r_[0, cuts[:-1]], cuts, strict=True):
        e = int(env_ids[a])
        run: dict[str, Any] = {n: v[a:b] for n, v in values.items()}
        buf.extend(env_id=e, **run)
        if abandoned[b - 1]:
            buf.abandon_episode(e)
    return buf


def from_parquet(
    path: str | os.PathLike[str],
    *,
    cls: type[ReplayBuffer] | None = None,
    capacity: int | None = None,
    **kwargs: Any,
) -> ReplayBuffer:
    """A new buffer holding what :func:`to_parquet` wrote to ``path`` (see :func:`from_arrow`,
    which takes the same arguments)."""
    _pyarrow()
    import pyarrow.parquet as pq

    return from_arrow(pq.read_table(os.fspath(path)), cls=cls, capacity=capacity, **kwargs)
