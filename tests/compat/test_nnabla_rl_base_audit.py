"""The nnabla-rl base, replacement-sampling and trajectory buffers against nnabla-rl 0.16.0.

The reference is a transcription of nnabla-rl 0.16.0's code
(``tests/compat/_nnabla_rl_base_reference.py``). For a grid of arguments, ordinary and odd
(``num_samples`` 0, negative, ``True`` or ``2.0``; ``num_steps`` 0, negative or ``1.0``;
negative, float and out-of-range indices; ``portion_length`` 0 or negative), the front-end and
the reference, given generators seeded alike, must return equal results or raise (the
front-end's error being an instance of the reference's type), and leave their generators in
the same state (so the same draws are made, and made before a rejection where nnabla-rl makes
them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from rlreplay.compat.nnabla_rl._stored import StoredTuple
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import (
    DecorableReplayBuffer,
    HindsightReplayBuffer,
    MemoryEfficientAtariTrajectoryBuffer,
    ReplacementSamplingReplayBuffer,
    TrajectoryReplayBuffer,
)
from tests.compat import _nnabla_rl_base_reference as ref

SEED = 11


def experience(t: int) -> tuple[Any, ...]:
    s, s_next = np.full(2, t, np.float32), np.full(2, t + 1, np.float32)
    return (s, np.array([t % 3]), float(t), 1.0, s_next, {"t": t})


def plain(x: Any) -> Any:
    """Comparable form: arrays as (dtype, shape, values); lists and tuples keep their type.

    The columnar store's ``StoredTuple`` (a tuple comparing as the appended one) is a tuple.
    """
    if isinstance(x, list | tuple):
        kind = "tuple" if type(x) is StoredTuple else type(x).__name__
        return (kind, [plain(y) for y in x])
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, x.tolist())
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", plain(call()))
    except Exception as exc:  # the exception type is what is compared
        return ("err", type(exc))


def agree(pair: tuple[Any, Any], method: str, *args: Any) -> None:
    """Same result or same exception type, and the same generator state afterwards."""
    orig, front = pair
    label = f"{method}{args!r}"
    want = outcome(lambda: getattr(orig, method)(*args))
    got = outcome(lambda: getattr(front, method)(*args))
    if want[0] == "err":
        assert got[0] == "err" and issubclass(got[1], want[1]), (label, want, got)
    else:
        assert got == want, (label, want, got)
    assert orig._rng.bit_generator.state == front._rng.bit_generator.state, label


def pairs(make_ref: Any, make_ours: Any, capacity: int | None, n: int = 8) -> tuple[Any, Any]:
    orig = make_ref(capacity, np.random.default_rng(SEED))
    front = make_ours(capacity, seed=SEED)
    for t in range(n):
        orig.append(experience(t))
        front.append(experience(t))
    return orig, front


NUM_SAMPLES = [0, -1, 1, 3, 6, 7, 9, True, 2.0, np.int64(2)]
NUM_STEPS = [0, -1, 1, 2, 1.0, 2.0, 7, True]
INDICES: list[Any] = [[], [0], [5], [6], [-1], [-7], np.array([1, 2]), [1.0], [True], (0, 3)]


@pytest.mark.parametrize("capacity", [None, 6])
@pytest.mark.parametrize(
    ("make_ref", "make_ours"),
    [
        (ref.ReplayBuffer, ReplayBuffer),
        (ref.ReplacementSamplingReplayBuffer, ReplacementSamplingReplayBuffer),
    ],
)
def test_sample_and_sample_indices_as_nnabla_rl(
    make_ref: Any, make_ours: Any, capacity: int | None
) -> None:
    pair = pairs(make_ref, make_ours, capacity)
    for ns in NUM_SAMPLES:
        for st in NUM_STEPS:
            agree(pair, "sample", ns, st)
    for idx in INDICES:
        for st in (0, 1, 2, 1.0, -1):
            agree(pair, "sample_indices", idx, st)
    for item in (0, 5, 6, -1, -7, True, np.int64(1), 1.0, 7.5, slice(0, 2)):
        agree(pair, "__getitem__", item)


@pytest.mark.parametrize("capacity", [None, 0, 3])
def test_empty_buffers_as_nnabla_rl(capacity: int | None) -> None:
    for make_ref, make_ours in (
        (ref.ReplayBuffer, ReplayBuffer),
        (ref.ReplacementSamplingReplayBuffer, ReplacementSamplingReplayBuffer),
    ):
        pair = pairs(make_ref, make_ours, capacity, n=0)
        for ns in (0, 1, -1):
            for st in (1, 0, 2):
                agree(pair, "sample", ns, st)
        agree(pair, "append", 1)


def test_golden_edges() -> None:
    """The outcomes nnabla-rl's code gives, spelled out."""
    buffer = ReplayBuffer(capacity=10, seed=0)
    buffer.append_all([experience(t) for t in range(4)])
    with pytest.raises(ValueError, match="Indices are empty"):
        buffer.sample(num_samples=0)  # drng.choice(4, size=0) is empty
    with pytest.raises(ValueError):
        buffer.sample(num_samples=2, num_steps=1.0)  # type: ignore[arg-type]  # choice(4.0)
    experiences, info = buffer.sample_indices([3, 0], num_steps=1.0)  # type: ignore[arg-type]
    assert [e[5]["t"] for e in experiences] == [3, 0] and info["weights"].shape == (2, 1)
    with pytest.raises(TypeError):
        buffer.sample_indices([0], num_steps=2.0)  # type: ignore[arg-type]  # range(2.0)
    with pytest.raises(KeyError):
        buffer[7.5]  # type: ignore[index]  # the ring compares before it indexes
    replacement = ReplacementSamplingReplayBuffer(capacity=10, seed=0)
    replacement.append(experience(0))
    with pytest.raises(ValueError, match="cannot draw"):
        replacement.sample(num_samples=-1)


