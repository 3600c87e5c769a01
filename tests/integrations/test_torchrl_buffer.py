"""The TorchRL adapter against TorchRL's own TensorDictReplayBuffer over a LazyTensorStorage:
the same keys, per-step shapes, dtypes and values; n-step windows as TorchRL's MultiStep
(except the terminal flag, by design); priorities; trajectories split across extends;
state round trips; errors."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402
from torchrl.data import LazyTensorStorage  # noqa: E402
from torchrl.data import TensorDictReplayBuffer as TorchRLBuffer  # noqa: E402
from torchrl.data.postprocs import MultiStep  # noqa: E402

with warnings.catch_warnings():
    # torchrl 0.14.1 warns, on importing its collectors, about classes of its own.
    warnings.filterwarnings(
        "ignore", "Creating .* which inherits from WeightUpdaterBase", DeprecationWarning
    )
    from torchrl.collectors import Collector

import rlreplay as rr  # noqa: E402
from rlreplay.integrations.torchrl import (  # noqa: E402
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)


def trajectory(length: int, ends: dict[int, str], *, envs: int = 0, start: int = 0) -> TensorDict:
    """Collector-shaped transitions: ``[length]`` (or ``[envs, length]``) steps whose
    observation is ``(env, step, episode)`` as float32, reset after every step in ``ends``
    (``"terminated"`` or ``"truncated"``); ``step_count`` counts steps in the episode."""
    rows = max(envs, 1)
    obs = torch.zeros(rows, length, 3)
    nxt = torch.zeros(rows, length, 3)
    count = torch.zeros(rows, length, 1, dtype=torch.int64)
    term = torch.zeros(rows, length, 1, dtype=torch.bool)
    trunc = torch.zeros(rows, length, 1, dtype=torch.bool)
    for e in range(rows):
        episode, k = 0, 0
        for t in range(length):
            obs[e, t] = torch.tensor([e, start + t, episode])
            nxt[e, t] = torch.tensor([e, start + t + 1, episode])
            count[e, t] = k
            end = ends.get(t)
            if end == "terminated":
                term[e, t] = True
            elif end == "truncated":
                trunc[e, t] = True
            k += 1
            if end:
                episode, k = episode + 1, 0
    td = TensorDict(
        {
            "observation": obs,
            "step_count": count,
            "action": (torch.arange(rows * length).reshape(rows, length, 1) % 2),
            "action_value": torch.randn(rows, length, 2),
            "done": torch.zeros(rows, length, 1, dtype=torch.bool),
            "terminated": torch.zeros(rows, length, 1, dtype=torch.bool),
            "truncated": torch.zeros(rows, length, 1, dtype=torch.bool),
            ("collector", "traj_ids"): torch.zeros(rows, length, dtype=torch.int64),
            "next": {
                "observation": nxt,
                "step_count": count + 1,
                "reward": (torch.arange(length, dtype=torch.float32) + 1)
                .expand(rows, length)
                .unsqueeze(-1)
                .clone(),
                "done": term | trunc,
                "terminated": term,
                "truncated": trunc,
            },
        },
        batch_size=[rows, length],
    )
    return td if envs else td[0]


def leaves(td: TensorDict) -> dict[object, tuple[tuple[int, ...], torch.dtype]]:
    return {
        k: (tuple(v.shape), v.dtype) for k, v in td.items(include_nested=True, leaves_only=True)
    }


def test_samples_have_torchrls_keys_shapes_and_dtypes() -> None:
    data = trajectory(40, {9: "terminated", 25: "truncated", 39: "terminated"})
    ours = TensorDictReplayBuffer(100, batch_size=16, seed=0)
    theirs = TorchRLBuffer(storage=LazyTensorStorage(100), batch_size=16)
    ours.extend(data.clone())
    theirs.extend(data.clone())
    assert leaves(ours.sample()) == leaves(theirs.sample())
    assert len(ours) == len(theirs) == ours.write_count == 40


def test_one_step_samples_are_the_collected_transitions() -> None:
    data = trajectory(30, {9: "terminated", 20: "truncated"})
    rb = TensorDictReplayBuffer(100, batch_size=256, seed=1)
    index = rb.extend(data)
    assert torch.equal(data["index"], index)
    sample = rb.sample()
    # Every step but the last (whose successor is not stored yet) is drawn, unchanged.
    assert set(sample["index"].tolist()) == set(index[:-1].tolist())
    rows = {int(i): t for t, i in enumerate(index.tolist())}
    expected = data[torch.tensor([rows[int(i)] for i in sample["index"]])]
    for key, value in expected.items(include_nested=True, leaves_only=True):
        assert torch.equal(sample.get(key), value), key


def test_several_envs_keep_their_own_trajectories() -> None:
    data = trajectory(12, {4: "terminated"}, envs=3)
    rb = TensorDictReplayBuffer(90, batch_size=200, n_step=2, gamma=0.5, seed=2)
    index = rb.extend(data)
    assert index.shape == (3, 12)
    sample = rb.sample()
    obs, nxt = sample["observation"], sample["next", "observation"]
    assert torch.equal(obs[:, 0], nxt[:, 0])  # never another env's observation
    assert torch.equal(obs[:, 2], nxt[:, 2])  # never another episode's


def test_n_step_matches_torchrls_multistep_except_the_terminal_flag() -> None:
    data = trajectory(16, {4: "terminated", 11: "truncated", 15: "terminated"})
    rb = TensorDictReplayBuffer(100, batch_size=512, n_step=3, gamma=0.5, seed=3)
    index = rb.extend(data.clone())
    reference = MultiStep(gamma=0.5, n_steps=3)(data.clone().refine_names("time"))
    sample = rb.sample()
    rows = torch.tensor([index.tolist().index(int(i)) for i in sample["index"]])
    ref = reference[rows]
    assert torch.equal(sample["steps_to_next_obs"], ref["steps_to_next_obs"])
    for key in [("next", "reward"), ("next", "observation"), ("next", "step_count")]:
        assert torch.equal(sample[key], ref[key]), key
    # Windows that reach a termination are terminal (no bootstrap from the final state);
    # TorchRL's MultiStep keeps the first step's flag.
    steps = sample["observation"][:, 1].long()
    reaches_end = ((steps >= 2) & (steps <= 4)) | ((steps >= 13) & (steps <= 15))
    assert torch.equal(sample["next", "terminated"].squeeze(-1), reaches_end)
    truncated = (steps >= 9) & (steps <= 11)
    assert torch.equal(sample["next", "truncated"].squeeze(-1), truncated)
    assert torch.equal(sample["next", "done"].squeeze(-1), reaches_end | truncated)


def test_windows_continue_across_extends() -> None:
    whole = TensorDictReplayBuffer(100, n_step=3, gamma=0.5, seed=4)
    split = TensorDictReplayBuffer(100, n_step=3, gamma=0.5, seed=4)
    data = trajectory(20, {13: "terminated", 19: "truncated"})
    whole.extend(data.clone())
    split.extend(data[:7].clone())
    split.extend(data[7:].clone())
    a, b = whole.sample(64), split.sample(64)
    for key, value in a.items(include_nested=True, leaves_only=True):
        assert torch.equal(b.get(key), value), key


def test_steps_that_do_not_follow_each_other_end_their_episode() -> None:
    # Three envs flattened into one [36] batch: the rows of env 1 follow those of env 0.
    data = trajectory(12, {}, envs=3).reshape(-1)
    rb = TensorDictReplayBuffer(100, batch_size=300, n_step=4, gamma=0.5, seed=5)
    rb.extend(data)
    sample = rb.sample()
    assert torch.equal(sample["observation"][:, 0], sample["next", "observation"][:, 0])
    # Each env's last step ends its episode truncated at its own next observation.
    last = sample["observation"][:, 1] == 11
    assert last[:-1].any()
    assert sample["next", "truncated"][last].all()
    # A new extend that does not continue the stored steps ends their episode first.
    rb.extend(trajectory(5, {}, start=100))
    sample = rb.sample()
    assert (sample["next", "observation"][:, 1] != 100).all()


def test_prioritized_sampling_follows_td_errors() -> None:
    rb = TensorDictPrioritizedReplayBuffer(100, alpha=1.0, beta=0.4, batch_size=64, seed=6)
    data = trajectory(20, {19: "terminated"})
    rb.extend(data)
    sample = rb.sample()
    assert sample["priority_weight"].dtype == torch.float32
    assert sample["priority_weight"].shape == (64,)
    assert torch.equal(sample["priority_weight"], torch.ones(64))  # all priorities equal
    # A loss's output: "index" and a [B, 1] "td_error" (100 for one transition, 0 for the rest).
    favourite = int(data["index"][7])
    td_error = torch.where(data["index"] == favourite, 100.0, 0.0).unsqueeze(-1)
    rb.update_tensordict_priority(TensorDict({"index": data["index"], "td_error": td_error}, [20]))
    drawn = rb.sample(400)
    assert (drawn["index"] == favourite).float().mean() > 0.99
    # Weights relative to the least likely transition, as TorchRL's: (p / p_min) ** -beta.
    expected = ((100.0 + 1e-8) / 1e-8) ** -0.4
    chosen = drawn["priority_weight"][drawn["index"] == favourite]
    assert torch.allclose(chosen, torch.full_like(chosen, expected), rtol=1e-4)
    # Several priorities per transition are reduced by their max (TorchRL's default).
    rb.update_priority(torch.arange(20), torch.ones(20))
    rb.update_priority(data["index"][3:4], torch.tensor([[1e6, 0.0]]))
    assert (rb.sample(200)["index"] == int(data["index"][3])).float().mean() > 0.9


def test_priorities_from_extended_data_and_from_dqnloss() -> None:
    from torchrl.data import OneHot
    from torchrl.modules import MLP, QValueActor
    from torchrl.objectives import DQNLoss

    data = trajectory(20, {19: "terminated"})
    data.set("td_error", torch.zeros(20, 1))
    data["td_error"][5] = 1e6
    rb = TensorDictPrioritizedReplayBuffer(100, alpha=1.0, batch_size=32, seed=7)
    rb.extend(data)
    assert (rb.sample()["index"] == int(data["index"][5])).all()

    rb = TensorDictPrioritizedReplayBuffer(100, batch_size=32, n_step=3, seed=8)
    data = trajectory(20, {19: "terminated"})
    data.set("action", torch.nn.functional.one_hot(data["action"].squeeze(-1), 2))
    rb.extend(data)
    spec = OneHot(2)
    actor = QValueActor(MLP(out_features=2, num_cells=[8]), in_keys=["observation"], spec=spec)
    loss = DQNLoss(actor, action_space=spec, delay_value=False)
    sample = rb.sample()
    out = loss(sample)
    assert out["loss"].ndim == 0
    assert sample["td_error"].shape == (32, 1)
    rb.update_tensordict_priority(sample)
    assert rb.core is not None
    assert isinstance(rb.core, rr.PrioritizedReplayBuffer)
    assert rb.core.max_priority > 0


def test_a_uniform_buffer_ignores_priorities() -> None:
    rb = TensorDictReplayBuffer(100, batch_size=8, seed=9)
    rb.extend(trajectory(10, {9: "terminated"}))
    sample = rb.sample()
    assert "priority_weight" not in sample
    sample.set("td_error", torch.ones(8, 1))
    rb.update_tensordict_priority(sample)
    rb.update_priority(sample["index"], torch.ones(8))
    sample, info = rb.sample(return_info=True)
    assert torch.equal(info["index"], sample["index"])


def test_add_stores_one_transition() -> None:
    rb = TensorDictReplayBuffer(100, batch_size=4, seed=10)
    data = trajectory(3, {2: "terminated"})
    ids = [rb.add(data[t].clone()) for t in range(3)]
    assert ids == [0, 1, 2]
    assert set(rb.sample(50)["index"].tolist()) == {0, 1, 2}


@pytest.mark.parametrize("envs", [1, 2])
def test_collector_writes_into_the_buffer(envs: int) -> None:
    pytest.importorskip("gymnasium")
    from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv
    from torchrl.envs.utils import RandomPolicy

    # One env gives [T] batches; a batched env of two gives [2, T].
    base = GymEnv("CartPole-v1") if envs == 1 else SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    env = TransformedEnv(base, StepCounter())
    env.set_seed(0)
    rb = TensorDictReplayBuffer(1_000, batch_size=32, n_step=2, seed=11)
    collector = Collector(
        env, RandomPolicy(env.action_spec), frames_per_batch=50 * envs, total_frames=200 * envs,
        replay_buffer=rb,
    )  # fmt: skip
    for _ in collector:
        pass
    collector.shutdown()
    assert rb.write_count == len(rb) == 200 * envs
    assert rb.core is not None and rb.core.num_envs == envs
    sample = rb.sample()
    assert sample["next", "observation"].shape == (32, 4)
    # The next observation is steps_to_next_obs steps on (step_count restarts at a reset).
    gap = sample["next", "step_count"] - sample["step_count"]
    assert torch.equal(gap.squeeze(-1), sample["steps_to_next_obs"])


def test_state_round_trip() -> None:
    rb = TensorDictPrioritizedReplayBuffer(50, batch_size=16, n_step=2, seed=12)
    rb.extend(trajectory(30, {9: "terminated"}, envs=2))
    rb.update_priority(torch.arange(10), torch.linspace(0.1, 5.0, 10))
    state = rb.state_dict()
    other = TensorDictPrioritizedReplayBuffer(50, batch_size=16, n_step=2, seed=99)
    other.load_state_dict(state)
    assert other.write_count == rb.write_count and len(other) == len(rb)
    a, b = rb.sample(), other.sample()
    for key, value in a.items(include_nested=True, leaves_only=True):
        assert torch.equal(b.get(key), value), key
    # The running episodes continue after the load as before it.
    more = trajectory(5, {}, envs=2, start=30)
    rb.extend(more.clone())
    other.extend(more.clone())
    a, b = rb.sample(), other.sample()
    for key, value in a.items(include_nested=True, leaves_only=True):
        assert torch.equal(b.get(key), value), key
    empty = TensorDictReplayBuffer(10)
    fresh = TensorDictReplayBuffer(10)
    fresh.load_state_dict(empty.state_dict())
    assert len(fresh) == 0


def test_empty_drops_the_data_and_keeps_the_layout() -> None:
    rb = TensorDictReplayBuffer(100, batch_size=4, seed=13)
    rb.extend(trajectory(10, {}))
    rb.empty()
    assert len(rb) == 0 and rb.write_count == 0
    with pytest.raises(rr.EmptyBufferError):
        rb.sample()
    rb.extend(trajectory(10, {9: "terminated"}, start=50))
    assert (rb.sample(64)["observation"][:, 1] >= 50).all()


def test_errors_say_what_was_expected() -> None:
    rb = TensorDictReplayBuffer(100)
    with pytest.raises(rr.EmptyBufferError, match="nothing is stored"):
        rb.sample(4)
    rb.extend(trajectory(5, {}))
    with pytest.raises(rr.ConfigError, match="batch_size"):
        rb.sample()
    with pytest.raises(TypeError, match="TensorDict"):
        rb.extend({"observation": torch.zeros(3)})  # type: ignore[arg-type]
    with pytest.raises(rr.ShapeError, match="batch dim"):
        rb.extend(trajectory(5, {}, envs=2))
    missing = trajectory(5, {}, start=5).exclude("action_value")
    with pytest.raises(rr.FieldError, match="action_value"):
        rb.extend(missing)
    with pytest.raises(rr.FieldError, match="'next'"):
        TensorDictReplayBuffer(10).extend(TensorDict({"observation": torch.zeros(4, 2)}, [4]))
    with pytest.raises(rr.ShapeError, match="\\[T\\] or \\[E, T\\]"):
        TensorDictReplayBuffer(10).extend(trajectory(4, {}, envs=2).unsqueeze(0))
    with pytest.raises(rr.ConfigError, match="capacity"):
        TensorDictReplayBuffer(0)
