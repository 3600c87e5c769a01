"""The one-kernel prioritized sample (issue 17): ``PrioritizedReplayBuffer.sample`` drawn and
assembled in one Numba call (:func:`rlreplay.sampling.batch_kernels._prio_kernel`).

It must give exactly the general path's batch (``_draw`` through ``Priorities.draw``, then
``assemble_transitions``) for the same generator state, including ``weights``,
``probabilities`` and the beta schedule: twin buffers with one seed, one forced onto the
general path, over random schemas, fills, variants and priority updates (Hypothesis). A slow
reference recomputes a draw from the generator's stream with a cumulative sum over the
priorities (exact sums: integer priorities, ``alpha = 1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.errors import EmptyBufferError
from rlreplay.sampling import PrioritizedSampler
from rlreplay.sampling.base import settled_rows
from rlreplay.sampling.onecall import FastSampler
from tests.test_small_buffer import _equal  # batches equal bit for bit, signs of zero too

Array = np.ndarray[Any, Any]


def _general_only(buf: rr.PrioritizedReplayBuffer) -> rr.PrioritizedReplayBuffer:
    """Make ``buf`` answer every sample through the general path (before its first sample)."""
    fs = FastSampler(
        buf._cols, buf._index, frame_stack=buf.frame_stack, zero_pad=buf.stack_pad == "zero",
        next_fields=buf.next_fields, n_step=buf.n_step, gamma=buf.gamma, prioritized=True,
    )  # fmt: skip
    fs.eligible = False
    buf._draws.fast_prio = fs
    return buf


def _fill(buf: rr.ReplayBuffer, steps: int, seed: int, end_p: float) -> None:
    rng = np.random.default_rng(seed)
    E = buf.num_envs
    lead = () if E == 1 else (E,)
    f = buf.schema.fields["obs"]
    for _ in range(steps):
        buf.add(
            obs=(rng.random(lead + f.shape) * 200).astype(f.dtype),
            next_obs=(rng.random(lead + f.shape) * 200).astype(f.dtype),
            action=rng.integers(0, 6, lead),
            reward=(rng.random(lead) * 4 - 2).astype(buf.schema.fields["reward"].dtype),
            terminated=rng.random(lead) < end_p, truncated=rng.random(lead) < end_p / 3,
        )  # fmt: skip


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(8, 64),
    num_envs=st.sampled_from([1, 1, 3]),
    n_step=st.integers(1, 3),
    frame_stack=st.sampled_from([1, 1, 3]),
    obs=st.sampled_from([((4,), np.float32), ((3, 5), np.uint8)]),
    variant=st.sampled_from(["proportional", "rank_based"]),
    stratified=st.booleans(),
    beta_steps=st.sampled_from([0, 5]),
    steps=st.integers(0, 120),
    end_p=st.sampled_from([0.0, 0.1]),
    batch=st.sampled_from([1, 5, 32]),
    seed=st.integers(0, 2**16),
    reward_dtype=st.sampled_from([np.float32, np.float64]),
)
def test_one_kernel_prioritized_batches_equal_the_general_paths(
    capacity: int, num_envs: int, n_step: int, frame_stack: int, obs: tuple[Any, Any],
    variant: str, stratified: bool, beta_steps: int, steps: int, end_p: float, batch: int,
    seed: int, reward_dtype: Any,
) -> None:  # fmt: skip
    kw: dict[str, Any] = dict(
        capacity=capacity * num_envs, num_envs=num_envs, n_step=n_step, gamma=0.9,
        frame_stack=frame_stack, variant=variant, stratified=stratified, alpha=0.7, beta=0.4,
        beta_steps=beta_steps, sort_interval=1 if variant == "rank_based" else None,
        fields={"obs": rr.Field(*obs), "action": rr.Field((), np.int64),
                "reward": rr.Field((), reward_dtype)},
    )  # fmt: skip
    fast = rr.PrioritizedReplayBuffer(seed=11, **kw)
    general = _general_only(rr.PrioritizedReplayBuffer(seed=11, **kw))
    _fill(fast, steps, seed, end_p)
    _fill(general, steps, seed, end_p)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        try:
            expected = general.sample(batch)
        except EmptyBufferError:
            with pytest.raises(EmptyBufferError):
                fast.sample(batch)
            return
        got = fast.sample(batch)
        _equal(got, expected)
        assert fast.beta == general.beta
        new = rng.integers(0, 4, batch).astype(np.float64)  # zeros too: masses of 0
        assert fast.update_priorities(got.ids, new) == general.update_priorities(expected.ids, new)
    assert fast._draws.fast_prio.eligible


def test_a_draw_against_a_slow_reference() -> None:
    """Stratified draws recomputed from the generator's stream by a cumulative sum."""
    fields = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
    buf = rr.PrioritizedReplayBuffer(40, fields, alpha=1.0, beta=0.5, eps=0.0, seed=5)
    _fill(buf, 40, seed=2, end_p=0.0)
    all_ids = np.arange(int(buf._index.env[0, 3]), int(buf._index.env[0, 4]))  # sampleable
    p_all = (np.arange(len(all_ids)) % 5).astype(np.float64)  # small integers, zeros too
    buf.update_priorities(all_ids, p_all)
    state = buf._rng.bit_generator.state
    b = buf.sample(64)
    # The reference: masses (i + u_i) * total / B against the cumulative sum over slots.
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    u = rng.random(64)
    total = p_all.sum()
    masses = (np.arange(64) + u) * (total / 64)
    pick = np.searchsorted(np.cumsum(p_all), masses, side="right")
    np.testing.assert_array_equal(b.ids, all_ids[pick])
    m = p_all[pick]
    assert np.all(m > 0)
    np.testing.assert_array_equal(b.probabilities, m / total)
    smallest = p_all[p_all > 0].min()
    np.testing.assert_allclose(b.weights, (smallest / m) ** 0.5, rtol=1e-6)
    ref = buf.get_transitions(b.ids)  # the rows, through the general assembly
    for key in ref:
        if key in ("weights", "probabilities"):  # get_transitions' are not a draw's
            continue
        np.testing.assert_array_equal(b[key], ref[key], err_msg=key)