def test_a_subclass_may_override_random_indices() -> None:
    class Newest(ReplayBuffer):
        def _random_indices(self, num_samples: int, max_index: int | None = None) -> Any:
            assert max_index is not None
            return np.arange(max_index - num_samples, max_index)

    buffer = Newest(capacity=10)
    buffer.append_all([experience(t) for t in range(5)])
    experiences, _ = buffer.sample(num_samples=2, num_steps=2)
    assert isinstance(experiences, tuple)
    assert [e[5]["t"] for e in experiences[0]] == [2, 3] and [
        e[5]["t"] for e in experiences[1]
    ] == [3, 4]


def test_decorable_buffer_as_nnabla_rl() -> None:
    def decor(e: Any) -> Any:
        return (e, "decorated")

    class RefDecorable(ref.ReplayBuffer):  # nnabla-rl's DecorableReplayBuffer
        def __getitem__(self, item: Any) -> Any:
            return decor(self._buffer[item])

    for capacity in (None, 4):
        orig = RefDecorable(capacity, np.random.default_rng(SEED))
        front = DecorableReplayBuffer(capacity, decor, seed=SEED)
        for t in range(6):
            orig.append(experience(t))
            front.append(experience(t))
        pair = (orig, front)
        for ns, st in ((2, 1), (2, 2), (0, 1), (4, 1), (1, 0)):
            agree(pair, "sample", ns, st)
        for item in (0, -1, 3, 4, -5):
            agree(pair, "__getitem__", item)


def trajectory(kind: str, n: int, start: int) -> Any:
    if kind == "objects":
        return [start + t for t in range(n)]
    steps = [experience(start + t) for t in range(n)]
    return tuple(steps) if kind == "tuple" else steps


@pytest.mark.parametrize("capacity", [None, 5])
@pytest.mark.parametrize("kind", ["list", "tuple", "objects"])
def test_trajectory_buffer_as_nnabla_rl(kind: str, capacity: int | None) -> None:
    orig = ref.TrajectoryReplayBuffer(capacity, np.random.default_rng(SEED))
    front = TrajectoryReplayBuffer(capacity, seed=SEED)
    pair = (orig, front)
    for ns in (0, 1, -1):  # empty
        agree(pair, "sample_trajectories_portion", ns, 1)
        agree(pair, "sample_trajectories", ns)
    for n, s in ((3, 0), (5, 10), (1, 20)):
        orig.append_trajectory(trajectory(kind, n, s))
        front.append_trajectory(trajectory(kind, n, s))
    for ns in (0, -1, 1, 3, 4, True):
        for pl in (0, -1, -3, 1, 2, 5, 6, True):
            agree(pair, "sample_trajectories_portion", ns, pl)
        agree(pair, "sample_trajectories", ns)
        for st in (0, 1, 2):
            agree(pair, "sample", ns, st)
    for idx in ([], [0], [8], [9], [-1], [-3], [-4], [2, 3], np.array([0, 4])):
        for pl in (0, 1, 2, 3, 6):
            agree(pair, "sample_indices_portion", idx, pl)
        agree(pair, "sample_indices", idx)
        agree(pair, "sample_indices_trajectory", idx)
    for item in (0, 8, 9, -1, -3, -4):
        agree(pair, "__getitem__", item)


