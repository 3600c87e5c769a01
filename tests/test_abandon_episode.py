"""``abandon_episode``: end the running episode where it is, with no final observation.

Golden tables (which steps stay sampleable), the no-op cases, every draw path (uniform with
and without replacement or recency, the one-kernel path once the holes are overwritten,
prioritized), sequences and episode queries at the cut, checkpoints, FIFO dequeue across the
cut, refused calls and refused tables. The Hypothesis state machines
(``test_state_machines*.py``) run the operation in random sequences against the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.episodes.index import ABANDONED, FINAL_FID, LAST_END
from tests.reference import RefBuffer, assert_batch_matches

FIELDS = {"obs": rr.Field((), np.float32)}


def make(capacity: int = 32, cls: Any = rr.ReplayBuffer, **kw: Any) -> Any:
    return cls(capacity, FIELDS, seed=3, **kw)


def feed(buf: Any, ref: RefBuffer | None, n: int, env: int = 0, start: float = 0.0) -> None:
    """``n`` plain steps of env ``env`` (obs ``start``, ``start + 1``, ...), reward 1."""
    for i in range(n):
        values = {"obs": np.float32(start + i), "reward": 1.0, "terminated": False,
                  "truncated": False}  # fmt: skip
        ids = buf.add(env_ids=[env], **{k: [v] for k, v in values.items()})
        if ref is not None:
            assert ids.tolist() == [ref.add(env, values)]


def reference(buf: Any) -> RefBuffer:
    return RefBuffer(buf.num_envs, buf.env_capacity, buf.n_step, buf.gamma, buf.frame_stack,
                     buf.stack_pad == "zero", ("obs",))  # fmt: skip


def check(buf: Any, ref: RefBuffer) -> None:
    """Sampleable ids and every sampleable transition equal the reference's."""
    expected = ref.sampleable_ids()
    assert sorted(buf.sampleable_ids().tolist()) == expected
    assert buf.num_sampleable == len(expected)
    if expected:
        assert_batch_matches(buf.get_transitions(np.array(expected)), ref)


@pytest.mark.parametrize(
    ("n_step", "length", "kept"),
    [(1, 4, [0, 1, 2]), (2, 4, [0, 1]), (3, 5, [0, 1]), (3, 2, []), (3, 3, [])],
)
def test_golden_sampleable_steps(n_step: int, length: int, kept: list[int]) -> None:
    # A step t of the abandoned episode stays sampleable exactly when t + n <= newest step.
    buf = make(n_step=n_step)
    feed(buf, None, length)
    assert buf.abandon_episode().tolist() == [length - 1]
    assert buf.sampleable_ids().tolist() == kept
    feed(buf, None, 2 * n_step + 1, start=100.0)  # a new episode, past the cut
    new = [length + i for i in range(n_step + 1)]
    assert buf.sampleable_ids().tolist() == kept + new
    assert buf.episode_begin([length]).tolist() == [length]
    assert buf.steps_to_episode_end([0, length]).tolist() == [length - 1, -1]


def test_n_step_1_the_newest_step_is_never_sampleable() -> None:
    buf = make(n_step=1)
    ref = reference(buf)
    feed(buf, ref, 3)
    assert buf.abandon_episode().tolist() == [2] and ref.abandon(0) == 2
    check(buf, ref)  # steps 0, 1: their next observation is stored
    feed(buf, ref, 3, start=10.0)
    check(buf, ref)  # step 2 would read step 3's obs (another episode): never sampleable
    assert 2 not in buf.sampleable_ids().tolist()
    assert buf.get_episode(2).next_known.tolist() == [True, True, False]


@pytest.mark.parametrize("stack", [1, 2, 3])
def test_windows_and_stacks_match_the_reference(stack: int) -> None:
    buf = make(48, num_envs=2, n_step=3, frame_stack=stack, gamma=0.5)
    ref = reference(buf)
    for rounds in range(3):
        feed(buf, ref, 5 + rounds, env=0, start=10.0 * rounds)
        feed(buf, ref, 2, env=1, start=10.0 * rounds + 5)
        assert buf.abandon_episode(env_id=0).tolist() == [ref.abandon(0) * 2]
        check(buf, ref)
    feed(buf, ref, 30, env=0, start=50.0)  # wraps env 0's ring of 24 over the cuts
    check(buf, ref)


def test_no_op_when_no_episode_runs() -> None:
    buf = make(n_step=2, num_envs=2)
    assert buf.abandon_episode(env_id=1).tolist() == []  # nothing added yet
    feed(buf, None, 3)
    buf.end_episode(env_id=0, next_obs=np.float32(9))
    before = buf.sampleable_ids().tolist()
    assert buf.abandon_episode(env_id=0).tolist() == []  # the newest step ends its episode
    assert buf.sampleable_ids().tolist() == before
    feed(buf, None, 3)
    assert buf.abandon_episode(env_id=0).tolist() == [10]
    assert buf.abandon_episode(env_id=0).tolist() == []  # abandoned already
    with pytest.raises(rr.InvalidIdError, match="already ends its episode"):
        buf.end_episode(env_id=0, next_obs=np.float32(9))


