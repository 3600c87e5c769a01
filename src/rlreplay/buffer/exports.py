"""The ecosystem methods of :class:`rlreplay.ReplayBuffer`: exports, Minari, prefetching.

Each function here is a method of the buffer (``ReplayBuffer.to_arrow = to_arrow``, ...) that
delegates to a module of :mod:`rlreplay.io`, imported when it is first called; those modules
use only the buffer's public API. Nothing here imports pyarrow, pandas, minari, torch or jax
at import time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rlreplay.io.iterate import Prefetcher

__all__ = ["MinariExport", "iterate", "to_arrow", "to_minari", "to_pandas", "to_parquet"]

_SAMPLERS = ("sample", "sample_sequences", "sample_episodes")


class MinariExport(NamedTuple):
    """What :func:`to_minari` wrote and what it skipped.

    Attributes:
        dataset: The written :class:`minari.MinariDataset`.
        episodes: Episodes written.
        steps: Steps written (transitions; each episode also has its final observation).
        skipped_incomplete: Stored episodes still running (their end is not known).
        skipped_overwritten: Ended episodes whose first steps were overwritten.
        skipped_abandoned: Abandoned episodes (:meth:`~rlreplay.ReplayBuffer.abandon_episode`:
            ended with no final observation, which a Minari episode needs).
    """

    dataset: Any
    episodes: int
    steps: int
    skipped_incomplete: int
    skipped_overwritten: int
    skipped_abandoned: int


def to_arrow(buf: Any) -> pa.Table:
    """Every stored step as a :class:`pyarrow.Table`, one row per step.

    Columns: ``env_id``, ``episode_id``, ``step`` (in the episode), ``id``,
    ``episode_end``, ``episode_abandoned`` (an end with no final observation), then every
    stored field (a field of shape ``s`` as nested fixed-size lists). See
    :mod:`rlreplay.io.arrow`.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> buf = rr.ReplayBuffer(8, {"obs": rr.Field((2,), np.float32)})
        >>> _ = buf.add(obs=[0, 1], reward=1.0, terminated=False, truncated=False)
        >>> buf.to_arrow().column_names[:4]
        ['env_id', 'episode_id', 'step', 'id']
    """
    from rlreplay.io.arrow import to_arrow

    return to_arrow(buf)


def to_pandas(buf: Any) -> pd.DataFrame:
    """Every stored step as a :class:`pandas.DataFrame` (the columns of :meth:`to_arrow`)."""
    from rlreplay.io.arrow import to_pandas

    return to_pandas(buf)


def to_parquet(buf: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """Write :meth:`to_arrow`'s table to a Parquet file (``kwargs``: e.g. ``compression``)."""
    from rlreplay.io.arrow import to_parquet

    to_parquet(buf, path, **kwargs)


def to_minari(buf: Any, dataset_id: str, **kwargs: Any) -> MinariExport:
    """Write the stored complete episodes as a local Minari dataset.

    See :func:`rlreplay.io.minari.to_minari` for the arguments (spaces, ``action_field``,
    ``data_format``, ``progress`` and Minari's metadata).

    Returns:
        ``MinariExport(dataset, episodes, steps, skipped_incomplete, skipped_overwritten,
        skipped_abandoned)``.
    """
    from rlreplay.io.minari import to_minari

    return to_minari(buf, dataset_id, **kwargs)


def iterate(
    buf: Any,
    batch_size: int,
    *,
    prefetch: int = 2,
    method: str = "sample",
    as_: str | None = None,
    device: Any = None,
    timeout: float | None = None,
    **sample_kwargs: Any,
) -> Prefetcher[Any]:
    """Endless batches drawn ``prefetch`` ahead on a background thread.

    While the learner works on one batch the next ones are sampled (and converted, and
    sent to ``device``), so the two overlap. Close the iterator (``close()`` or a ``with``
    block) to stop the thread; an error raised by sampling is raised by ``next``.

    Args:
        batch_size: ``B`` of every call.
        prefetch: Batches made ahead.
        method: ``"sample"``, ``"sample_sequences"`` (give ``length=``) or
            ``"sample_episodes"`` (``batch_size`` episodes).
        as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the buffer's ``as_``); each
            batch is converted on the thread, after the buffer's lock is released (to a CUDA
            device through one :class:`~rlreplay.io.staging.PinnedRing` for the iterator).
        device: Where torch/JAX arrays go (default: as in
            :meth:`~rlreplay.ReplayBuffer.sample`).
        timeout: Most seconds one ``next`` waits (``None`` or ``inf``: for ever).
        **sample_kwargs: Passed to the sampling method on every call.

    Returns:
        A :class:`rlreplay.io.iterate.Prefetcher` (an iterator and a context manager).

    Raises:
        ConfigError: An unknown ``method`` or ``as_``, an unusable ``device``, a
            ``batch_size`` or ``prefetch`` that is not a positive int, a bad ``timeout``,
            or (``method="sample"``) ``prefetch + 2`` batches above the size budget;
            checked before the thread starts.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> buf = rr.ReplayBuffer(64, {"obs": rr.Field((), np.float32)}, seed=0)
        >>> for t in range(10):
        ...     _ = buf.add(obs=t, reward=1.0, terminated=False, truncated=False)
        >>> with buf.iterate(4, prefetch=2) as batches:
        ...     [next(batches).obs.shape for _ in range(2)]
        [(4,), (4,)]
    """
    from rlreplay.buffer.budget import check_result
    from rlreplay.buffer.sync import check_timeout
    from rlreplay.errors import ConfigError
    from rlreplay.io.frameworks import choose_output
    from rlreplay.io.iterate import Prefetcher
    from rlreplay.spec.arguments import shown
    from rlreplay.spec.schema import positive_int

    if not isinstance(method, str) or method not in _SAMPLERS:
        raise ConfigError(f"method: expected one of {_SAMPLERS}, got {shown(method)}")
    buf = buf
    # Its errors here, not in the first next(): the thread would start for nothing.
    batch_size = positive_int("batch_size", batch_size)
    prefetch = positive_int("prefetch", prefetch)
    timeout = check_timeout(timeout)
    if method == "sample":  # the batches made ahead, one being made and one taken
        check_result(buf, "prefetch", prefetch, (prefetch + 2) * batch_size, "iterate")
    output = choose_output(buf._output, as_, device)  # one output: its pinned ring is reused
    if output is not None and sample_kwargs.get("out") is not None:
        raise ConfigError(
            f"out: refills a NumPy batch, so it needs as_='numpy'; got as_={output.as_!r} "
            "(drop out=, or pass as_='numpy')"
        )
    draw = getattr(buf, method)

    def produce() -> Any:
        batch = draw(batch_size, as_="numpy", **sample_kwargs)
        return batch if output is None else output(batch)

    def closed() -> bool:  # the buffer's close() ends the thread too, even with a full queue
        return bool(buf._sync.closed)

    return Prefetcher(produce, prefetch=prefetch, timeout=timeout, closed=closed)