def test_trajectory_portion_golden_edges() -> None:
    """nnabla-rl slices ``trajectory[i : i + portion_length]`` whatever portion_length is."""
    buffer = TrajectoryReplayBuffer(seed=3)
    buffer.append_trajectory([experience(t) for t in range(4)])
    portions, info = buffer.sample_trajectories_portion(num_samples=0, portion_length=2)
    assert portions == () and info["weights"].shape == (0, 1)
    portions, _ = buffer.sample_trajectories_portion(num_samples=3, portion_length=0)
    assert portions == ([], [], [])
    portions, _ = buffer.sample_trajectories_portion(num_samples=50, portion_length=-2)
    # start i in [0, 6]: trajectory[0:-2] is steps 0, 1; [1:-1] steps 1, 2; from 2 on empty
    got = [[e[5]["t"] for e in p] for p in portions]
    assert all(g in ([0, 1], [1, 2], []) for g in got)
    assert {len(g) for g in got} == {0, 2}
    with pytest.raises(ValueError):
        buffer.sample_trajectories_portion(num_samples=-1)  # NumPy's negative size
    assert buffer[-1][5]["t"] == 3  # the first trajectory, from its end
    with pytest.raises(ValueError, match="out of range"):
        buffer[4]


def goal_experience(t: int, end: bool) -> tuple[Any, ...]:
    s = (np.full(3, t, np.float32), np.full(2, 9, np.float32), np.full(2, t, np.float32))
    s_next = (np.full(3, t + 1, np.float32), s[1], np.full(2, t + 1, np.float32))
    return (s, np.zeros(1, np.float32), 0.0, 0.0 if end else 1.0, s_next, {})


def test_hindsight_info_keys_as_nnabla_rl() -> None:
    """nnabla-rl shares one ``np.array([end])`` per episode and notes ``future_index``."""

    def reward(achieved: Any, goal: Any, info: Any) -> float:
        return -float(np.linalg.norm(achieved - goal))

    buffer = HindsightReplayBuffer(reward, hindsight_prob=1.0, capacity=20, seed=0)
    infos = []
    for t in range(7):
        e = goal_experience(t, end=t == 3)
        infos.append(e[5])
        buffer.append(e)
    ends = [info["episode_end_index"] for info in infos]
    assert all(isinstance(x, np.ndarray) and x.shape == (1,) for x in ends)
    assert ends[0] is ends[3] and ends[4] is ends[6] and ends[0] is not ends[4]
    assert ends[0].tolist() == [3] and ends[4].tolist() == [2]  # running: its newest so far
    experiences, _ = buffer.sample_indices([1, 5])
    for position, e in zip([1, 5], experiences, strict=True):
        future = e[5]["future_index"]
        assert isinstance(future, np.integer)
        first = 0 if position < 4 else 4
        assert position <= future <= first + int(e[5]["episode_end_index"][0])
        assert e[0][1].tolist() == buffer[int(future)][4][2].tolist()  # the goal it names
    # nnabla-rl's order: n-step is refused first; num_steps <= 0 reads one step
    with pytest.raises(NotImplementedError):
        buffer.sample_indices([], num_steps=2)
    experiences, info = buffer.sample_indices([0, 2], num_steps=0)
    assert len(experiences) == 2 and info["weights"].shape == (2, 1)


def test_atari_trajectory_portions_as_nnabla_rl_lazy_slices() -> None:
    """nnabla-rl slices an Atari trajectory with ``range(key.stop)[key]``, into a list."""
    frames = np.random.default_rng(0).random((12, 84, 84)).astype(np.float32)

    def step(t: int) -> tuple[Any, ...]:
        return (frames[t : t + 4], t, 1.0, 1.0, frames[t + 1 : t + 5], {})

    buffer = MemoryEfficientAtariTrajectoryBuffer(seed=1)
    buffer.append_trajectory(tuple(step(t) for t in range(5)))
    portions, _ = buffer.sample_trajectories_portion(num_samples=40, portion_length=-2)
    assert portions == tuple([] for _ in range(40))  # range(i - 2)[i : i - 2] is empty
    portions, _ = buffer.sample_trajectories_portion(num_samples=3, portion_length=2)
    assert all(isinstance(p, list) and len(p) == 2 for p in portions)
    # a negative index: slice(-1, 1) of range(1) is the first experience
    (portion,), _ = buffer.sample_indices_portion([-1], portion_length=2)
    assert isinstance(portion, list) and [e[1] for e in portion] == [0]
