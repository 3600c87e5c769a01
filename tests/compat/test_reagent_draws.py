"""ReAgent front-end draws as reagent 0.1 makes them (issue 13), when built without ``seed=``.

reagent 0.1 (``reagent/replay_memory/circular_replay_buffer.py``) draws uniform indices with
``np.random.choice(a=replay_capacity, size=batch_size, replace=True, p=is_valid / num_valid)``
from NumPy's global generator; its prioritized buffer (``prioritized_replay_buffer.py``) takes
``sum_tree.stratified_sample(batch_size)`` (one ``random.uniform`` per stratum) and redraws an
invalid slot with ``sum_tree.sample()`` (``random.random()``) until ``max_sample_attempts``.
The batches below were transcribed from running reagent 0.1's own code (``/tmp/orig``, NumPy
2 with ``np.bool = np.bool_``) on the same adds and seeds, side by side with this front-end
(a scratch driver that compared 480 random batches, uniform and prioritized, with redraws and
"Max sample attempts" errors, all equal).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer, _draws, _slotread, _slots


def uniform_buffer(**kw: object) -> ReplayBuffer:
    buf = ReplayBuffer((2,), 2, 12, 6, update_horizon=2, observation_dtype=np.float32, **kw)  # type: ignore[arg-type]
    t = 0
    for length in (4, 5, 3):  # the ring wraps: the first episode is partly overwritten
        for j in range(length):
            buf.add(np.full(2, t, np.float32), t % 3, float(t), j == length - 1)
            t += 1
    return buf


def prioritized_buffer() -> PrioritizedReplayBuffer:
    buf = PrioritizedReplayBuffer((2,), 1, 10, 4, update_horizon=3, observation_dtype=np.float32)
    for t, p in enumerate([1.0, 2.0, 0.5, 3.0, 1.0, 2.0, 4.0]):
        buf.add(np.full(2, t, np.float32), t % 3, float(t), False, p)
    return buf


@pytest.fixture
def global_generators() -> object:
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    yield None
    np.random.set_state(np_state)  # noqa: NPY002
    random.setstate(py_state)


@pytest.mark.usefixtures("global_generators")
def test_uniform_batches_are_reagent_0_1s() -> None:
    buf = uniform_buffer()
    assert np.flatnonzero(buf._is_valid).tolist() == [0, 1, 2, 4, 6, 7, 8, 9, 10]  # as 0.1's
    np.random.seed(0)  # noqa: NPY002 - what 0.1 draws from
    batch = buf.sample_transition_batch()
    # reagent 0.1, np.random.seed(0): sample_index_batch(6) == [6, 8, 7, 6, 4, 7]
    assert batch.indices.reshape(-1).tolist() == [6, 8, 7, 6, 4, 7]
    assert batch.reward.reshape(-1).tolist() == pytest.approx([8.95, 12.93, 10.94, 8.95, 3, 10.94])
    assert batch.state[:, 0, :].tolist() == [[0, 4], [5, 6], [4, 5], [0, 4], [2, 3], [4, 5]]
    np.random.seed(1)  # noqa: NPY002
    # reagent 0.1, np.random.seed(1): [4, 8, 0, 2, 1, 0]; slot 0 holds step 9 (wrapped)
    batch = buf.sample_transition_batch()
    assert batch.indices.reshape(-1).tolist() == [4, 8, 0, 2, 1, 0]
    assert batch.state[:, 0, :].tolist() == [[2, 3], [5, 6], [0, 9], [10, 11], [9, 10], [0, 9]]
    np.random.seed(0)  # noqa: NPY002 - two draws in a row continue NumPy's stream as in 0.1
    assert buf.sample_index_batch(6).tolist() == [6, 8, 7, 6, 4, 7]
    assert buf.sample_index_batch(6).tolist() == [4, 10, 10, 4, 9, 6]


@pytest.mark.usefixtures("global_generators")
def test_prioritized_batches_are_reagent_0_1s_with_redraws() -> None:
    buf = prioritized_buffer()  # slots 0..3 valid; 4..6 have priorities but no known window
    # reagent 0.1 (random.seed(s)): stratified_sample(4) then redraws of invalid slots
    expected = {
        0: ([1, 3, 3, 3], [2.0, 3.0, 3.0, 3.0]),  # strata [1, 3, 5, 6]: two redraws
        1: ([0, 3, 3, 1], [1.0, 3.0, 3.0, 2.0]),  # strata [0, 3, 5, 6]
        2: ([2, 3, 1, 3], [0.5, 3.0, 2.0, 3.0]),  # strata [2, 4, 4, 6]: three redraws
    }
    for seed, (indices, priorities) in expected.items():
        random.seed(seed)
        batch = buf.sample_transition_batch()
        assert batch.indices.reshape(-1).tolist() == indices
        assert batch.sampling_probabilities.reshape(-1).tolist() == priorities


@pytest.mark.usefixtures("global_generators")
def test_prioritized_max_sample_attempts_as_reagent_0_1() -> None:
    buf = prioritized_buffer()
    buf._max_sample_attempts = 0  # 0.1: the first invalid draw raises at once
    random.seed(0)
    with pytest.raises(RuntimeError, match="Max sample attempts"):
        buf.sample_index_batch(4)


def test_numpy_seed_repeats_and_seed_keyword_keeps_its_own_generator() -> None:
    a, b = uniform_buffer(seed=3), uniform_buffer(seed=3)
    state = np.random.get_state()  # noqa: NPY002
    try:
        np.random.seed(0)  # noqa: NPY002 - ignored by a seeded buffer
        first = a.sample_index_batch(32).tolist()
        assert np.random.get_state()[2] == np.random.RandomState(0).get_state()[2]  # noqa: NPY002
    finally:
        np.random.set_state(state)  # noqa: NPY002
    assert first == b.sample_index_batch(32).tolist()


def test_a_valid_slot_holding_nothing_is_drawn_as_0_1_draws_it() -> None:
    """reagent 0.1 draws any slot marked valid: np.random.choice over the validity mask."""
    buf = uniform_buffer()
    buf.set_index_valid_status(11, True)  # the cursor slot: no step written there yet
    assert buf.size == 10
    # reagent 0.1, same adds, set_index_valid_status(11, True), np.random.seed(0):
    # sample_index_batch(16) == [7, 9, 8, 7, 6, 8, 6, 10, 11, 4, 9, 7, 7, 11, 0, 0]
    assert _seeded(buf, 0) == [7, 9, 8, 7, 6, 8, 6, 10, 11, 4, 9, 7, 7, 11, 0, 0]


def _seeded(buf: ReplayBuffer, seed: int) -> list[int]:
    state = np.random.get_state()  # noqa: NPY002
    try:
        np.random.seed(seed)  # noqa: NPY002
        return buf.sample_index_batch(16).tolist()
    finally:
        np.random.set_state(state)  # noqa: NPY002


def test_intact_rows_are_the_ones_the_core_assembles() -> None:
    """Every row whose slots hold its episode's steps can be assembled by the core."""
    for buf in (uniform_buffer(), prioritized_buffer()):
        slots = np.arange(buf._replay_capacity)
        intact = _slotread.intact(buf, slots)
        drawable = np.isin(slots, _slots.drawable_slots(buf._core, buf._slot_id, slots >= 0))
        assert not (intact & ~drawable).any()
        assert intact[buf._is_valid].all()  # every slot add marked valid is intact


