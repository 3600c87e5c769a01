"""A device buffer's uniform ``sample`` as one compiled graph: :func:`compiled_sampler`.

Everything a uniform draw does after its random numbers (the positions, the env and step of
each, the n-step windows, ``next_<obs>``, frame stacks, the weights) is a fixed sequence of
torch ops on tensors that :meth:`~rlreplay.torch.DeviceReplayBuffer.add` updates in place,
with shapes that depend on the batch size only. :func:`torch.compile` captures it whole
(``fullgraph=True``): on a GPU its kernels fuse into a few, and ``mode="reduce-overhead"``
replays them as one CUDA graph. Only the draw of the uniforms stays outside, since the
buffer's :class:`torch.Generator` cannot enter a graph; it is the draw
:meth:`~rlreplay.torch.DeviceReplayBuffer.sample` makes, so a compiled sampler and ``sample``
give the same batches from the same generator state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlreplay.errors import ConfigError
from rlreplay.spec import positive_int
from rlreplay.torch import draws
from rlreplay.torch.batch import DeviceBatch

if TYPE_CHECKING:
    from torch import Tensor

    from rlreplay.torch.buffer import DeviceReplayBuffer

__all__ = ["compiled_sampler"]

#: The function :func:`torch.compile` captures: the uniforms (and extra tensors) to a batch.
Graph = Callable[..., dict[str, Any]]

_log = logging.getLogger(__name__)


def compiled_sampler(
    buf: DeviceReplayBuffer,
    batch_size: int,
    *,
    mode: str | None = None,
    **compile_kwargs: Any,
) -> Callable[[], DeviceBatch]:
    """``buf.sample(batch_size)`` as a function whose work after the random draw is one
    :func:`torch.compile` d graph.

    The graph reads the buffer's tensors as they are when it runs, so the sampler follows
    every later :meth:`~rlreplay.torch.DeviceReplayBuffer.add`, ``clear`` and load; it
    compiles on its first call (seconds; once per buffer and batch size) and never again.
    It draws what ``buf.sample(batch_size)`` would draw from the same generator state, and
    the same values bit for bit. Like ``sample`` it reads nothing on the host: on an empty
    buffer it gives arbitrary rows with ``weights`` 0.

    Worth it where ops are launched one by one at a cost: on a GPU (with
    ``mode="reduce-overhead"``, one CUDA graph per call; a batch then lives in memory the
    next call reuses, so copy what must outlive it). On a CPU the graph saves about a third
    of ``sample``'s own time (see ``docs/accelerator.md``).

    Args:
        buf: A uniform :class:`~rlreplay.torch.DeviceReplayBuffer` drawing with
            replacement and without a recency mix (its defaults).
        batch_size: Transitions per call.
        mode: :func:`torch.compile`'s ``mode``.
        **compile_kwargs: Further arguments of :func:`torch.compile` (``fullgraph=True``
            and ``dynamic=False`` are set).

    Returns:
        A function of no argument returning a :class:`~rlreplay.torch.DeviceBatch`, the keys
        of :meth:`~rlreplay.torch.DeviceReplayBuffer.sample`'s.

    Raises:
        ConfigError: A prioritized buffer, a buffer drawing without replacement or with a
            recency mix, or ``batch_size`` not a positive int.

    Example:
        >>> import numpy as np, rlreplay as rr, rlreplay.torch as rrt
        >>> buf = rrt.DeviceReplayBuffer(64, {"obs": rr.Field((2,), np.float32)})
        >>> sample = rrt.compiled_sampler(buf, 32)  # compiles on its first call
    """
    import torch

    from rlreplay.torch.prioritized_buffer import DevicePrioritizedReplayBuffer

    c = buf.config
    if isinstance(buf, DevicePrioritizedReplayBuffer) and c.rank_based:
        raise ConfigError(
            "compiled_sampler: expected a uniform or a proportional prioritized buffer, got "
            "variant='rank_based'"
        )
    if not c.prioritized and (c.recent_ratio > 0 or not c.replacement):
        raise ConfigError(
            "compiled_sampler: expected a buffer drawing with replacement and no recency mix, "
            f"got recent_ratio={c.recent_ratio}, replacement={c.replacement}"
        )
    B = positive_int("batch_size", batch_size)
    buf._budget.check("batch_size", B, B, "compiled_sampler")
    graph_of: Callable[[DeviceReplayBuffer, int], tuple[Graph, Callable[[], tuple[Any, ...]]]]
    graph_of = _prioritized if c.prioritized else _uniform
    fn, extra = graph_of(buf, B)
    graph = torch.compile(fn, fullgraph=True, dynamic=False, mode=mode, **compile_kwargs)
    announced = False

    def sample() -> DeviceBatch:
        nonlocal announced
        if not c.prioritized and buf._ring.holes is not None:
            # Abandoned episodes' holes (until a clear): the eager draw, the same law and
            # the same uniforms, rather than a graph per number of holes.
            return buf.sample(B)
        if not announced:
            _log.info("compiling a device buffer's sample of %d on %s (once)", B, buf.device)
            announced = True
        args = extra()  # host-side steps first, in sample's order, then the uniforms
        u = torch.rand(B, dtype=torch.float64, device=buf.device, generator=buf._gen)
        return DeviceBatch(graph(u, *args))

    return sample


def _uniform(buf: DeviceReplayBuffer, B: int) -> tuple[Graph, Callable[[], tuple[Any, ...]]]:
    """The graph of a uniform draw from the uniforms ``u``, and its extra arguments (none)."""

    ring, assembler = buf._ring, buf._assembler

    def draw_and_assemble(u: Tensor) -> dict[str, Tensor]:
        env, t, total = draws.spread(ring, ring.candidates(), u)
        out = assembler.transitions(env, t)
        out["weights"] = assembler.weights(total, B)
        return out

    return draw_and_assemble, lambda: ()


def _prioritized(buf: DeviceReplayBuffer, B: int) -> tuple[Graph, Callable[[], tuple[Any, ...]]]:
    """The graph of a proportional draw from the uniforms ``u`` and ``beta``, and its extra
    arguments: ``beta`` (the schedule's value, advanced on the host as ``sample`` advances
    it) as a 0-d tensor on the device, so that a new value neither recompiles nor leaves the
    graph."""
    import torch

    pri, assembler = buf._prio, buf._assembler
    assert pri is not None
    beta_t = torch.zeros((), dtype=torch.float64, device=buf.device)
    pri.sums.strata(B)  # made before compiling: the graph reads it, never makes it

    def draw_and_assemble(u: Tensor, beta: Tensor) -> dict[str, Tensor]:
        env, t, probabilities, weights = pri.draw_proportional(u, beta)
        out = assembler.transitions(env, t)
        out["weights"] = weights
        out["probabilities"] = probabilities
        return out

    def beta() -> tuple[Tensor]:
        beta_t.fill_(pri.beta())
        pri.beta_step += 1
        return (beta_t,)

    return draw_and_assemble, beta
