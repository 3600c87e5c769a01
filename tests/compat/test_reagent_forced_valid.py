"""ReAgent front-end: every slot reads as reagent 0.1 reads it, whatever it holds (issue 13).

reagent 0.1's ``sample_transition_batch`` (``reagent/replay_memory/circular_replay_buffer.py``)
samples any slot marked valid (``np.random.choice`` over ``_is_index_valid``; the prioritized
buffer's redraws test ``is_valid_transition`` only) and takes any slot in ``indices=``, and reads
the ring as it is: ``get_stack_for_indices`` (slots ``s - k + 1 .. s`` modulo the capacity),
``get_traj_lengths`` (the first terminal flag in ``s .. s + n - 1``), ``next_indices = (indices
+ traj_lengths) % replay_capacity`` and ``_store[name][indices]``. A slot made valid by
``set_index_valid_status`` may hold a padding row, nothing, the newest step (window not known)
or a step whose neighbours were overwritten; 0.1 returns what the slots hold, and so must the
front-end (it raised ``InvalidIdError`` there: the 10^4-example state machine's shrunk cases
are the first two scenarios).

The expected rows were transcribed from running reagent 0.1's own code (``/tmp/orig``, NumPy 2
with ``np.bool = np.bool_``, its ``np.empty`` store rows zeroed as a fresh process's memory
reads) on the same adds, side by side with the front-end: a scratch driver compared every slot
(negative indices too) after every operation of 450 random runs (uniform, prioritized,
``return_everything_as_stack``): no difference. Step ``g`` (from 0) has observation
``[g + 1, -(g + 1)]``, action ``g % 5``, reward ``g + 1`` (prioritized: priority ``g + 1``);
``gamma = 0.5``. ``state``/``next_state`` are listed by the first component of each frame.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from scipy import stats

from rlreplay.compat.reagent import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    _assembly,
    _slotread,
    _slots,
)

Array = np.ndarray[Any, Any]

# name: ((prioritized, stack_size, update_horizon, capacity, episodes [(length, terminal)],
#         set_index_valid_status calls [(slot, flag)]), 0.1's valid slots, 0.1's read of
#         every slot 0 .. capacity - 1)
SCENARIOS: dict[str, Any] = {
    "shrunk_uniform": (
        (False, 3, 1, 4, [(5, False)], [(-1, True)]),
        [1, 3],
        {
            "state": [[5.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 5.0], [4.0, 5.0, 2.0]],
            "next_state": [[2.0, 3.0, 4.0], [3.0, 4.0, 5.0], [4.0, 5.0, 2.0], [5.0, 2.0, 3.0]],
            "action": [2, 3, 4, 1],
            "reward": [3.0, 4.0, 5.0, 2.0],
            "next_action": [3, 4, 1, 2],
            "next_reward": [4.0, 5.0, 2.0, 3.0],
            "terminal": [False, False, False, False],
            "step": [1, 1, 1, 1],
        },
    ),
    "shrunk_prioritized": (
        (True, 2, 1, 4, [(6, False)], [(-1, True)]),
        [0, 1, 3],
        {
            "state": [[3.0, 4.0], [4.0, 5.0], [5.0, 6.0], [6.0, 3.0]],
            "next_state": [[4.0, 5.0], [5.0, 6.0], [6.0, 3.0], [3.0, 4.0]],
            "action": [3, 4, 0, 2],
            "reward": [4.0, 5.0, 6.0, 3.0],
            "next_action": [4, 0, 2, 3],
            "next_reward": [5.0, 6.0, 3.0, 4.0],
            "terminal": [False, False, False, False],
            "step": [1, 1, 1, 1],
            "sampling_probabilities": [4.0, 5.0, 6.0, 3.0],
        },
    ),
    "newest_horizon_3": (
        (False, 1, 3, 6, [(4, False)], []),
        [0],
        {
            "state": [1.0, 2.0, 3.0, 4.0, 0.0, 0.0],
            "next_state": [4.0, 0.0, 0.0, 1.0, 2.0, 3.0],
            "action": [0, 1, 2, 3, 0, 0],
            "reward": [2.75, 4.5, 5.0, 4.0, 0.25, 1.0],
            "next_action": [3, 0, 0, 0, 1, 2],
            "next_reward": [4.0, 0.0, 0.0, 1.0, 2.0, 3.0],
            "terminal": [False, False, False, False, False, False],
            "step": [3, 3, 3, 3, 3, 3],
        },
    ),
    "newest_horizon_2_stack_2": (
        (True, 2, 2, 7, [(3, True), (3, False)], []),
        [2, 3, 5],
        {
            "state": [
                [5.0, 6.0],
                [6.0, 1.0],
                [1.0, 2.0],
                [2.0, 3.0],
                [3.0, 0.0],
                [0.0, 4.0],
                [4.0, 5.0],
            ],
            "next_state": [
                [1.0, 2.0],
                [2.0, 3.0],
                [3.0, 0.0],
                [3.0, 0.0],
                [4.0, 5.0],
                [5.0, 6.0],
                [6.0, 1.0],
            ],
            "action": [0, 0, 1, 2, 0, 3, 4],
            "reward": [6.5, 2.0, 3.5, 3.0, 2.0, 6.5, 8.0],
            "next_action": [1, 2, 0, 0, 4, 0, 0],
            "next_reward": [2.0, 3.0, 0.0, 0.0, 5.0, 6.0, 1.0],
            "terminal": [False, False, True, True, False, False, False],
            "step": [2, 2, 2, 1, 2, 2, 2],
            "sampling_probabilities": [6.0, 1.0, 2.0, 3.0, 0.0, 4.0, 5.0],
        },
    ),
    "wrapped_k3": (
        (False, 3, 2, 7, [(4, True), (5, False)], []),
        [1, 2, 3],
        {
            "state": [
                [9.0, 0.0, 0.0],
                [0.0, 0.0, 5.0],
                [0.0, 5.0, 6.0],
                [5.0, 6.0, 7.0],
                [6.0, 7.0, 8.0],
                [7.0, 8.0, 9.0],
                [8.0, 9.0, 0.0],
            ],
            "next_state": [
                [0.0, 5.0, 6.0],
                [5.0, 6.0, 7.0],
                [6.0, 7.0, 8.0],
                [7.0, 8.0, 9.0],
                [8.0, 9.0, 0.0],
                [9.0, 0.0, 0.0],
                [0.0, 0.0, 5.0],
            ],
            "action": [0, 4, 0, 1, 2, 3, 0],
            "reward": [2.5, 8.0, 9.5, 11.0, 12.5, 9.0, 0.0],
            "next_action": [0, 1, 2, 3, 0, 0, 4],
            "next_reward": [6.0, 7.0, 8.0, 9.0, 0.0, 0.0, 5.0],
            "terminal": [False, False, False, False, False, False, False],
            "step": [2, 2, 2, 2, 2, 2, 2],
        },
    ),
    "never_written": (
        (False, 2, 2, 9, [(3, False)], [(7, True), (8, True)]),
        [1, 7, 8],
        {
            "state": [
                [0.0, 0.0],
                [0.0, 1.0],
                [1.0, 2.0],
                [2.0, 3.0],
                [3.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
            ],
            "next_state": [
                [1.0, 2.0],
                [2.0, 3.0],
                [3.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
                [0.0, 0.0],
                [0.0, 1.0],
            ],
            "action": [0, 0, 1, 2, 0, 0, 0, 0, 0],
            "reward": [0.5, 2.0, 3.5, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "next_action": [1, 2, 0, 0, 0, 0, 0, 0, 0],
            "next_reward": [2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
            "terminal": [False, False, False, False, False, False, False, False, False],
            "step": [2, 2, 2, 2, 2, 2, 2, 2, 2],
        },
    ),
    "stacked_k2": (
        (False, 2, 1, 6, [(3, True), (4, False)], [(4, True), (5, True)]),
        [0, 1, 4, 5],
        {
            "state": [[4.0, 5.0], [5.0, 6.0], [6.0, 7.0], [7.0, 3.0], [3.0, 0.0], [0.0, 4.0]],
            "next_state": [[5.0, 6.0], [6.0, 7.0], [7.0, 3.0], [3.0, 0.0], [0.0, 4.0], [4.0, 5.0]],
            "action": [[3, 4], [4, 0], [0, 1], [1, 2], [2, 0], [0, 3]],
            "reward": [[4.0, 5.0], [5.0, 6.0], [6.0, 7.0], [7.0, 3.0], [3.0, 0.0], [0.0, 4.0]],
            "next_action": [[4, 0], [0, 1], [1, 2], [2, 0], [0, 3], [3, 4]],
            "next_reward": [[5.0, 6.0], [6.0, 7.0], [7.0, 3.0], [3.0, 0.0], [0.0, 4.0], [4.0, 5.0]],
            "terminal": [False, False, False, True, False, False],
            "step": [1, 1, 1, 1, 1, 1],
        },
    ),
}


def build(config: Any, *, seed: int | None = None, stacked: bool = False, **kw: Any) -> Any:
    """The scenario's buffer: ``episodes`` added, then ``set_index_valid_status`` calls."""
    prioritized, k, n, cap, episodes, valid = config
    cls = PrioritizedReplayBuffer if prioritized else ReplayBuffer
    if stacked:
        kw["return_everything_as_stack"] = True
    buf = cls((2,), k, cap, 1, update_horizon=n, gamma=0.5, observation_dtype=np.float32,
              seed=seed, **kw)  # fmt: skip
    g = 0
    for length, terminal in episodes:
        for t in range(length):
            values = (np.array([g + 1, -(g + 1)], np.float32), g % 5, float(g + 1))
            buf.add(*values, terminal and t == length - 1, *([1.0 + g] if prioritized else []))
            g += 1
    for slot, flag in valid:
        buf.set_index_valid_status(slot, flag)
    return buf


