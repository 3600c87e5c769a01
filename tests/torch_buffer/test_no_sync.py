"""add, sample, get_transitions, update_priorities, clear, can_sample and num_sampleable read no
device value on the host and make no data-dependent shape, given device tensors: a
TorchFunctionMode counts the calls that would (``.item()``, ``.cpu()``, ``bool()``,
``nonzero()``, ...) and finds none. On a CUDA device (``RLREPLAY_TEST_DEVICE=cuda:0``) the same
block also runs under ``torch.cuda.set_sync_debug_mode("error")``, where any synchronising
CUDA call raises."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.torch_buffer.helpers import make, on, random_step
from tests.torch_device.helpers import no_host_sync

CONFIGS: dict[str, dict[str, Any]] = {
    "uniform, stack 3, next_fields, few finals": dict(
        capacity=32,
        num_envs=4,
        n_step=3,
        frame_stack=3,
        next_fields=("action",),
        finals_per_env=1,
    ),
    "recent, without replacement": dict(
        capacity=32, num_envs=2, n_step=2, recent_ratio=0.5, recent_steps=3, replacement=False
    ),
    "prioritized, stack 2, few finals": dict(
        capacity=32, num_envs=2, n_step=2, frame_stack=2, prioritized=True, finals_per_env=2
    ),
    "rank-based, stack 2": dict(
        capacity=32, num_envs=2, n_step=2, frame_stack=2, prioritized=True, variant="rank_based"
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_device_calls_never_wait_for_the_device(device: str, name: str) -> None:
    buf = make(device, **CONFIGS[name])
    rng = np.random.default_rng(0)
    steps = [on(random_step(rng, buf.num_envs, p_end=0.3), device) for _ in range(40)]
    some_ids = torch.tensor([0, 1, 2, 3], device=device)
    with no_host_sync(device) as counter:
        for i, step in enumerate(steps):
            ids = buf.add(**step)
            batch = buf.sample(8)
            buf.get_transitions(batch["ids"])
            buf.get_transitions(batch["ids"], stack_layout="last")
            buf.can_sample(8)
            _ = buf.num_sampleable
            buf.sampleable(some_ids)
            if hasattr(buf, "update_priorities"):
                buf.update_priorities(batch["ids"], batch["reward"].abs().double())
                buf.update_priorities(ids, torch.full_like(ids, 2.0, dtype=torch.float64))
            if i == 20:
                buf.clear()
        empty = make(device, **CONFIGS[name])
        empty.sample(4)  # nothing stored: arbitrary rows, weights 0, and no wait
    assert dict(counter.calls) == {}
    assert bool(buf.can_sample())


def test_the_counter_sees_what_waits(device: str) -> None:
    """The checked paths do read the device (and say so)."""
    buf = make(device, capacity=16, num_envs=2)
    buf.add(**on(random_step(np.random.default_rng(0), 2, p_end=1.0), device))
    with no_host_sync("cpu") as counter:  # (counting only: these are meant to wait)
        buf.sampleable_ids()
        buf.sample(2, check=True)
    assert sum(counter.calls.values()) >= 2


@pytest.mark.parametrize("name", list(CONFIGS))
def test_env_id_subsets_never_wait_for_the_device(device: str, name: str) -> None:
    """``add(..., env_ids=<a device tensor>)`` and every call after it (envs counted per env
    on the device) read nothing on the host either."""
    buf = make(device, **CONFIGS[name])
    E = buf.num_envs
    rng = np.random.default_rng(1)
    subsets = [rng.permutation(E)[: rng.integers(1, E + 1)] for _ in range(40)]
    steps = [
        on({k: v[: s.shape[0]] for k, v in random_step(rng, E, p_end=0.3).items()}, device)
        for s in subsets
    ]
    envs = [torch.from_numpy(s).to(device) for s in subsets]
    some_ids = torch.tensor([0, 1, 2, 3], device=device)
    with no_host_sync(device) as counter:
        for i, (env_ids, step) in enumerate(zip(envs, steps, strict=True)):
            ids = buf.add(env_ids=env_ids, **step)
            batch = buf.sample(8)
            buf.get_transitions(batch["ids"])
            buf.can_sample(8)
            _ = buf.num_sampleable, buf.num_stored, buf.num_episodes, buf.env_steps_added
            _ = buf.stored_bounds
            buf.sampleable(some_ids)
            buf.sample_sequences(4, 3, pad=i % 2 == 0)
            buf.sample_episodes(4, max_length=3)
            if hasattr(buf, "update_priorities"):
                buf.update_priorities(batch["ids"], batch["reward"].abs().double())
                buf.update_priorities(ids, torch.full_like(ids, 2.0, dtype=torch.float64))
            if i == 20:
                buf.clear()
    assert dict(counter.calls) == {}


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_rate_limiter_reads_nothing_on_the_device(device: str, prioritized: bool) -> None:
    """A rate limiter's counters come from shapes and host counts: add (all envs, host
    ``env_ids``, device ``env_ids``), sample, sample_sequences and clear still read nothing
    on the host, granted or refused."""
    import rlreplay as rr

    E = 2
    lim = rr.SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=4, error_buffer=12.0)
    buf = make(device, capacity=32, num_envs=E, n_step=2, prioritized=prioritized,
               rate_limiter=lim)  # fmt: skip
    rng = np.random.default_rng(2)
    steps = [on(random_step(rng, E, p_end=0.3), device) for _ in range(30)]
    subset = torch.tensor([1], device=device)
    refused = 0
    with no_host_sync(device) as counter:
        for i, step in enumerate(steps):
            for call in (
                lambda step=step: buf.add(**step),
                lambda step=step: buf.add(env_ids=[0], **{k: v[:1] for k, v in step.items()}),
                lambda step=step: buf.add(env_ids=subset, **{k: v[1:] for k, v in step.items()}),
                lambda: buf.sample(3),
                lambda: buf.sample_sequences(2, 3),
            ):
                try:
                    call()
                except rr.ReplayTimeout:
                    refused += 1
            if i == 15:
                buf.clear()
    assert dict(counter.calls) == {}
    assert refused and lim.stats.samples and lim.stats.inserts


@pytest.mark.parametrize("name", list(CONFIGS))
def test_calls_after_an_abandon_never_wait_for_the_device(device: str, name: str) -> None:
    """``abandon_episode`` reads the device (once per call), but the holes it leaves are
    host-known: add, sample, sample_sequences, update_priorities after it read nothing."""
    buf = make(device, **CONFIGS[name])
    rng = np.random.default_rng(3)
    steps = [on(random_step(rng, buf.num_envs, p_end=0.1), device) for _ in range(40)]
    for step in steps[:12]:
        buf.add(**step)
    buf.abandon_episode(0)
    buf.abandon_episode(buf.num_envs - 1)
    assert buf._ring.holes is not None
    with no_host_sync(device) as counter:
        for step in steps[12:]:
            ids = buf.add(**step)
            batch = buf.sample(8)
            buf.sampleable(batch["ids"])
            buf.sample_sequences(4, 3)
            _ = buf.num_sampleable
            if hasattr(buf, "update_priorities"):
                buf.update_priorities(ids, torch.full_like(ids, 2.0, dtype=torch.float64))
    assert dict(counter.calls) == {}


@pytest.mark.parametrize("prioritized", [False, True])
def test_transforms_add_no_wait(device: str, prioritized: bool) -> None:
    """The buffer's transforms and a call's transform (here torch ops on the batch) run
    without the buffer reading anything on the host (its rollback point is the generator's
    host state)."""
    buf = make(device, capacity=32, num_envs=2, n_step=2, prioritized=prioritized,
               transforms=[lambda b: b.replace(reward=b.reward * 2)])  # fmt: skip
    rng = np.random.default_rng(4)
    steps = [on(random_step(rng, 2, p_end=0.2), device) for _ in range(20)]
    with no_host_sync(device) as counter:
        for step in steps:
            buf.add(**step)
            buf.sample(8, transform=lambda b: b.replace(obs=b.obs + 1))
            buf.sample_sequences(2, 3, transform=lambda b: b.replace(mask=~b.mask))
    assert dict(counter.calls) == {}