def test_out_refills_a_prioritized_batch_in_place() -> None:
    fields = {"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int64)}
    buf = rr.PrioritizedReplayBuffer(100, fields, seed=0)
    twin = rr.PrioritizedReplayBuffer(100, fields, seed=0)
    _fill(buf, 100, seed=1, end_p=0.05)
    _fill(twin, 100, seed=1, end_p=0.05)
    first = buf.sample(16)
    twin.sample(16)
    arrays = {k: first[k] for k in first}
    again = buf.sample(16, out=first)
    assert again is first
    _equal(again, twin.sample(16))
    assert all(first[k] is arrays[k] for k in first)  # the same arrays, refilled
    wrong = {k: v for k, v in first.items() if k != "probabilities"}
    with pytest.raises(ValueError, match="probabilities"):
        buf.sample(16, out=rr.Batch(wrong))


def test_nothing_drawable_raises_the_general_paths_errors() -> None:
    fields = {"obs": rr.Field((2,), np.float32), "action": rr.Field((), np.int64)}
    buf = rr.PrioritizedReplayBuffer(16, fields, eps=0.0, seed=0)
    with pytest.raises(EmptyBufferError, match="nothing is sampleable"):
        buf.sample(4)
    _fill(buf, 8, seed=0, end_p=0.0)
    ids = np.unique(buf.sample(64).ids)
    buf.update_priorities(ids, np.zeros(len(ids)))
    with pytest.raises(EmptyBufferError, match="priority 0"):
        buf.sample(4)


class _GeneralSettleSampler(PrioritizedSampler):
    """Settles deferred steps through the general path (per-env arrays), as a sampler with its
    own write hook does."""

    def on_settle(self, index: Any, before: Any, t0: int, n: int) -> None:
        rows_env, rows_t = settled_rows(index.num_envs, index.env_capacity, t0, n)
        self.on_write(index, rows_env, rows_t, *index.sampleable_changes(before))


class _GeneralSettle(rr.PrioritizedReplayBuffer):
    sampler_class = _GeneralSettleSampler


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(4, 40),
    variant=st.sampled_from(["proportional", "rank_based"]),
    n_step=st.integers(1, 3),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "end", "read", "update", "many"]),
            st.integers(0, 2**16),
        ),
        max_size=120,
    ),
)
def test_one_env_settle_ranges_equal_the_general_settle(
    capacity: int, variant: str, n_step: int, ops: list[tuple[str, int]]
) -> None:
    """The one-env shortcut of :meth:`PrioritizedSampler.on_settle` (slot ranges) leaves
    the priorities, trees and draws exactly as the general per-env path does."""
    kw: dict[str, Any] = dict(
        capacity=capacity, n_step=n_step, variant=variant, alpha=0.6, seed=3,
        fields={"obs": rr.Field((2,), np.float32)},
        sort_interval=1 if variant == "rank_based" else None,
    )  # fmt: skip
    fast, general = rr.PrioritizedReplayBuffer(**kw), _GeneralSettle(**kw)
    o = np.zeros(2, np.float32)
    for op, k in ops:
        for buf in (fast, general):
            if op == "add":
                buf.add(obs=o + k, reward=1.0, terminated=False, truncated=False)
            elif op == "many":  # more deferred steps than the ring holds, settled at once
                for j in range(capacity + k % 5):
                    buf.add(obs=o + j, reward=1.0, terminated=False, truncated=False)
            elif op == "end":
                buf.add(obs=o, reward=1.0, terminated=k % 2 == 0, truncated=k % 2 == 1,
                        next_obs=o)  # fmt: skip
            elif op == "update" and buf.num_sampleable:
                ids = buf.sampleable_ids()
                buf.update_priorities(ids, (ids % 7).astype(np.float64) + k % 3)
        a, b = fast._prios, general._prios  # both settled here
        np.testing.assert_array_equal(a.prio, b.prio)
        np.testing.assert_array_equal(a.live, b.live)
        np.testing.assert_array_equal(a._nodes, b._nodes)
        if op == "read" and fast.num_sampleable:
            _equal(fast.sample(5), general.sample(5))


def test_a_subclass_write_hook_still_sees_settled_steps() -> None:
    """The one-env shortcut is taken only where ``on_write`` is the sampler class's own: a
    subclass that overrides the hook still gets every settled step through it."""
    seen: list[list[int]] = []

    class WatchingSampler(PrioritizedSampler):
        def on_write(self, index: Any, rows_env: Any, rows_t: Any, *rest: Any) -> None:
            seen.append(rows_t.tolist())
            super().on_write(index, rows_env, rows_t, *rest)

    class Watching(rr.PrioritizedReplayBuffer):
        sampler_class = WatchingSampler

    buf = Watching(8, {"obs": rr.Field((2,), np.float32)}, seed=0)
    for t in range(3):
        buf.add(obs=np.full(2, t, np.float32), reward=1.0, terminated=False, truncated=False)
    assert buf.priority_mass().sampleable == 2  # a read settles the three deferred steps
    assert [t for rows in seen for t in rows] == [0, 1, 2]