def frames(first: Any, k: int) -> Array:
    """Full states from their first components: frame ``[x, -x]`` (zeros stay zeros)."""
    x = np.asarray(first, np.float32)
    both = np.stack([x, -x + 0.0], axis=1)  # (B, 2) or (B, 2, k)
    return both


def assert_rows(batch: Any, want: dict[str, Any], rows: list[int], k: int) -> None:
    """``batch`` row ``i`` is 0.1's read of slot ``rows[i]`` in the transcribed table."""
    for name in ("state", "next_state"):
        expected = frames([want[name][s] for s in rows], k)
        np.testing.assert_array_equal(batch_array(batch, name), expected, err_msg=name)
    for name in ("action", "reward", "next_action", "next_reward", "terminal", "step"):
        expected = np.array([want[name][s] for s in rows])
        got = batch_array(batch, name).reshape(expected.shape)
        np.testing.assert_array_equal(got, expected, err_msg=name)
    if "sampling_probabilities" in want:
        priorities = np.array([want["sampling_probabilities"][s] for s in rows], np.float32)
        np.testing.assert_array_equal(
            batch_array(batch, "sampling_probabilities").reshape(-1), priorities
        )


def batch_array(batch: Any, name: str) -> Array:
    out: Array = getattr(batch, name).numpy()
    return out