def test_refused_env_changes_nothing() -> None:
    buf = make(n_step=1)
    feed(buf, None, 3)
    for bad in (1, -1, 0.5):
        with pytest.raises(rr.InvalidIdError, match="env_id"):
            buf.abandon_episode(env_id=bad)
    assert buf.sampleable_ids().tolist() == [0, 1]
    assert buf.steps_to_episode_end([2]).tolist() == [-1]


def test_cleared_running_episode_is_still_abandoned() -> None:
    buf = make(n_step=1)
    feed(buf, None, 3)
    buf.clear()
    assert buf.abandon_episode().tolist() == [2]  # no longer stored, but it ran
    feed(buf, None, 2, start=5.0)
    assert buf.episode_begin([3]).tolist() == [3]
    assert buf.sampleable_ids().tolist() == [3]


def test_uniform_draws_never_hit_the_holes() -> None:
    buf = make(64, n_step=3)
    ref = reference(buf)
    for k in range(4):
        feed(buf, ref, 4 + k, start=10.0 * k)
        ref.abandon(0)
        buf.abandon_episode()
    feed(buf, ref, 6, start=90.0)
    valid = set(ref.sampleable_ids())
    ids = buf.sample(20000).ids
    counts = np.bincount(ids, minlength=max(valid) + 1)
    assert set(np.flatnonzero(counts).tolist()) == valid
    expected = 20000 / len(valid)  # uniform over the valid steps: within 5 sigma each
    assert np.all(np.abs(counts[sorted(valid)] - expected) < 5 * np.sqrt(expected))
    distinct = buf.sample(len(valid), replacement=False).ids
    assert sorted(distinct.tolist()) == sorted(valid)
    recent = buf.sample(500, recent_ratio=1.0, recent_steps=4).ids
    assert set(recent.tolist()) == set(sorted(valid)[-4:])
    assert_batch_matches(buf.sample(64), ref)


def test_fast_path_resumes_once_the_holes_are_overwritten() -> None:
    buf = make(8, n_step=2)
    feed(buf, None, 5)
    buf.abandon_episode()
    assert buf._index.has_cuts
    feed(buf, None, 12, start=10.0)  # the ring of 8 forgets the abandoned episode
    assert buf.sample(4).ids.shape == (4,)  # (pruned by the draw)
    assert not buf._index.has_cuts
    assert buf.sampleable_ids().tolist() == list(range(9, 15))


def test_prioritized_holes_have_no_mass_and_ignore_updates() -> None:
    buf = make(32, rr.PrioritizedReplayBuffer, n_step=2, alpha=1.0, eps=0.0)
    feed(buf, None, 5)
    buf.abandon_episode()  # steps 3 and 4: holes
    feed(buf, None, 4, start=10.0)
    assert buf.sampleable_ids().tolist() == [0, 1, 2, 5, 6]
    mass = buf.priority_mass()
    assert mass.sampleable == 5 and mass.total == pytest.approx(5.0)
    assert buf.update_priorities([3, 4, 0], [50.0, 50.0, 2.0]) == 2  # ignored like stale ids
    assert buf.max_priority == pytest.approx(2.0)
    assert buf.priority_mass().total == pytest.approx(6.0)
    assert set(buf.sample(4000).ids.tolist()) == {0, 1, 2, 5, 6}
    starts = buf.sample_sequences(200, 2, pad=False).ids
    assert set(starts.tolist()) <= {0, 1, 2, 5, 6}


def test_sequences_never_cross_the_cut() -> None:
    buf = make(32, n_step=1)
    feed(buf, None, 4)
    buf.abandon_episode()
    feed(buf, None, 4, start=10.0)
    batch = buf.sample_sequences(300, 6)
    for row in range(300):
        t0, real = int(batch.ids[row]), int(batch.mask[row].sum())
        assert (t0 <= 3) == (t0 + real - 1 <= 3)  # inside one episode
        if t0 <= 3:
            assert real == 4 - t0 and not batch.next_known[row, real - 1]
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_sequences(4, 5, pad=False)
    across = buf.sample_sequences(100, 6, within_episode=False, pad=False)
    assert set(across.ids.tolist()) <= {0, 1, 2}  # (the runs cross it as any episode end)


