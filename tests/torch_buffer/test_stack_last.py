"""get_transitions(ids, stack_layout="last") on the device buffers: the core's stack-last
stacks ``(B, *frame, k)``, bit for bit, for every stack length, pad mode and n-step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import rlreplay as rr
from tests.torch_buffer.helpers import Twins, assert_bit_identical, host, make, random_step

FRAMES: dict[str, rr.Field] = {
    "obs": rr.Field((3, 2), np.uint8),
    "action": rr.Field((), np.int32),
}


def frame_step(rng: np.random.Generator, E: int) -> dict[str, Any]:
    step = random_step(rng, E, p_end=0.15)
    step["obs"] = rng.integers(0, 255, (E, 3, 2)).astype(np.uint8)
    step["next_obs"] = rng.integers(0, 255, (E, 3, 2)).astype(np.uint8)
    return step


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("stack_pad", ["zero", "first"])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("prioritized", [False, True])
def test_stack_last_is_the_cores(k: int, stack_pad: str, n_step: int, prioritized: bool) -> None:
    tw = Twins(make("cpu", capacity=40, num_envs=2, n_step=n_step, frame_stack=k,
                    stack_pad=stack_pad, prioritized=prioritized, fields=FRAMES))  # fmt: skip
    rng = np.random.default_rng(k * 10 + n_step)
    for _ in range(45):  # past a wraparound
        tw.add(frame_step(rng, 2))
    ids = tw.np_buf.sampleable_ids()
    ours = host(tw.buf.get_transitions(torch.from_numpy(ids), stack_layout="last"))
    theirs = tw.np_buf.get_transitions(ids, stack_layout="last")
    assert_bit_identical(ours, {key: np.asarray(v) for key, v in theirs.items()})
    if k > 1:
        assert ours["obs"].shape == (ids.size, 3, 2, k)
        assert tw.buf.get_transitions(torch.from_numpy(ids), stack_layout="last")[
            "next_obs"
        ].is_contiguous()
    first = host(tw.buf.get_transitions(torch.from_numpy(ids), stack_layout="first"))
    assert first["obs"].tobytes() == host(tw.buf.get_transitions(ids))["obs"].tobytes()


@pytest.mark.parametrize("bad", ["middle", "", None, 1, ["last"]])
def test_other_layouts_are_refused(bad: Any) -> None:
    buf = make("cpu", capacity=16, num_envs=2, frame_stack=2)
    with pytest.raises(rr.ConfigError, match="stack_layout: expected 'first' or 'last'"):
        buf.get_transitions([0], stack_layout=bad)