@pytest.fixture
def global_generators() -> Any:
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    yield None
    np.random.set_state(np_state)  # noqa: NPY002
    random.setstate(py_state)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_slot_reads_as_0_1_reads_it(name: str) -> None:
    config, valid, want = SCENARIOS[name]
    k, cap = config[1], config[3]
    buf = build(config, stacked=name.startswith("stacked"))
    assert np.flatnonzero(buf._is_valid).tolist() == valid  # the marks are 0.1's
    every = list(range(cap))
    assert_rows(buf.sample_transition_batch(batch_size=cap, indices=every), want, every, k)
    negative = [s - cap for s in every]  # 0.1 echoes them and reads the same slots
    batch = buf.sample_transition_batch(batch_size=cap, indices=np.array(negative))
    assert batch.indices.reshape(-1).tolist() == negative
    # (sampling_probabilities reads a negative index from the end of the tree's leaf level)
    assert_rows(batch, {x: v for x, v in want.items() if x != "sampling_probabilities"}, every, k)


@pytest.mark.usefixtures("global_generators")
def test_forced_slots_are_drawn_as_0_1_draws_them() -> None:
    """The shrunk cases of the slow state machine, drawn on 0.1's generators."""
    config, _, want = SCENARIOS["shrunk_uniform"]
    buf = build(config)
    np.random.seed(0)  # noqa: NPY002 - 0.1: sample_index_batch(8) == [3, 3, 3, 3, 1, 3, 1, 3]
    batch = buf.sample_transition_batch(batch_size=8)
    assert batch.indices.reshape(-1).tolist() == [3, 3, 3, 3, 1, 3, 1, 3]
    assert_rows(batch, want, [3, 3, 3, 3, 1, 3, 1, 3], 3)
    config, _, want = SCENARIOS["shrunk_prioritized"]
    buf = build(config)
    # 0.1, random.seed(s): sample_index_batch(6) (stratified, redraws of invalid slot 2)
    for seed, drawn in ((0, [0, 1, 1, 1, 1, 3]), (1, [0, 1, 1, 0, 0, 3])):
        random.seed(seed)
        batch = buf.sample_transition_batch(batch_size=6)
        assert batch.indices.reshape(-1).tolist() == drawn
        assert_rows(batch, want, drawn, 2)
    config, _, want = SCENARIOS["never_written"]
    buf = build(config)  # slots 7 and 8 never written, set valid
    np.random.seed(3)  # noqa: NPY002 - 0.1: [7, 8, 1, 7, 8, 8, 1, 1]
    batch = buf.sample_transition_batch(batch_size=8)
    assert batch.indices.reshape(-1).tolist() == [7, 8, 1, 7, 8, 8, 1, 1]
    assert_rows(batch, want, [7, 8, 1, 7, 8, 8, 1, 1], 2)


