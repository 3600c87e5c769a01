"""Checkpoints of ALF's device-backed buffer (``enable_checkpoint=True``), on torch's CPU
device: ``state_dict()`` carries its contents, draws' generators, priorities and episode
information on the host; ``load_state_dict`` restores them onto the device, after which it
draws and answers as the buffer it was taken from (and, uniform, as the host-backed buffer
restored from its own checkpoint)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf import ReplayBuffer
from tests.compat.test_alf_device import device_rb, pair
from tests.compat.test_alf_device_episodes import SPEC, both, ops, run_script, same, steps_of

OPTIONS: list[dict[str, Any]] = [
    dict(max_length=6),
    dict(max_length=5, record_episodic_return=True, gamma=0.9, with_replacement=True),
    dict(max_length=8, num_earliest_frames_ignored=2, recent_data_ratio=0.5),
]


def reload(rb: Any, seed: int, **kw: Any) -> Any:
    """A buffer of the same options (built from another seed) loaded with ``rb``'s state,
    through ``torch.save`` / ``torch.load``."""
    raw = io.BytesIO()
    torch.save(rb.state_dict(), raw)
    raw.seek(0)
    torch.manual_seed(seed + 1000)
    twin = type(rb)(SPEC, rb.num_environments, **kw)
    twin.load_state_dict(torch.load(raw, weights_only=False))
    return twin


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(options=st.sampled_from(range(len(OPTIONS))), before=ops, after=ops, seed=st.integers(0, 99))
def test_a_loaded_buffer_goes_on_as_the_host_backed_one(
    options: int, before: list[tuple[str, int, int]], after: list[tuple[str, int, int]],
    seed: int,
) -> None:  # fmt: skip
    E, kw = 3, dict(OPTIONS[options], enable_checkpoint=True)
    host, dev = pair(SPEC, E, seed, **kw)
    run_script(host, dev, SPEC, before, E, seed)
    host2, dev2 = reload(host, seed, **kw), reload(dev, seed, **kw)
    assert dev2.device_buffer is not dev.device_buffer
    run_script(host2, dev2, SPEC, after, E, seed + 1)
    run_script(host2, dev2, SPEC, [("add", 5, 9), ("get_batch", 6, 2), ("read", 1, 0)], E, 2)


def test_prioritized_draws_after_a_load_are_the_originals() -> None:
    E, kw = 2, dict(max_length=8, prioritized_sampling=True, enable_checkpoint=True,
                    record_episodic_return=True, recent_data_ratio=0.25)  # fmt: skip
    torch.manual_seed(4)
    dev = device_rb(SPEC, E, **kw)
    rng = np.random.default_rng(4)
    for i in range(12):
        dev.add_batch(steps_of(SPEC, rng, E, tensors=True))
        if i == 6:
            dev.get_batch(4, 2)  # the draws' generator exists
    dev.update_priority(torch.tensor([0, 1, 1]), torch.tensor([9, 10, 11]),
                        torch.tensor([5.0, 0.0, 2.0]))  # fmt: skip
    state = dev.state_dict()
    twin = reload(dev, 9, **kw)
    one = {k: v[:1] for k, v in steps_of(SPEC, rng, E, tensors=True).items()}
    every = steps_of(SPEC, rng, E, tensors=True)
    for rb in (dev, twin):
        rb.add_batch(one, [1])
        rb.add_batch(every)
    assert twin.initial_priority.item() == dev.initial_priority.item() == 5.0
    for _ in range(3):
        both(dev, twin, "get_batch", 16, 2)
    both(dev, twin, "gather_all")
    for name, value in state["_extra_state"].items():  # on the host
        if isinstance(value, torch.Tensor):
            assert value.device.type == "cpu", name
    fresh = device_rb(SPEC, E, **kw)  # a load with no draws' generator yet
    twin.load_state_dict(fresh.state_dict())
    both(fresh, twin, "gather_all")
    assert twin.initial_priority.item() == 1.0


def test_refused_states_change_nothing() -> None:
    kw: dict[str, Any] = dict(max_length=6, enable_checkpoint=True, keep_episodic_info=True)
    host, dev = pair(SPEC, 2, 0, **kw)
    run_script(host, dev, SPEC, [("add", 1, 8)], 2, 0)
    for state, error, match in (
        (host.state_dict(), rr.ConfigError, "device-backed"),  # the host-backed layout
        (device_rb(SPEC, 2, max_length=5, enable_checkpoint=True,
                   keep_episodic_info=True).state_dict(), rr.CheckpointError, "configuration"),
        (device_rb(SPEC, 2, max_length=6, enable_checkpoint=True).state_dict(), rr.ConfigError,
         "lacks episodes"),
        (device_rb(SPEC, 2, max_length=6, enable_checkpoint=True, keep_episodic_info=True,
                   prioritized_sampling=True).state_dict(), rr.ConfigError, "has priorities"),
    ):  # fmt: skip
        with pytest.raises(error, match=match):
            dev.load_state_dict(state)
        run_script(host, dev, SPEC, [("read", 0, 0), ("get_batch", 4, 2)], 2, 0)


def test_without_enable_checkpoint_the_state_is_empty() -> None:
    dev = device_rb(SPEC, 2, max_length=4, keep_episodic_info=True)
    dev.add_batch(steps_of(SPEC, np.random.default_rng(0), 2, tensors=True))
    assert dev.state_dict()["_extra_state"] == {} == ReplayBuffer(SPEC, 2).get_extra_state()
    dev.load_state_dict(dev.state_dict())  # nothing to restore
    assert int(dev.total_size) == 2
    same(dev.gather_all()[0], dev.gather_all()[0])
