"""The size budget of a device buffer's results: refused before anything is drawn or allocated.

A device buffer's result lives on its device, and the draw behind it (random numbers,
positions, gathered rows) takes memory there too. A call sized by its arguments (``sample``,
``get_transitions``, ``sample_sequences``, ``get_sequences``) checks ``rows * row bytes``
(:class:`rlreplay.buffer.budget.ResultBudget`'s upper estimate of a row, computed once from the
fields) against the smaller of

* the core's size budget (:func:`rlreplay.spec.size_budget`: the host's physical memory, since
  a result may be copied to the host), and
* on a CUDA device, that device's total memory (read once, when the buffer is made: a query of
  the driver, not of the stream, so it waits for no kernel),

and raises :class:`~rlreplay.ConfigError` naming the argument, the size and the budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from rlreplay.buffer.budget import ResultBudget
from rlreplay.errors import ConfigError

if TYPE_CHECKING:
    from rlreplay.torch.config import DeviceConfig

__all__ = ["DeviceBudget"]


class DeviceBudget:
    """Bytes of a result row of one device buffer, and the device's own memory limit."""

    __slots__ = ("device_bytes", "rows")

    def __init__(self, config: DeviceConfig, device: Any) -> None:
        self.rows = ResultBudget(config.schema.fields, 0, config.frame_stack, config.next_fields)
        self.device_bytes: int | None = None
        if getattr(device, "type", None) == "cuda":
            import torch

            self.device_bytes = int(torch.cuda.get_device_properties(device).total_memory)

    def check(
        self,
        name: str,
        requested: Any,
        rows: int,
        what: str,
        kind: Literal["transition", "step"] = "transition",
    ) -> None:
        """Refuse a result of ``rows`` rows of ``kind`` above the budget.

        Raises:
            rlreplay.ConfigError: The result would take more than the budget, naming ``name``,
                the request and the budget.
        """
        self.rows.check(name, requested, rows, what, kind)  # the host's budget
        if self.device_bytes is None:
            return
        row = self.rows.transition if kind == "transition" else self.rows.step
        if rows * row > self.device_bytes:
            raise ConfigError(
                f"{name}: {what} of {requested!r} would take about {rows * row:,} bytes on the "
                f"device, more than its {self.device_bytes:,} bytes of memory"
            )
