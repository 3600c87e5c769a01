"""Pickling and copying buffers (rlreplay.buffer.copying): by value, independent, same future.

A copy (``pickle`` round trip, ``copy.deepcopy``, ``copy.copy``) must hold what the original
holds (steps, episodes with abandoned-episode cuts, priorities, counters, RNG state,
configuration) and then behave exactly as the original does under the same further calls,
while the two stay independent. Refused kinds (``storage="shared"``, closed buffers, transforms
that cannot be pickled) raise and leave the buffer usable.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.buffer.copying import __doc__ as COPY_DOC

Array = np.ndarray[Any, Any]

FIELDS = {
    "obs": rr.Field((3,), np.uint8),
    "action": rr.Field((), np.int64),
    "goal": rr.Field((2,), np.float32, observation=True),
}
E = 2


def negate_reward(batch: rr.Batch) -> rr.Batch:
    """A module-level transform: pickles by reference."""
    return batch.replace(reward=-batch.reward)


KINDS: dict[str, dict[str, Any]] = {
    "uniform": {},
    "nstep_stack": {"n_step": 3, "frame_stack": 2, "stack_pad": "first"},
    "returns_next": {"record_episodic_return": True, "next_fields": ["action"]},
    "recent_noreplace": {"recent_ratio": 0.5, "recent_steps": 4, "replacement": False},
    "transform": {"transforms": [negate_reward]},
    "limiter": {"rate_limiter": rr.SampleToInsertRatio(2.0, 4, 1e6)},
    "proportional": {"prioritized": True, "n_step": 2, "beta_steps": 10},
    "rank_based": {"prioritized": True, "variant": "rank_based", "sort_interval": 3},
    "prio_clip": {"prioritized": True, "priority_clip": (0.1, 5.0), "stratified": False},
}


def make(kind: str, **extra: Any) -> rr.ReplayBuffer:
    kw = {"num_envs": E, "gamma": 0.9, "seed": 5, **copy.deepcopy(KINDS[kind]), **extra}
    cls = rr.PrioritizedReplayBuffer if kw.pop("prioritized", False) else rr.ReplayBuffer
    return cls(48, FIELDS, **kw)


def step(buf: rr.ReplayBuffer, t: int) -> None:
    obs = np.array([[t, t + 1, t + 2], [2 * t, 1, 0]], np.uint8)
    goal = np.array([[t, -t], [t, 0.5]], np.float32)
    buf.add(
        obs=obs,
        action=np.array([t, -t]),
        reward=np.array([t % 3, 1.0]),
        terminated=np.array([t % 7 == 6, False]),
        truncated=np.array([False, t % 5 == 4]),
        next_obs=obs + 1,
        next_goal=goal * 2,
        goal=goal,
    )


def fill(buf: rr.ReplayBuffer, steps: int = 60) -> None:
    """Past capacity, an abandoned episode, samples and (prioritized) priority updates."""
    for t in range(steps):
        step(buf, t)
        if t == 40:
            buf.abandon_episode(1)
        if t % 9 == 8:
            drawn = buf.sample(4)
            if isinstance(buf, rr.PrioritizedReplayBuffer):
                buf.update_priorities(drawn.ids, np.arange(1.0, 5.0) * (t % 4 + 1))


def same(a: Any, b: Any, what: str = "") -> None:
    if isinstance(a, rr.Batch):
        assert isinstance(b, rr.Batch) and list(a) == list(b), what
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what} {name}")
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def future(buf: rr.ReplayBuffer, t0: int = 60, steps: int = 25) -> list[Any]:
    """What the buffer gives under the same further calls (writes, draws, queries)."""
    out: list[Any] = [len(buf), buf.num_sampleable, buf.sampleable_ids()]
    for t in range(t0, t0 + steps):
        step(buf, t)
        drawn = buf.sample(5)
        out.append(drawn)
        if isinstance(buf, rr.PrioritizedReplayBuffer):
            out.append(buf.get_priorities(drawn.ids))
            buf.update_priorities(drawn.ids, np.full(5, 0.5 + t % 3))
            out.append(buf.beta)
        if t % 6 == 0:
            out.append(buf.sample_sequences(3, 4))
    out += [buf.rng.bit_generator.state["state"], buf.state_dict()["meta"]]
    return out


def same_future(a: rr.ReplayBuffer, b: rr.ReplayBuffer) -> None:
    fa, fb = future(a), future(b)
    assert len(fa) == len(fb)
    for i, (x, y) in enumerate(zip(fa, fb, strict=True)):
        if isinstance(x, dict):
            assert x == y, i
        else:
            same(x, y, f"item {i}")


def pickled(buf: rr.ReplayBuffer, protocol: int = pickle.HIGHEST_PROTOCOL) -> Any:
    return pickle.loads(pickle.dumps(buf, protocol))


COPIERS: dict[str, Callable[[rr.ReplayBuffer], Any]] = {
    "pickle2": lambda b: pickled(b, 2),
    "pickle5": lambda b: pickled(b, 5),
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
}


def same_state(a: rr.ReplayBuffer, b: rr.ReplayBuffer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert type(a) is type(b)
    assert sa["config"] == sb["config"] and sa["meta"] == sb["meta"]
    assert sa["arrays"].keys() == sb["arrays"].keys()
    for name in sa["arrays"]:
        np.testing.assert_array_equal(sa["arrays"][name], sb["arrays"][name], err_msg=name)


@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_copy_holds_the_state_and_continues_as_the_original(kind: str, how: str) -> None:
    original = make(kind)
    fill(original)
    twin = COPIERS[how](original)
    assert twin is not original and twin._lock is not original._lock
    same_state(original, twin)
    assert twin.transforms == original.transforms
    same_future(original, twin)


def test_copies_are_independent() -> None:
    original = make("proportional")
    assert isinstance(original, rr.PrioritizedReplayBuffer)
    fill(original)
    before = original.state_dict()
    twin = copy.deepcopy(original)
    for t in range(60, 80):  # writes, draws and updates on the copy only
        step(twin, t)
        twin.update_priorities(twin.sample(4).ids, np.full(4, 9.0))
    twin.abandon_episode(0)
    twin.clear()
    after = original.state_dict()
    assert before["meta"] == after["meta"]
    for name, arr in before["arrays"].items():
        np.testing.assert_array_equal(arr, after["arrays"][name], err_msg=name)
    twin.close()  # closing the copy leaves the original open
    assert original.sample(3).obs.shape == (3, 3)


def test_abandoned_episode_cut_survives_a_copy() -> None:
    buf = make("nstep_stack")
    for t in range(18):
        step(buf, t)
    cut = buf.abandon_episode(1)
    twin = pickled(buf)
    assert cut.shape == (1,) and int(cut[0]) not in set(twin.sampleable_ids().tolist())
    same(buf.sampleable_ids(), twin.sampleable_ids())
    for b in (buf, twin):  # the next step starts a new episode on both
        step(b, 18)
    same(buf.get_episode(int(cut[0])).obs, twin.get_episode(int(cut[0])).obs)
    new = int(cut[0]) + E
    assert twin.episode_begin(new) == buf.episode_begin(new) == new


def test_rate_limiter_travels_as_its_own_copy() -> None:
    original = make("limiter")
    fill(original)
    twin = pickled(original)
    mine, theirs = original.rate_limiter, twin.rate_limiter
    assert mine is not None and theirs is not None and theirs is not mine
    assert theirs.state_dict() == mine.state_dict()
    step(twin, 60)  # counts for the copy only
    assert theirs.state_dict() != mine.state_dict()


def test_memmap_buffer_pickles_by_value_into_memory(tmp_path: Path) -> None:
    original = make("nstep_stack", storage="memmap", path=tmp_path / "mm")
    fill(original)
    files = sorted(p.name for p in (tmp_path / "mm").iterdir())
    for copier in (pickled, copy.deepcopy):
        twin = copier(original)
        assert twin._backend.kind == "memory"  # as np.memmap pickles: by value, in memory
        same_state(original, twin)
        step(twin, 60)
        twin.close()
    assert sorted(p.name for p in (tmp_path / "mm").iterdir()) == files
    reference = make("nstep_stack")
    fill(reference)
    same_future(reference, pickled(original))
    original.close()


class Refers:
    """A transform that keeps a (strong) reference to its buffer."""

    def __init__(self) -> None:
        self.buffer: rr.ReplayBuffer | None = None

    def bind(self, buffer: Any) -> None:
        self.buffer = buffer

    def __call__(self, batch: rr.Batch) -> rr.Batch:
        assert self.buffer is not None
        return batch.replace(reward=batch.reward + len(self.buffer))


@pytest.mark.parametrize("copier", [pickled, copy.deepcopy, copy.copy])
def test_bindable_transforms_are_bound_to_the_copy(copier: Callable[[Any], Any]) -> None:
    goal = rr.Field((2,), np.float32, observation=True)
    fields = {**FIELDS, "achieved_goal": goal, "desired_goal": goal}
    her = rr.HindsightRelabel(lambda ag, dg, info: np.zeros(len(ag), np.float32))
    refers = Refers()
    buf = rr.ReplayBuffer(48, fields, transforms=[refers], seed=1)
    twin = copier(buf)
    assert isinstance(twin.transforms[0], Refers) and twin.transforms[0].buffer is twin
    assert refers.buffer is buf
    if copier is not pickled:  # its reward_fn is a lambda: copied, never pickled
        buf_her = rr.ReplayBuffer(48, fields, transforms=[her], seed=1)
        twin_her = copier(buf_her)
        assert twin_her.transforms[0] is not her
        assert twin_her.transforms[0]._bound() is twin_her and her._bound() is buf_her


def test_shared_buffer_is_refused_and_stays_usable() -> None:
    buf = rr.ReplayBuffer(16, {"obs": rr.Field((2,), np.float32)}, storage="shared", seed=0)
    try:
        for copier in (pickled, copy.deepcopy, copy.copy):
            with pytest.raises(rr.ConfigError, match=r"share\(\).*attach"):
                copier(buf)
        buf.add(obs=np.ones(2, np.float32), reward=1.0, terminated=True, truncated=False,
                next_obs=np.zeros(2, np.float32))  # fmt: skip
        assert buf.sample(2).obs.shape == (2, 2)
    finally:
        buf.close()


def test_closed_buffer_is_refused() -> None:
    buf = make("uniform")
    fill(buf)
    buf.close()
    for copier in (pickled, copy.deepcopy, copy.copy):
        with pytest.raises(rr.ReplayClosed, match="closed"):
            copier(buf)


def test_unpicklable_transform_fails_as_pickle_does_and_leaves_the_buffer_usable() -> None:
    buf = make("uniform", transforms=[lambda b: b])
    fill(buf)
    before = buf.state_dict()
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(buf)
    assert buf.state_dict()["meta"] == before["meta"]
    twin = copy.deepcopy(buf)  # the copy module keeps functions as they are
    assert twin.transforms == buf.transforms
    same_future(buf, twin)


def test_the_documented_choices_are_in_the_module_docstring() -> None:
    assert COPY_DOC is not None
    for words in ("memmap", "shared", "rate_limiter", "transforms", "by value"):
        assert words in COPY_DOC


# ---------------------------------------------------------------------- random operations
OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "end", "abandon", "sample", "update", "dequeue"]),
        st.integers(0, 2**16),
    ),
    max_size=30,
)


def run_ops(buf: rr.ReplayBuffer, ops: list[tuple[str, int]], t0: int) -> list[Any]:
    """Apply ``ops``; return every result (or error type) they give."""
    out: list[Any] = []
    for i, (op, arg) in enumerate(ops):
        t = t0 + i
        try:
            if op == "add":
                step(buf, t)
            elif op == "end":
                final = {"next_obs": np.full(3, arg % 251, np.uint8), "next_goal": np.ones(2)}
                out.append(buf.end_episode(arg % E, **final))
            elif op == "abandon":
                out.append(buf.abandon_episode(arg % E))
            elif op == "sample":
                out.append(buf.sample(1 + arg % 4))
            elif op == "update" and isinstance(buf, rr.PrioritizedReplayBuffer):
                ids = buf.sample(2).ids
                out.append(buf.update_priorities(ids, np.array([arg % 7, 1.0 + arg % 3])))
            elif op == "dequeue":
                out.append(buf.dequeue(1 + arg % 2))
        except rr.ReplayError as exc:
            out.append(type(exc).__name__)
    out.append(buf.sampleable_ids())
    return out


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["uniform", "nstep_stack", "proportional", "rank_based"]),
    before=OPS,
    after=OPS,
    protocol=st.integers(2, pickle.HIGHEST_PROTOCOL),
)
def test_random_operations_then_pickle_give_the_same_results(
    kind: str, before: list[tuple[str, int]], after: list[tuple[str, int]], protocol: int
) -> None:
    buf = make(kind)
    run_ops(buf, before, 0)
    twin = pickle.loads(pickle.dumps(buf, protocol))
    results = run_ops(buf, after, len(before)), run_ops(twin, after, len(before))
    assert len(results[0]) == len(results[1])
    for x, y in zip(*results, strict=True):
        if isinstance(x, str | int):
            assert x == y
        else:
            same(x, y)
    same_state(buf, twin)
