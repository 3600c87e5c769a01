"""Sequences: get_sequences is the core's bit for bit for every stored start; sample_sequences
draws starts by the core's laws (uniform over stored steps, whole runs only with pad=False,
env-balanced, by priority) and returns the runs of those starts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

import rlreplay as rr
from tests.torch_buffer.helpers import Twins, assert_bit_identical, host, make, random_step
from tests.torch_device.helpers import no_host_sync

Array = np.ndarray[Any, Any]

CONFIGS: dict[str, dict[str, Any]] = {
    "3 envs, 2-step": dict(capacity=18, num_envs=3, n_step=2, finals_per_env=6),
    "2 envs, few finals": dict(capacity=20, num_envs=2, frame_stack=2, finals_per_env=2),
    "prioritized": dict(capacity=20, num_envs=2, n_step=2, prioritized=True),
}


def fed(device: str, name: str, steps: int = 31, p_end: float = 0.25) -> Twins:
    tw = Twins(make(device, **CONFIGS[name]))
    rng = np.random.default_rng(len(name))
    for _ in range(steps):
        tw.add(random_step(rng, tw.buf.num_envs, p_end=p_end))
    return tw


def stored_ids(tw: Twins) -> Array:
    buf = tw.buf
    head = buf._ring.head.cpu().numpy()
    E = buf.num_envs
    return np.concatenate([np.arange(head[e], buf.steps_added) * E + e for e in range(E)])


def core_sequences(tw: Twins, ids: Array, length: int, within: bool) -> dict[str, Array]:
    got = tw.np_buf.get_sequences(ids, length, within_episode=within)
    return {k: np.asarray(v) for k, v in got.items()}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("within", [True, False])
def test_get_sequences_match_the_core(device: str, name: str, within: bool) -> None:
    tw = fed(device, name)
    ids = stored_ids(tw)
    for length in (1, 4):
        ours = host(tw.buf.get_sequences(ids, length, within_episode=within))
        assert_bit_identical(ours, core_sequences(tw, ids, length, within))


def test_uniform_starts_follow_the_core_laws(device: str) -> None:
    tw = fed(device, "3 envs, 2-step")
    buf, L = tw.buf, 4
    ids = stored_ids(tw)
    b = host(buf.sample_sequences(16, L))
    theirs = core_sequences(tw, b["ids"], L, True)
    assert_bit_identical(b, {**theirs, "weights": np.ones(16, np.float32)})
    # pad=True: uniform over the stored steps.
    drawn = np.concatenate([buf.sample_sequences(32, L)["ids"].cpu().numpy() for _ in range(60)])
    counts = np.array([(drawn == i).sum() for i in ids])
    assert counts.sum() == drawn.size and stats.chisquare(counts).pvalue > 1e-3
    # pad=False: uniform over the starts whose L steps are all real.
    for within in (True, False):
        fits = ids[core_sequences(tw, ids, L, within)["mask"].all(axis=1)]
        drawn = np.concatenate([
            buf.sample_sequences(32, L, pad=False, within_episode=within)["ids"].cpu().numpy()
            for _ in range(60)
        ])  # fmt: skip
        counts = np.array([(drawn == i).sum() for i in fits])
        assert counts.sum() == drawn.size and stats.chisquare(counts).pvalue > 1e-3


@pytest.mark.parametrize("pad", [True, False])
def test_balanced_starts_pick_envs_uniformly(device: str, pad: bool) -> None:
    tw = fed(device, "3 envs, 2-step")
    rows = [tw.buf.sample_sequences(30, 3, pad=pad, balance_envs=True) for _ in range(40)]
    envs = np.stack([r["env_ids"].cpu().numpy() for r in rows])
    assert (np.diff(envs, axis=1) >= 0).all()  # ordered by env
    assert stats.chisquare(np.bincount(envs.ravel(), minlength=3)).pvalue > 1e-3
    if not pad:
        assert all(bool(r["mask"].all()) for r in rows)


def test_prioritized_starts_by_priority(device: str) -> None:
    tw = fed(device, "prioritized")
    buf = tw.buf
    ids = tw.np_buf.sampleable_ids()
    rng = np.random.default_rng(0)
    buf.update_priorities(ids, rng.uniform(0.1, 3.0, ids.shape[0]))  # type: ignore[attr-defined]
    mass = buf.get_priorities(ids).cpu().numpy() ** buf.alpha  # type: ignore[attr-defined]
    L = 3
    for pad in (True, False):
        allowed = ids if pad else ids[core_sequences(tw, ids, L, True)["mask"].all(axis=1)]
        m = mass[np.isin(ids, allowed)]
        b = host(buf.sample_sequences(64, L, pad=pad))
        assert np.isin(b["ids"], allowed).all()
        order = np.argsort(ids)
        want = mass[order][np.searchsorted(ids[order], b["ids"])]
        np.testing.assert_allclose(b["probabilities"], want / m.sum(), rtol=1e-12)
        np.testing.assert_allclose(b["weights"], (m.min() / want) ** 0.4, rtol=1e-6)
    with pytest.raises(rr.ConfigError, match="balance_envs"):
        buf.sample_sequences(4, 2, balance_envs=True)


def test_sequences_never_wait_for_the_device(device: str) -> None:
    for name in ("2 envs, few finals", "prioritized"):
        tw = fed(device, name)
        with no_host_sync(device) as counter:
            for pad in (True, False):
                tw.buf.sample_sequences(8, 3, pad=pad)
            tw.buf.sample_sequences(8, 3, pad=False, within_episode=False)
            if name != "prioritized":
                tw.buf.sample_sequences(8, 3, pad=False, balance_envs=True)
            tw.buf.get_sequences(torch.tensor([0, 1], device=device), 3)
        assert dict(counter.calls) == {}
