"""The size budget of a buffer's calls: the bytes one row of each kind of result takes.

A part of :class:`rlreplay.ReplayBuffer`. Every call whose
result is sized by its arguments checks ``rows * row bytes`` against the size budget
(:func:`rlreplay.spec.check_rows`) before it draws or allocates anything. A row's bytes are
an upper estimate, computed once per buffer from its fields:

* a transition (``sample``, ``get_transitions``): every field once, each observation field
  twice (the observation and ``next_<obs>``; ``obs`` ``2 * frame_stack`` times when frames are
  stacked), each of ``next_fields`` twice, 8 bytes per derived column, and :data:`OVERHEAD`;
* a step of a run (``sample_sequences``, ``get_sequences``, ``sample_episodes``): every field
  once, each observation field twice, 8 bytes per derived column, and :data:`OVERHEAD`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from rlreplay.spec.arguments import check_rows
from rlreplay.spec.schema import Field

__all__ = ["OVERHEAD", "ResultBudget", "check_capacity", "check_result"]

#: Bytes per row for what every result carries besides the fields (``ids``, ``env_ids``,
#: ``steps``, ``discount``, ``weights``, ``probabilities``, ``mask``, ``next_known``) and the
#: draw's per-row scratch (positions, slots), rounded up.
OVERHEAD = 96


class ResultBudget:
    """Bytes of one row of a buffer's results, to refuse results above the size budget.

    ``transition``: a row of a transition batch (stacked observations, ``next_<obs>``,
    ``next_fields``); ``step``: a step of a run (sequences, episodes, dequeued steps).
    """

    __slots__ = ("step", "transition")

    def __init__(
        self,
        fields: Mapping[str, Field],
        derived: int,
        frame_stack: int,
        next_fields: tuple[str, ...],
    ) -> None:
        transition = step = OVERHEAD + 8 * derived
        for name, field in fields.items():
            size = field.nbytes
            if field.observation:
                step += 2 * size
                transition += 2 * size * (frame_stack if name == "obs" else 1)
            else:
                step += size
                transition += size * (2 if name in next_fields else 1)
        self.transition, self.step = transition, step

    def check(
        self,
        name: str,
        requested: Any,
        rows: int,
        what: str,
        kind: Literal["transition", "step"] = "transition",
    ) -> None:
        """Refuse a result of ``rows`` rows of ``kind`` above the size budget.

        Raises:
            rlreplay.ConfigError: The result would take more than the budget (naming ``name``,
                the request and the budget).
        """
        check_rows(name, requested, rows, self.transition if kind == "transition" else self.step,
                   what)  # fmt: skip


def check_result(
    buf: Any,
    name: str,
    requested: Any,
    rows: int,
    what: str,
    kind: Literal["transition", "step"] = "transition",
) -> None:
    """Refuse a result of ``rows`` rows of ``kind`` from the buffer ``buf`` (a
    :class:`rlreplay.ReplayBuffer`) above the size budget: for front-ends that assemble results
    from a buffer's public queries.

    Raises:
        rlreplay.ConfigError: The result would take more than the budget (naming ``name``,
            the request and the budget).
    """
    buf._budget.check(name, requested, rows, what, kind)


def check_capacity(capacity: int, fields: Mapping[str, Field]) -> None:
    """Refuse a ``capacity`` whose storage could not be held, before anything is allocated.

    A slot takes every field once, each observation field twice (its final-observation
    records may grow to one per slot) and :data:`OVERHEAD` bytes (the episode index's row, a
    prioritized sampler's tree nodes, with room to spare).

    Raises:
        rlreplay.ConfigError: ``capacity * slot bytes`` above the size budget, naming
            ``capacity``.
    """
    slot = OVERHEAD + sum(f.nbytes * (2 if f.observation else 1) for f in fields.values())
    check_rows("capacity", capacity, capacity, slot, "ReplayBuffer")