@pytest.mark.parametrize("name", ["shrunk_uniform", "shrunk_prioritized", "never_written"])
def test_seeded_draws_cover_forced_slots(name: str) -> None:
    """With ``seed=``, draws stay on 0.1's law: uniform over the valid slots (prioritized: by
    priority among them), forced slots included, each row 0.1's read."""
    config, valid, want = SCENARIOS[name]
    buf = build(config, seed=5)
    drawn = np.empty(0, np.int64)
    for _ in range(15):  # prioritized: a third of the mass is invalid, redrawn per batch
        batch = buf.sample_transition_batch(batch_size=200)
        slots = batch.indices.reshape(-1).numpy()
        assert_rows(batch, want, slots.tolist(), config[1])
        drawn = np.concatenate([drawn, slots])
    assert set(drawn.tolist()) == set(valid)
    counts = np.array([(drawn == s).sum() for s in valid])
    weights = np.array([want["sampling_probabilities"][s] if config[0] else 1.0 for s in valid])
    expected = drawn.size * weights / weights.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-3


@pytest.mark.usefixtures("global_generators")
def test_prioritized_invalid_slot_left_by_exhausted_redraws_is_refused() -> None:
    """Difference 3: 0.1 returns an invalid slot when its redraws run out on the last draw.

    reagent 0.1, same adds, ``_max_sample_attempts = 1``, ``random.seed(1)``:
    ``sample_index_batch(2) == [0, 3]`` with only slot 0 valid (slot 3's window reads slots
    never written): a transition the validity marks say not to sample, returned silently.
    """
    buf = build((True, 1, 3, 6, [(4, False)], []), max_sample_attempts=1)
    assert np.flatnonzero(buf._is_valid).tolist() == [0]
    random.seed(1)
    with pytest.raises(RuntimeError, match="Max sample attempts"):
        buf.sample_index_batch(2)


def test_forced_slots_survive_save_and_load(tmp_path: Any) -> None:
    config, valid, want = SCENARIOS["never_written"]
    buf = build(config, seed=2)
    buf.save(tmp_path, 0)
    loaded = build((*config[:4], [], []), seed=2)
    loaded.load(tmp_path, 0)
    batch = loaded.sample_transition_batch(batch_size=200)
    drawn = batch.indices.reshape(-1).tolist()
    assert set(drawn) == set(valid)
    assert_rows(batch, want, drawn, config[1])


@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("fmt", ["plain", "stack", "timeline", "both"])
def test_slot_read_of_intact_rows_is_the_fast_path(k: int, fmt: str) -> None:
    """The slot read and the core's assembly give the same rows (values, shapes, dtypes) where
    the slots hold one episode's steps, in every output format (``stack_size`` 0: empty
    stacks in the timeline format too, as in the plain one; with ``return_everything_as_stack``
    it raised ``ConfigError`` before)."""
    stack_all = fmt in ("stack", "both")
    timeline = fmt in ("timeline", "both")
    buf = ReplayBuffer((2,), k, 13, 1, return_everything_as_stack=stack_all,
                       return_as_timeline_format=timeline, update_horizon=3, gamma=0.5,
                       observation_dtype=np.float32, seed=0)  # fmt: skip
    for g, terminal in enumerate([0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]):
        buf.add(np.array([g + 1, -(g + 1)], np.float32), g % 5, float(g + 1), bool(terminal))
    slots = np.flatnonzero(_slotread.intact(buf, np.arange(13)))
    assert slots.size >= 4
    fast = _assembly.transition_arrays(buf, _slots.gather(buf, slots, check=False))
    raw = _slotread.read_slots(buf, slots, None)
    assert fast.keys() == raw.keys()
    for name, value in fast.items():
        pairs = (
            zip(value, raw[name], strict=True) if isinstance(value, list) else [(value, raw[name])]
        )
        for a, b in pairs:
            assert (a.shape, a.dtype) == (b.shape, b.dtype), name
            np.testing.assert_array_equal(a, b, err_msg=name)
