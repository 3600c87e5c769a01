"""The ecosystem methods of :class:`rlreplay.ReplayBuffer`: exports, Minari, prefetching.

:class:`IOMixin` is a base of the buffer; each method delegates to a module of
:mod:`rlreplay.io`, imported when the method is first called, and those modules use only the
buffer's public API. Nothing here imports pyarrow, pandas, minari, torch or jax at import
time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple, Self, cast

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rlreplay.io.iterate import Prefetcher

__all__ = ["IOMixin", "MinariExport"]

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


class IOMixin:
    """``to_arrow``, ``to_pandas``, ``to_parquet``, ``to_minari``, ``from_minari``, ``iterate``."""

    @property
    def output(self) -> tuple[str, Any]:
        """``(as_, device)``: what the sampling calls return by default (see the constructor).

        Example:
            >>> import numpy as np, rlreplay as rr
            >>> rr.ReplayBuffer(8, {"obs": rr.Field((), np.float32)}).output
            ('numpy', None)
        """
        default = self._io_self()._output
        return ("numpy", None) if default is None else (default.as_, default.device)

    def _io_self(self) -> Any:
        # (A distinct name: front-ends that subclass the buffer keep their own `_buffer`.)
        # The buffer itself, typed loosely: naming ReplayBuffer here would make
        # rlreplay.buffer.replay (which has this class as a base) and this module import each other.
        # The functions called with it are typed against ReplayBuffer.
        return self

    def to_arrow(self) -> pa.Table:
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

        return to_arrow(self._io_self())

    def to_pandas(self) -> pd.DataFrame:
        """Every stored step as a :class:`pandas.DataFrame` (the columns of :meth:`to_arrow`)."""
        from rlreplay.io.arrow import to_pandas

        return to_pandas(self._io_self())

    def to_parquet(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        """Write :meth:`to_arrow`'s table to a Parquet file (``kwargs``: e.g. ``compression``)."""
        from rlreplay.io.arrow import to_parquet

        to_parquet(self._io_self(), path, **kwargs)

    def to_minari(self, dataset_id: str, **kwargs: Any) -> MinariExport:
        """Write the stored complete episodes as a local Minari dataset.

        See :func:`rlreplay.io.minari.to_minari` for the arguments (spaces, ``action_field``,
        ``data_format``, ``progress`` and Minari's metadata).

        Returns:
            ``MinariExport(dataset, episodes, steps, skipped_incomplete, skipped_overwritten,
            skipped_abandoned)``.
        """
        from rlreplay.io.minari import to_minari

        return to_minari(self._io_self(), dataset_id, **kwargs)

    @classmethod
    def from_minari(
        cls,
        dataset_or_id: Any,
        *,
        capacity: int | None = None,
        progress: bool | None = None,
        **kwargs: Any,
    ) -> Self:
        """A new buffer holding every episode of a local Minari dataset (never downloads).

        Args:
            dataset_or_id: A :class:`minari.MinariDataset` or a local dataset's id.
            capacity: Default: the dataset's step count.
            progress: tqdm progress bar (default: when stderr is a terminal).
            **kwargs: ``n_step``, ``frame_stack``, ``gamma``, ``seed``, ``infos=False``, and
                any other constructor argument (see :func:`rlreplay.io.minari.from_minari`).
        """
        from rlreplay.io.minari import from_minari

        target = cast(Any, cls)
        buf = from_minari(target, dataset_or_id, capacity=capacity, progress=progress, **kwargs)
        return cast("Self", buf)

    def iterate(
        self,
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
            as_: ``"numpy"``, ``"torch"`` or ``"jax"`` (default: the buffer's ``as_``); passed
                to every sampling call, which converts after releasing the buffer's lock.
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
        from rlreplay.buffer.fifo import check_timeout
        from rlreplay.errors import ConfigError
        from rlreplay.io.frameworks import choose_output
        from rlreplay.io.iterate import Prefetcher
        from rlreplay.spec.arguments import shown
        from rlreplay.spec.schema import positive_int

        if not isinstance(method, str) or method not in _SAMPLERS:
            raise ConfigError(f"method: expected one of {_SAMPLERS}, got {shown(method)}")
        buf = self._io_self()
        # Its errors here, not in the first next(): the thread would start for nothing.
        batch_size = positive_int("batch_size", batch_size)
        prefetch = positive_int("prefetch", prefetch)
        timeout = check_timeout(timeout)
        if method == "sample":  # the batches made ahead, one being made and one taken
            check_result(buf, "prefetch", prefetch, (prefetch + 2) * batch_size, "iterate")
        choose_output(buf._output, as_, device)
        draw = getattr(buf, method)

        def produce() -> Any:
            return draw(batch_size, as_=as_, device=device, **sample_kwargs)

        def closed() -> bool:  # the buffer's close() ends the thread too, even with a full queue
            return bool(buf._closed)

        return Prefetcher(produce, prefetch=prefetch, timeout=timeout, closed=closed)
