"""The sample type of the device buffer: a read-only mapping of tensors on the device."""

from __future__ import annotations

from typing import Any

from rlreplay.batch import ReadOnlyBatch

__all__ = ["DeviceBatch"]


class DeviceBatch(ReadOnlyBatch[Any]):
    """A sampled batch of device tensors: ``batch["obs"]`` and ``batch.obs`` both work.

    The keys of :class:`rlreplay.Batch`, in its order: every declared field, ``reward``,
    ``next_<obs>`` (and ``next_<name>`` per ``next_fields``), ``terminated``, ``truncated``,
    ``discount``, ``steps``, ``ids``, ``env_ids``, ``weights`` and, when prioritized,
    ``probabilities``.
    """

    __slots__ = ()
