"""ALF front-end: get_field, episodic queries and returns, clear and state."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.compat.alf import (
    ReplayBuffer,
    TensorSpec,
)
from tests.compat.test_alf import (
    LEAVES,
    SPEC,
    Driver,
    leaf,
    prioritized,
    starts_of,
)


# =========================================================================== get_field
def test_get_field_paths_nests_and_broadcasting() -> None:
    d = Driver(num_envs=2, max_length=6)
    d.run(5)
    env = torch.tensor([0, 1])
    pos = torch.tensor([[1], [3]])  # broadcast to (2, 2)
    obs = d.rb.get_field("observation.obs", env, pos)
    assert obs.shape == (2, 2, 2)
    assert obs[1, 0].tolist() == [0.0, 3.0] and obs[0, 1].tolist() == [1.0, 1.0]
    sub = d.rb.get_field("observation", env, torch.tensor([2, 4]))
    assert set(sub) == {"obs", "image"} and sub["image"].dtype == torch.uint8
    assert sub["image"][:, 0].tolist() == [2, 4]
    named = d.rb.get_field({"r": "reward", "s": ["step_type", "env_id"]}, env, torch.tensor(2))
    assert named["r"].tolist() == [d.value(0, 2, "reward"), d.value(1, 2, "reward")]
    assert named["s"][1].tolist() == [0, 1]


def test_get_field_errors() -> None:
    d = Driver(num_envs=1, max_length=3)
    d.run(5)
    with pytest.raises(KeyError, match="nope"):
        d.rb.get_field("observation.nope", torch.tensor([0]), torch.tensor([3]))
    with pytest.raises(rr.InvalidIdError, match="overwritten"):
        d.rb.get_field("reward", torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(rr.InvalidIdError):
        d.rb.get_field("reward", torch.tensor([0]), torch.tensor([5]))
    with pytest.raises(rr.InvalidIdError):
        d.rb.get_field("reward", torch.tensor([3]), torch.tensor([4]))


# =========================================================================== episodic queries
def test_steps_to_episode_end_and_episode_begin() -> None:
    d = Driver(num_envs=2, max_length=9)
    d.run(14, episode_len=4)  # env 0: episodes of 4 steps, env 1: of 5 steps
    for e in range(2):
        pos = torch.tensor(list(d.stored(e)))
        env = torch.full_like(pos, e)
        got = d.rb.steps_to_episode_end(pos, env).tolist()
        assert got == [d.steps_to_end(e, p) for p in d.stored(e)]
        begin = d.rb.get_episode_begin_position(pos, env).tolist()
        assert begin == [d.episode_begin(e, p) for p in d.stored(e)]
    # A begin may be overwritten already: env 0 stores 5..13, its episode from 4 is cut.
    assert d.rb.get_episode_begin_position(torch.tensor([5]), torch.tensor([0])).tolist() == [4]
    # The running episode (from 12) ends, for now, at the newest step.
    assert d.rb.steps_to_episode_end(torch.tensor([12, 13]), torch.tensor(0)).tolist() == [1, 0]


def test_get_disc_0_begin_position() -> None:
    d = Driver(num_envs=1, max_length=12)
    d.run(2)
    d.add(last=[0])  # terminal: discount 0 at 2
    d.run(2)
    d.add(last=[0], timelimit=[0])  # time limit at 5: discount 1, the segment goes on
    d.run(3)
    pos = torch.tensor(list(d.stored(0)))
    got = d.rb.get_disc_0_begin_position(pos, torch.tensor(0)).tolist()
    assert got == [d.disc0_begin(0, p) for p in d.stored(0)]
    assert got == [0, 0, 0, 3, 3, 3, 3, 3, 3]
    no_discount = ReplayBuffer({"step_type": TensorSpec((), torch.int32)}, 1,
                               keep_episodic_info=True)  # fmt: skip
    with pytest.raises(KeyError, match="discount"):
        no_discount.get_disc_0_begin_position(torch.tensor([0]), torch.tensor([0]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.booleans(), st.booleans(), st.integers(0, 3)),
        max_size=40,
    )
)
def test_episodic_queries_against_reference(ops: list[tuple[int, bool, bool, int]]) -> None:
    """Random steps of random envs (some LAST, some time limits, some FIRST after a MID)."""
    d = Driver(num_envs=3, max_length=5, record_episodic_return=True, gamma=0.5)
    for env, last, timeout, first in ops:
        d.add(
            envs=[env],
            last=[env] if last else [],
            timelimit=[env] if timeout else [],
            first=[env] if first == 0 else [],
        )
    for e in range(3):
        if not d.stored(e):
            continue
        pos = torch.tensor(list(d.stored(e)))
        env = torch.full_like(pos, e)
        assert d.rb.steps_to_episode_end(pos, env).tolist() == [
            d.steps_to_end(e, p) for p in d.stored(e)
        ]
        assert d.rb.get_episode_begin_position(pos, env).tolist() == [
            d.episode_begin(e, p) for p in d.stored(e)
        ]
        assert d.rb.get_disc_0_begin_position(pos, env).tolist() == [
            d.disc0_begin(e, p) for p in d.stored(e)
        ]
        for path in LEAVES:
            got = d.rb.get_field(path, env, pos).numpy()
            np.testing.assert_array_equal(got, [d.value(e, p, path) for p in d.stored(e)])
    sizes = {len(d.stored(e)) for e in range(3)}
    if len(sizes) == 1:
        data, info = d.rb.gather_all()
        d.check_rows(data, info.env_ids, info.positions, sizes.pop())
        want = [[d.ret(e, p, 0.5) for p in d.stored(e)] for e in range(3)]
        np.testing.assert_array_equal(info.discounted_return.numpy(), np.array(want, np.float32))


# =========================================================================== episodic returns
def test_record_episodic_return_in_get_batch_and_gather_all() -> None:
    torch.manual_seed(12)
    d = Driver(num_envs=2, max_length=12, record_episodic_return=True, gamma=0.5,
               reward_clip=(0.0, 1.0), default_return=-7.0, with_replacement=True)  # fmt: skip
    d.run(11, episode_len=4)
    _, info = d.rb.gather_all()
    want = [[d.ret(e, p, 0.5, (0.0, 1.0), -7.0) for p in d.stored(e)] for e in range(2)]
    np.testing.assert_array_equal(info.discounted_return.numpy(), np.array(want, np.float32))
    assert info.discounted_return.dtype == torch.float32
    assert -7.0 in want[0] and 0.0 in want[0]  # running episodes and LAST steps both appear
    for _ in range(5):
        _, info = d.rb.get_batch(6, 3)
        assert info.discounted_return.shape == (6, 3)
        for i, (e, p) in enumerate(starts_of(info)):
            row = [d.ret(e, p + j, 0.5, (0.0, 1.0), -7.0) for j in range(3)]
            np.testing.assert_array_equal(info.discounted_return[i].numpy(), row)


def test_record_episodic_return_example_values() -> None:
    """Rewards 0, 0.5, 1, 1.5 at positions 0..3 with LAST at 3, gamma 0.5."""
    d = Driver(num_envs=1, max_length=8, record_episodic_return=True, gamma=0.5)
    d.run(3)
    d.add(last=[0])
    d.add()
    _, info = d.rb.gather_all()
    # G_0 = 0.5 + 0.5 * 1 + 0.25 * 1.5; G_1 = 1 + 0.5 * 1.5; G_2 = 1.5; LAST: 0; running: default
    assert info.discounted_return.tolist() == [[1.375, 1.75, 1.5, 0.0, -1000.0]]


def test_record_episodic_return_needs_a_scalar_reward() -> None:
    spec = {"step_type": TensorSpec((), torch.int32), "reward": TensorSpec((2,))}
    with pytest.raises(rr.ConfigError, match="scalar reward"):
        ReplayBuffer(spec, 1, record_episodic_return=True)


# =========================================================================== clear, state
def test_clear_all_or_some_envs() -> None:
    d = Driver(num_envs=2, max_length=6)
    d.run(3)
    d.rb.clear(env_ids=torch.tensor([1]))
    assert d.rb.total_size.item() == 3
    d.rb.clear()
    assert d.rb.total_size.item() == 0
    d.run(1)  # positions keep counting
    _, info = d.rb.gather_all()
    assert info.positions.tolist() == [3, 3]


def test_state_dict_round_trip_with_enable_checkpoint() -> None:
    torch.manual_seed(13)
    d = prioritized(num_envs=2, max_length=6, enable_checkpoint=True,
                    record_episodic_return=True)  # fmt: skip
    d.run(9, episode_len=3)
    d.rb.update_priority(torch.tensor([0, 1]), torch.tensor([4, 5]), torch.tensor([3.0, 0.5]))
    state = d.rb.state_dict()
    twin = ReplayBuffer(SPEC, 2, max_length=6, prioritized_sampling=True,
                        enable_checkpoint=True, record_episodic_return=True)  # fmt: skip
    twin.load_state_dict(state)
    for _ in range(3):
        a, ia = d.rb.get_batch(5, 2)
        b, ib = twin.get_batch(5, 2)
        assert starts_of(ia) == starts_of(ib)
        assert torch.equal(ia.importance_weights, ib.importance_weights)
        assert torch.equal(leaf(a, "observation.obs"), leaf(b, "observation.obs"))
    assert twin.initial_priority.item() == 3.0
    pos = torch.tensor([5, 6, 7, 8])
    assert torch.equal(twin.get_disc_0_begin_position(pos, torch.tensor(0)),
                       d.rb.get_disc_0_begin_position(pos, torch.tensor(0)))  # fmt: skip
    off = ReplayBuffer(SPEC, 2, max_length=6)
    assert off.state_dict()["_extra_state"] == {}


# =========================================================================== FIRST steps
def test_a_first_after_a_mid_begins_a_new_episode_as_alfs_index() -> None:
    """Seed (add_batch): "We build an index of episode beginning indices for each element in
    the buffer. The beginning point stores where episode end is." A FIRST is a beginning
    whatever came before it; the episode it interrupts ends at the step before it and, never
    having completed, keeps default_return ("When episodes are incomplete, all steps get the
    default_return")."""
    d = Driver(num_envs=1, max_length=16, record_episodic_return=True, gamma=0.5)
    d.add()  # 0 FIRST
    d.add()  # 1 MID
    d.add()  # 2 MID
    d.add(first=[0])  # 3 FIRST after a MID
    d.add()  # 4 MID
    d.add(last=[0])  # 5 LAST
    d.add()  # 6 FIRST
    d.add()  # 7 MID
    kinds = [int(h["step_type"]) for h in d.hist[0]]
    assert kinds == [0, 1, 1, 0, 1, 2, 0, 1]
    pos, env = torch.arange(8), torch.zeros(8, dtype=torch.int64)
    assert d.rb.get_episode_begin_position(pos, env).tolist() == [0, 0, 0, 3, 3, 3, 6, 6]
    assert d.rb.steps_to_episode_end(pos, env).tolist() == [2, 1, 0, 2, 1, 0, 1, 0]
    _, info = d.rb.gather_all()
    r4, r5 = float(d.value(0, 4, "reward")), float(d.value(0, 5, "reward"))
    want = [-1000.0] * 3 + [r4 + 0.5 * r5, r5, 0.0] + [-1000.0] * 2
    np.testing.assert_allclose(info.discounted_return[0].numpy(), want)
    _, info = d.rb.get_batch(batch_size=8, batch_length=2)
    for p, ret in zip(info.positions.tolist(), info.discounted_return.tolist(), strict=True):
        assert ret == pytest.approx(want[p : p + 2])


def test_a_first_into_an_emptied_env_begins_a_new_episode() -> None:
    """After dequeue took every step of a running episode, a FIRST still begins a new one."""
    d = Driver(num_envs=1, max_length=8)
    d.add()  # 0 FIRST
    d.add()  # 1 MID: the episode is still running
    d.rb.dequeue(n=2)
    d.add(first=[0])  # 2 FIRST
    d.add()  # 3 MID
    pos, env = torch.tensor([2, 3]), torch.zeros(2, dtype=torch.int64)
    assert d.rb.get_episode_begin_position(pos, env).tolist() == [2, 2]
    assert d.rb.steps_to_episode_end(pos, env).tolist() == [1, 0]
    state = d.rb.state_dict()
    assert d.rb.get_extra_state() == {}  # enable_checkpoint=False carries nothing
    assert "_extra_state" in state


def test_first_bookkeeping_survives_a_checkpoint() -> None:
    kw: dict[str, Any] = {"record_episodic_return": True, "enable_checkpoint": True}
    d = Driver(num_envs=1, max_length=8, **kw)
    d.add()
    d.add()
    d.rb.dequeue(n=2)
    d.add(first=[0])  # 2 FIRST into an empty env
    d.add()  # 3 MID
    d.add(first=[0])  # 4 FIRST after a MID: 2..3 are an incomplete episode
    d.add(last=[0])  # 5 LAST
    copy = ReplayBuffer(SPEC, 1, max_length=8, keep_episodic_info=True, **kw)
    copy.load_state_dict(d.rb.state_dict())
    pos, env = torch.arange(2, 6), torch.zeros(4, dtype=torch.int64)
    for rb in (d.rb, copy):
        assert rb.get_episode_begin_position(pos, env).tolist() == [2, 2, 4, 4]
        _, info = rb.gather_all()
        r5 = float(d.value(0, 5, "reward"))
        np.testing.assert_allclose(info.discounted_return[0].numpy(), [-1000, -1000, r5, 0])


# =========================================================================== LAST then MID
def _stream(kinds: str, max_length: int = 16, **kw: Any) -> ReplayBuffer:
    """One env; step ``t`` has kind ``kinds[t]`` (F/M/L), reward ``t + 1``, discount 0 at L."""
    from rlreplay.compat.alf import StepType

    spec = {"step_type": TensorSpec((), torch.int32), "reward": TensorSpec(()),
            "discount": TensorSpec(())}  # fmt: skip
    rb = ReplayBuffer(spec, 1, max_length=max_length, keep_episodic_info=True, **kw)
    code = {"F": StepType.FIRST, "M": StepType.MID, "L": StepType.LAST}
    for t, k in enumerate(kinds):
        rb.add_batch({
            "step_type": torch.tensor([int(code[k])], dtype=torch.int32),
            "reward": torch.tensor([t + 1.0]),
            "discount": torch.tensor([0.0 if k == "L" else 1.0]),
        })  # fmt: skip
    return rb


def alf_return(kinds: str, t: int, gamma: float, default: float = -1000.0) -> float:
    """Seed: returns are computed "for every step in the episode upon episode completion",
    at each LAST, over the episode from its FIRST (ALF's index: episodes begin at FIRST
    only). A step's return runs to the newest LAST of its episode at or after it."""
    nxt = kinds.find("F", t + 1)
    end = len(kinds) - 1 if nxt < 0 else nxt - 1
    lasts = [j for j in range(t, end + 1) if kinds[j] == "L"]
    if not lasts:
        return default
    return sum(gamma ** (k - t - 1) * (k + 1) for k in range(t + 1, lasts[-1] + 1))


@pytest.mark.parametrize("kinds", ["FML", "FMLM", "FMLMM", "FMLMML", "FMLMMLFM", "FLLLM",
                                   "FMLMFML", "FMLLMLM"])  # fmt: skip
def test_last_then_mid_continues_alfs_episode(kinds: str) -> None:
    """ALF begins episodes only at FIRST ("an index of episode beginning indices for each
    element"; "the beginning point stores where episode end is"): after LAST, MID the
    episode goes on, its begin stays the old FIRST and its end is its newest step."""
    rb = _stream(kinds, record_episodic_return=True, gamma=0.5)
    T = len(kinds)
    pos, env = torch.arange(T), torch.zeros(T, dtype=torch.int64)
    begins = [kinds.rfind("F", 0, t + 1) for t in range(T)]
    assert rb.get_episode_begin_position(pos, env).tolist() == begins
    ends = [(T if kinds.find("F", t + 1) < 0 else kinds.find("F", t + 1)) - 1 for t in range(T)]
    assert rb.steps_to_episode_end(pos, env).tolist() == [e - t for t, e in enumerate(ends)]
    _, info = rb.gather_all()
    want = [alf_return(kinds, t, 0.5) for t in range(T)]
    np.testing.assert_array_equal(info.discounted_return.numpy()[0], np.float32(want))
    if T >= 2:
        torch.manual_seed(0)
        _, info = rb.get_batch(8, 2)
        rows = info.positions.numpy()[:, None] + np.arange(2)
        np.testing.assert_array_equal(info.discounted_return.numpy(), np.float32(want)[rows])


def test_joined_episodes_survive_a_checkpoint() -> None:
    rb = _stream("FMLMM", record_episodic_return=True, gamma=0.5, enable_checkpoint=True)
    copy = _stream("", record_episodic_return=True, gamma=0.5, enable_checkpoint=True)
    copy.load_state_dict(rb.state_dict())
    pos, env = torch.arange(5), torch.zeros(5, dtype=torch.int64)
    assert copy.get_episode_begin_position(pos, env).tolist() == [0] * 5
    assert copy.steps_to_episode_end(pos, env).tolist() == [4, 3, 2, 1, 0]


@settings(max_examples=60, deadline=None)
@given(st.text("FML", max_size=24), st.sampled_from([1, 2, 3, 5, 32]))
def test_first_based_episodes_against_alfs_index(rest: str, max_length: int) -> None:
    """Random FIRST/MID/LAST streams (LAST then MID or LAST included), rings that wrap:
    begins, ends and returns of the stored steps are those of ALF's FIRST-based index."""
    kinds = "F" + rest
    rb = _stream(kinds, max_length, record_episodic_return=True, gamma=0.5)
    T = len(kinds)
    stored = list(range(max(0, T - max_length), T))
    pos, env = torch.tensor(stored), torch.zeros(len(stored), dtype=torch.int64)
    assert rb.get_episode_begin_position(pos, env).tolist() == [
        kinds.rfind("F", 0, t + 1) for t in stored
    ]
    nxt = [kinds.find("F", t + 1) for t in stored]
    assert rb.steps_to_episode_end(pos, env).tolist() == [
        (T if n < 0 else n) - 1 - t for t, n in zip(stored, nxt, strict=True)
    ]
    _, info = rb.gather_all()
    want = np.float32([alf_return(kinds, t, 0.5) for t in stored])
    np.testing.assert_array_equal(info.discounted_return.numpy()[0], want)
