"""Prioritized replay through ``replay_buffer_kwargs``: ids, weights, ``update_priorities``,
and the prioritized DQN of ``docs/migrating/sb3.md`` (its code block, run as written)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th
from gymnasium import spaces

import rlreplay as rr
from rlreplay.integrations.sb3 import ReplayBuffer
from tests.integrations.test_sb3_buffer import random_steps

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating" / "sb3.md"


def prioritized(**kwargs: Any) -> ReplayBuffer:
    return ReplayBuffer(200, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), prioritized=True,
                        seed=0, **kwargs)  # fmt: skip


def test_samples_carry_ids_and_weights() -> None:
    buffer = prioritized(alpha=0.6, beta=0.4)
    assert isinstance(buffer.core, rr.PrioritizedReplayBuffer)
    random_steps(buffer, 60)
    s = buffer.sample(32)
    assert s.ids.dtype == np.int64 and s.ids.shape == (32,)
    assert s.weights.shape == (32, 1) and s.weights.dtype == th.float32
    assert th.all((s.weights > 0) & (s.weights <= 1))


def test_update_priorities_steers_sampling() -> None:
    """One transition given nearly all the priority is nearly all that is drawn, with the
    importance weight ``(P_min / P) ** beta``, about 1e-5."""
    buffer = prioritized(alpha=1.0, beta=1.0)
    random_steps(buffer, 60)
    ids = buffer.core.sampleable_ids()
    target = int(ids[7])
    priorities = th.full((ids.size, 1), 1e-3)
    priorities[7] = 100.0
    assert buffer.update_priorities(ids, priorities) == 0  # a (B, 1) tensor is accepted
    s = buffer.sample(512)
    assert np.mean(s.ids == target) > 0.9
    hits = th.from_numpy(s.ids == target)
    th.testing.assert_close(s.weights[hits], th.full_like(s.weights[hits], 1e-3 / 100),
                            rtol=1e-2, atol=0)  # fmt: skip


def test_stock_algorithms_sample_uniformly() -> None:
    """Without updates every transition keeps its first priority: draws are uniform."""
    buffer = prioritized(alpha=0.6)
    random_steps(buffer, 60)
    draws = np.concatenate([buffer.sample(256).ids for _ in range(40)])
    counts = np.unique(draws, return_counts=True)[1]
    assert counts.size == buffer.core.num_sampleable
    assert counts.std() / counts.mean() < 0.3
    assert th.all(buffer.sample(64).weights == 1.0)


def test_uniform_buffers_refuse_priority_updates() -> None:
    buffer = ReplayBuffer(50, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), seed=0)
    random_steps(buffer, 20)
    s = buffer.sample(4)
    assert th.all(s.weights == 1.0)
    with pytest.raises(TypeError, match="prioritized"):
        buffer.update_priorities(s.ids, np.ones(4))


def doc_block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"{DOC.name}: expected one python block with {marker!r}"
    return found[0]


def test_the_documented_prioritized_dqn_trains() -> None:
    """The block of the docs, as written, then a short run: priorities move away from their
    initial value and the weights are used."""
    scope: dict[str, Any] = {"ReplayBuffer": ReplayBuffer}
    exec(compile(doc_block("class PrioritizedDQN"), str(DOC), "exec"), scope)
    model = scope["model"]
    model.learning_starts = 100
    model.learn(400)
    buffer = model.replay_buffer
    assert isinstance(buffer, ReplayBuffer) and buffer.prioritized
    ids = buffer.core.sampleable_ids()
    priorities = buffer.core.get_priorities(ids)
    assert np.unique(priorities).size > 10  # updated with |TD error|
    assert model._n_updates > 0