def test_episodic_returns_recorded_at_the_cut() -> None:
    buf = make(16, n_step=1, gamma=0.5, record_episodic_return=True, default_return=-7.0)
    feed(buf, None, 3)

    def returns() -> list[float]:
        g = buf.gather_all()
        out: list[float] = g.discounted_return[0][g.mask[0]].tolist()
        return out

    assert returns() == [-7.0, -7.0, -7.0]
    buf.abandon_episode()
    assert returns() == [1.75, 1.5, 1.0]
    with pytest.raises(rr.EmptyBufferError):
        buf.sample_episodes(1)  # ended, but without a final step: not a complete episode


def test_checkpoint_keeps_the_cut(tmp_path: Path) -> None:
    buf = make(16, num_envs=2, n_step=2, frame_stack=2)
    ref = reference(buf)
    feed(buf, ref, 4, env=0)
    feed(buf, ref, 3, env=1)
    ref.abandon(0)
    buf.abandon_episode(env_id=0)
    buf.save(tmp_path / "ckpt")
    loaded = rr.load(tmp_path / "ckpt")
    check(loaded, ref)
    assert loaded.abandon_episode(env_id=0).tolist() == []
    assert loaded.abandon_episode(env_id=1).tolist() == [ref.abandon(1) * 2 + 1]
    feed(loaded, ref, 4, env=0, start=20.0)
    feed(loaded, ref, 4, env=1, start=30.0)
    check(loaded, ref)
    state = buf.state_dict()
    other = make(16, num_envs=2, n_step=2, frame_stack=2)
    other.load_state_dict(state)
    assert other.sampleable_ids().tolist() == buf.sampleable_ids().tolist()


def test_fifo_dequeue_across_the_cut() -> None:
    buf = make(8, n_step=2)
    ref = reference(buf)
    feed(buf, ref, 4)
    ref.abandon(0)
    buf.abandon_episode()
    feed(buf, ref, 3, start=10.0)
    for n, left in ((1, [1, 4]), (2, [4]), (2, [])):  # 2, 3: holes; 5, 6: windows unknown
        out = buf.dequeue(n, env_ids=[0])
        lo = ref.oldest_stored(0)
        assert out.ids[0].tolist() == list(range(lo, lo + n))
        ref.cleared_at[0] = lo + n
        check(buf, ref)
        assert buf.sampleable_ids().tolist() == left
    feed(buf, ref, 1, start=20.0)
    check(buf, ref)


def test_loaded_tables_with_a_bad_abandon_mark_are_refused() -> None:
    buf = make(16, n_step=1)
    feed(buf, None, 4)
    buf.abandon_episode()
    feed(buf, None, 2, start=10.0)
    index = buf._index
    index.check_loaded()  # consistent
    arrays = index.state_arrays()
    meta, env = arrays["slot_meta"], arrays["env"]
    meta[3, FINAL_FID] = -1  # the mark is gone: step 3 no longer ends the episode of 4..5
    with pytest.raises(rr.CheckpointError, match="newest stored step that ends"):
        index.check_loaded()
    meta[3, FINAL_FID] = ABANDONED
    env[0, LAST_END] = 4
    with pytest.raises(rr.CheckpointError, match="newest stored step that ends"):
        index.check_loaded()
    env[0, LAST_END] = 3
    meta[3, FINAL_FID] = -3
    with pytest.raises(rr.CheckpointError, match="final record"):
        index.check_loaded()
    meta[3, FINAL_FID] = ABANDONED
    index.check_loaded()


def test_shared_storage_owner_envs_only() -> None:
    buf = make(16, num_envs=2, n_step=1, storage="shared")
    try:
        feed(buf, None, 3, env=0)
        buf.share([1])  # env 1 now belongs to writer processes (which cannot abandon)
        with pytest.raises(rr.ConfigError, match="writer processes"):
            buf.abandon_episode(env_id=1)
        assert buf.abandon_episode(env_id=0).tolist() == [4]
        feed(buf, None, 2, env=0, start=10.0)
        assert buf.sampleable_ids().tolist() == [0, 2, 6]
    finally:
        buf.close()


def test_rare_holes_keep_the_one_kernel_path_exact() -> None:
    # One hole of 1 step among 4000: the one-kernel draw redraws the few batches that hit it.
    buf = make(4096, n_step=1)
    feed(buf, None, 2000)
    buf.abandon_episode()  # step 1999: never sampleable
    feed(buf, None, 2001, start=5000.0)
    assert buf._index.fast_draws_ok(64)
    ids = np.concatenate([buf.sample(64).ids for _ in range(400)])
    assert 1999 not in ids.tolist() and ids.max() == 3999 and ids.min() >= 0
    counts = np.bincount(ids // 400, minlength=10)  # ten bins of 400 steps (one holds the hole)
    expected = ids.shape[0] * np.array([400] * 4 + [399] + [400] * 5) / 3999
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