@pytest.mark.usefixtures("global_generators")
def test_uniform_draw_over_valid_slots_is_numpy_choice_over_the_mask() -> None:
    """``_draws.uniform`` finds ``np.random.choice(p=mask / k)``'s slots over the valid slots
    only: the same slots and the same generator state after, over many seeds and masks
    (sparse and dense, one valid slot, valid slots at both ends, k up to 200,003)."""
    rng = np.random.default_rng(5)
    buf = ReplayBuffer((1,), 1, 10_000, 32)
    for trial in range(300):
        cap = int(rng.choice([1, 2, 7, 100, 10_000, 200_003]))
        density = float(rng.choice([0.001, 0.3, 0.9, 1.0]))
        mask = rng.random(cap) < density
        if trial % 7 == 0:
            mask[[0, -1]] = True
        if not mask.any():
            mask[int(rng.integers(cap))] = True
        buf._replay_capacity, buf._is_valid = cap, mask
        buf._num_valid_indices = int(mask.sum())
        b = int(rng.choice([0, 1, 32, 257]))
        np.random.seed(trial)  # noqa: NPY002
        p = mask.astype(np.float64) / float(buf._num_valid_indices)
        want = np.random.choice(a=cap, size=b, replace=True, p=p)  # noqa: NPY002 - 0.1's draw
        after = np.random.random_sample()  # noqa: NPY002
        np.random.seed(trial)  # noqa: NPY002
        got = _draws.uniform(buf, b)
        assert got.dtype == np.int64 and got.tolist() == want.tolist(), trial
        assert np.random.random_sample() == after  # noqa: NPY002 - the same generator calls


def test_level_cdf_is_numpys_sequential_sum() -> None:
    """Bit for bit ``c = np.cumsum(np.full(k, 1 / k)); c /= c[-1]`` (NumPy choice's cdf): every
    k to 3,000 (ties, powers of two and round numbers among them), and large ones."""
    rng = np.random.default_rng(11)
    large = [50_000, 65_536, 100_000, 131_072, 250_000, 1_000_000]
    for k in [*range(1, 3_000), *large, *rng.integers(50_000, 400_000, 20).tolist()]:
        want = np.cumsum(np.full(k, 1.0 / k))
        want /= want[-1]
        got = _draws.level_cdf(k)
        assert got.tobytes() == want.tobytes() and not got.flags.writeable, k
