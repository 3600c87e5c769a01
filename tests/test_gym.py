"""Gymnasium: buffers from spaces, and feeding vector envs in both autoreset modes.

The vector-env tests check the buffer against an *independent* record of the true transitions:
each sub-env is replayed as a plain single env (same seed, same deterministic policy), so the
record knows nothing about autoreset modes. Every sampleable transition must equal the record's
(n_step 1 and 3), the sampleable set must be exactly the transitions whose window is known, and
no autoreset step may appear as a transition.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlreplay as rr

DOC = Path(__file__).resolve().parents[1] / "docs" / "gymnasium.md"

SEED = 123
E = 4
MAX_STEPS = 20
VECTOR_STEPS = 200  # the collect_* loops below spell it out, as the how-to does
GAMMA = 0.9


# --------------------------------------------------------------------------- from_spaces
SPACES = [
    # (id, space, expected shape, expected dtype)
    ("box-float32", spaces.Box(-1.0, 1.0, (4,), np.float32), (4,), np.float32),
    ("box-float64", spaces.Box(-1.0, 1.0, (2, 3), np.float64), (2, 3), np.float64),
    ("box-image", spaces.Box(0, 255, (8, 8, 3), np.uint8), (8, 8, 3), np.uint8),
    ("box-int", spaces.Box(-5, 5, (3,), np.int32), (3,), np.int32),
    ("discrete", spaces.Discrete(5), (), np.int64),
    ("discrete-start", spaces.Discrete(3, start=-1), (), np.int64),
    ("multi-discrete", spaces.MultiDiscrete([3, 4, 2]), (3,), np.int64),
    ("multi-discrete-2d", spaces.MultiDiscrete([[2, 3], [4, 5]]), (2, 2), np.int64),
    ("multi-binary", spaces.MultiBinary(6), (6,), np.int8),
    ("multi-binary-2d", spaces.MultiBinary((2, 3)), (2, 3), np.int8),
]


def run_episode(
    buf: rr.ReplayBuffer, obs_space: spaces.Space, act_space: spaces.Space, T: int
) -> list[dict[str, Any]]:
    """Add one T-step episode of sampled values (terminated at the end); return what was added."""
    obs_space.seed(SEED)
    act_space.seed(SEED + 1)
    observations = [obs_space.sample() for _ in range(T + 1)]
    steps = []
    for t in range(T):
        obs = observations[t] if isinstance(obs_space, spaces.Dict) else {"obs": observations[t]}
        nxt = observations[t + 1]
        nxt = nxt if isinstance(obs_space, spaces.Dict) else {"obs": nxt}
        values = {
            **obs,
            "action": act_space.sample(),
            "reward": float(t),
            "terminated": t == T - 1,
            "truncated": False,
            **{"next_" + k: v for k, v in nxt.items()},
        }
        buf.add(**values)
        steps.append(values)
    return steps


def check_stored(buf: rr.ReplayBuffer, steps: list[dict[str, Any]]) -> None:
    batch = buf.get_transitions(buf.sampleable_ids())
    assert batch.batch_size == len(steps)
    for name, f in buf.schema.fields.items():
        assert batch[name].dtype == f.dtype, name
        np.testing.assert_array_equal(batch[name], np.stack([s[name] for s in steps]), name)
    for name in buf.schema.next_names():
        assert name in batch
        np.testing.assert_array_equal(batch[name], np.stack([s[name] for s in steps]), name)


@pytest.mark.parametrize(
    ("space", "shape", "dtype"), [pytest.param(*s[1:], id=s[0]) for s in SPACES]
)
def test_from_spaces_observation_space(space: spaces.Space, shape: tuple, dtype: Any) -> None:
    act = spaces.Discrete(3)
    buf = rr.ReplayBuffer.from_spaces(space, act, capacity=64, seed=0)
    f = buf.schema.fields["obs"]
    assert f.shape == shape and f.dtype == np.dtype(dtype) and f.observation
    assert buf.schema.fields["action"] == rr.Field((), np.int64)
    assert buf.schema.observation_names == ("obs",)
    check_stored(buf, run_episode(buf, space, act, 5))


@pytest.mark.parametrize(
    ("space", "shape", "dtype"), [pytest.param(*s[1:], id=s[0]) for s in SPACES]
)
def test_from_spaces_action_space(space: spaces.Space, shape: tuple, dtype: Any) -> None:
    obs = spaces.Box(-1.0, 1.0, (2,), np.float32)
    buf = rr.ReplayBuffer.from_spaces(obs, space, capacity=64, seed=0)
    f = buf.schema.fields["action"]
    assert f.shape == shape and f.dtype == np.dtype(dtype) and not f.observation
    check_stored(buf, run_episode(buf, obs, space, 4))


def dict_space() -> spaces.Dict:
    return spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (3,), np.float32),
            "img": spaces.Box(0, 255, (2, 2), np.uint8),
            "mode": spaces.Discrete(3),
            "bits": spaces.MultiBinary(4),
        }
    )


def test_from_spaces_dict_gives_one_observation_field_per_key() -> None:
    act = spaces.MultiDiscrete([3, 2])
    buf = rr.ReplayBuffer.from_spaces(dict_space(), act, capacity=64, n_step=2, seed=0)
    fields = buf.schema.fields
    assert set(buf.schema.observation_names) == {"pos", "img", "mode", "bits"}
    assert "obs" not in fields
    assert fields["pos"] == rr.Field((3,), np.float32, observation=True)
    assert fields["img"] == rr.Field((2, 2), np.uint8, observation=True)
    assert fields["mode"] == rr.Field((), np.int64, observation=True)
    assert fields["bits"] == rr.Field((4,), np.int8, observation=True)
    assert fields["action"] == rr.Field((2,), np.int64)
    steps = run_episode(buf, dict_space(), act, 6)
    # n_step=2: next_<key> is the observation two steps on, or the final one.
    batch = buf.get_transitions(buf.sampleable_ids())
    for key in ("pos", "img", "mode", "bits"):
        expected = [steps[min(t + 1, 5)]["next_" + key] for t in range(6)]
        np.testing.assert_array_equal(batch["next_" + key], np.stack(expected), key)
        np.testing.assert_array_equal(batch[key], np.stack([s[key] for s in steps]), key)
    np.testing.assert_array_equal(batch.steps, [2, 2, 2, 2, 2, 1])


@pytest.mark.parametrize("missing", ["next_pos", "next_img", "next_mode", "next_bits"])
def test_dict_observation_needs_every_next_key_at_episode_end(missing: str) -> None:
    buf = rr.ReplayBuffer.from_spaces(dict_space(), spaces.Discrete(2), capacity=32, seed=0)
    space = dict_space()
    space.seed(0)
    o, o2 = space.sample(), space.sample()
    step = {**o, "action": 1, "reward": 0.0, "truncated": False}
    buf.add(**step, terminated=False)  # not an end: no next_<key> needed
    before = buf.state_dict()
    end = {**step, "terminated": True, **{"next_" + k: v for k, v in o2.items()}}
    del end[missing]
    with pytest.raises(rr.FieldError, match=missing) as info:
        buf.add(**end)
    assert isinstance(info.value, KeyError)
    after = buf.state_dict()
    for k, v in before["arrays"].items():
        np.testing.assert_array_equal(v, after["arrays"][k], err_msg=k)
    with pytest.raises(rr.FieldError, match="obs"):
        buf.add(obs=o["pos"], action=1, reward=0.0, terminated=False, truncated=False)


def test_from_spaces_passes_constructor_arguments_and_extra_fields() -> None:
    buf = rr.ReplayBuffer.from_spaces(
        spaces.Box(0, 255, (84, 84), np.uint8),
        spaces.Discrete(6),
        capacity=800,
        num_envs=4,
        n_step=3,
        frame_stack=4,
        gamma=0.5,
        extra_fields={"legal": rr.Field((6,), np.bool_)},
    )
    assert (buf.capacity, buf.num_envs, buf.n_step, buf.frame_stack, buf.gamma) == (
        800,
        4,
        3,
        4,
        0.5,
    )
    assert buf.schema.fields["legal"] == rr.Field((6,), np.bool_)


UNSUPPORTED = [
    ("tuple", spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))), "Tuple"),
    ("text", spaces.Text(5), "Text"),
    ("sequence", spaces.Sequence(spaces.Discrete(2)), "Sequence"),
    ("graph", spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(2)), "Graph"),
    ("oneof", spaces.OneOf((spaces.Discrete(2), spaces.Box(0, 1, (2,)))), "OneOf"),
]


@pytest.mark.parametrize(("space", "kind"), [pytest.param(*u[1:], id=u[0]) for u in UNSUPPORTED])
def test_unsupported_observation_spaces_are_rejected(space: spaces.Space, kind: str) -> None:
    with pytest.raises(rr.ConfigError) as info:
        rr.ReplayBuffer.from_spaces(space, spaces.Discrete(2), capacity=64)
    assert isinstance(info.value, ValueError)
    assert "observation_space" in str(info.value) and kind in str(info.value)


@pytest.mark.parametrize(("space", "kind"), [pytest.param(*u[1:], id=u[0]) for u in UNSUPPORTED])
def test_unsupported_action_spaces_are_rejected(space: spaces.Space, kind: str) -> None:
    with pytest.raises(rr.ConfigError) as info:
        rr.ReplayBuffer.from_spaces(spaces.Discrete(4), space, capacity=64)
    assert isinstance(info.value, ValueError)
    assert "action_space" in str(info.value) and kind in str(info.value)


def test_dict_action_space_and_nested_dict_observation_are_rejected() -> None:
    with pytest.raises(rr.ConfigError, match="action_space"):
        rr.ReplayBuffer.from_spaces(spaces.Discrete(4), dict_space(), capacity=64)
    nested = spaces.Dict({"inner": dict_space(), "pos": spaces.Box(0, 1, (2,))})
    with pytest.raises(rr.ConfigError, match="inner"):
        rr.ReplayBuffer.from_spaces(nested, spaces.Discrete(2), capacity=64)


@pytest.mark.parametrize("key", ["action", "reward", "terminated", "next_pos", "discount"])
def test_dict_keys_that_clash_with_buffer_names_are_rejected(key: str) -> None:
    # A Dict key must become an observation field; one that cannot (or that would silently be
    # replaced by the action field) is an error naming the key.
    space = spaces.Dict({key: spaces.Box(0, 1, (2,)), "pos": spaces.Box(0, 1, (3,))})
    with pytest.raises(rr.ConfigError, match=key) as info:
        rr.ReplayBuffer.from_spaces(space, spaces.Discrete(2), capacity=64)
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- vector envs
def make_env() -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)


def policy(obs: np.ndarray) -> np.ndarray:
    """A pseudo-random policy that is a function of the observation only (so an independent
    replay of one sub-env picks the same actions): the parity of a hash of the observation."""
    obs = np.asarray(obs, np.float64).reshape(-1, 4)
    return (np.floor(np.abs(obs).sum(axis=1) * 1e5).astype(np.int64) % 2).astype(np.int64)


def collect_next_step(buf: rr.ReplayBuffer) -> int:
    """Feed ``buf`` from a NEXT_STEP vector env; returns the number of autoreset steps skipped.

    The code between the markers is what docs/gymnasium.md shows.
    """
    envs = gym.vector.SyncVectorEnv(
        [make_env] * E, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
    )
    skipped = 0
    # --- doc: next-step
    obs, _ = envs.reset(seed=SEED)
    autoreset = np.zeros(envs.num_envs, dtype=bool)  # envs whose next step is a reset
    for _ in range(200):
        actions = policy(obs)
        next_obs, rewards, terminations, truncations, _ = envs.step(actions)
        env_ids = np.flatnonzero(~autoreset)  # the others were reset: not a transition
        buf.add(
            env_ids=env_ids,
            obs=obs[env_ids],
            action=actions[env_ids],
            reward=rewards[env_ids],
            next_obs=next_obs[env_ids],  # the final observation for envs that just ended
            terminated=terminations[env_ids],
            truncated=truncations[env_ids],
        )
        obs = next_obs
        autoreset = terminations | truncations
        # --- end doc
        skipped += envs.num_envs - env_ids.size
    envs.close()
    return skipped


def collect_same_step(buf: rr.ReplayBuffer) -> int:
    """Feed ``buf`` from a SAME_STEP vector env; returns the number of episode ends."""
    envs = gym.vector.SyncVectorEnv(
        [make_env] * E, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    ends = 0
    # --- doc: same-step
    obs, _ = envs.reset(seed=SEED)
    for _ in range(200):
        actions = policy(obs)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        ended = terminations | truncations
        final_obs = next_obs.copy()  # for ended envs next_obs is already the reset observation
        if ended.any():
            final_obs[ended] = np.stack(infos["final_obs"][ended])
        buf.add(
            obs=obs,
            action=actions,
            reward=rewards,
            next_obs=final_obs,
            terminated=terminations,
            truncated=truncations,
        )
        obs = next_obs
        # --- end doc
        ends += int(ended.sum())
    envs.close()
    return ends


def true_transitions(env_index: int, count: int) -> dict[str, np.ndarray]:
    """The first ``count`` transitions of sub-env ``env_index``, replayed as a single env."""
    env = make_env()
    obs, _ = env.reset(seed=SEED + env_index)
    rec: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "reward", "next", "te", "tr")}
    for _ in range(count):
        action = int(policy(obs)[0])
        nxt, reward, te, tr, _ = env.step(action)
        for k, v in zip(rec, (obs, action, reward, nxt, te, tr), strict=True):
            rec[k].append(v)
        obs = env.reset()[0] if te or tr else nxt
    env.close()
    return {k: np.array(v) for k, v in rec.items()}


def transitions_per_env(rec: dict[str, np.ndarray], steps: int, mode: str) -> int:
    """How many real transitions an env makes in ``steps`` vector steps: in NEXT_STEP mode each
    episode end is followed by one reset step that is not a transition."""
    if mode == "same":
        return steps
    used = count = 0
    while used < steps:
        used += 1
        if rec["te"][count] or rec["tr"][count]:
            used += 1  # the reset step
        count += 1
    return count


def expected_window(rec: dict[str, np.ndarray], t: int, n: int) -> dict[str, Any]:
    """The n-step transition starting at step t, from the record."""
    done = rec["te"] | rec["tr"]
    m = 1
    while m < n and not done[t + m - 1]:
        m += 1
    last = t + m - 1
    terminated = bool(rec["te"][last])
    return {
        "obs": rec["obs"][t],
        "action": rec["action"][t],
        "reward": sum(GAMMA**j * rec["reward"][t + j] for j in range(m)),
        "next_obs": rec["next"][last],
        "terminated": terminated,
        "truncated": bool(rec["tr"][last]) and not terminated,
        "discount": 0.0 if terminated else GAMMA**m,
        "steps": m,
    }


def window_known(rec: dict[str, np.ndarray], t: int, n: int, count: int) -> bool:
    done = rec["te"][:count] | rec["tr"][:count]
    return bool(done[t : t + n].any()) or t + n < count


@pytest.mark.parametrize("mode", ["next", "same"])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("capacity", [E * 400, E * 60], ids=["no-overwrite", "overwrite"])
def test_vector_env_transitions_match_an_independent_record(
    mode: str, n_step: int, capacity: int
) -> None:
    buf = rr.ReplayBuffer.from_spaces(
        gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        gym.spaces.Discrete(2),
        capacity=capacity,
        num_envs=E,
        n_step=n_step,
        gamma=GAMMA,
        seed=0,
    )
    if mode == "next":
        skipped = collect_next_step(buf)
        assert skipped > 0  # reset steps happened and were left out
    else:
        assert collect_same_step(buf) > 0

    C = capacity // E
    records = [true_transitions(e, VECTOR_STEPS) for e in range(E)]
    counts = [transitions_per_env(r, VECTOR_STEPS, mode) for r in records]
    assert len(buf) == sum(min(c, C) for c in counts)
    # Both ways an episode ends occurred (CartPole falls, or the 20-step limit truncates).
    assert any(r["te"][:c].any() for r, c in zip(records, counts, strict=True))
    assert any(r["tr"][:c].any() for r, c in zip(records, counts, strict=True))

    ids = buf.sampleable_ids()
    env_of, t_of = ids % E, ids // E
    # Exactly the stored transitions whose n-step window is known are sampleable.
    for e, (rec, count) in enumerate(zip(records, counts, strict=True)):
        expected = [
            t for t in range(max(0, count - C), count) if window_known(rec, t, n_step, count)
        ]
        assert t_of[env_of == e].tolist() == expected, f"env {e}"

    batch = buf.get_transitions(ids)
    np.testing.assert_array_equal(batch.ids, ids)
    np.testing.assert_array_equal(batch.env_ids, env_of)
    for i, (e, t) in enumerate(zip(env_of, t_of, strict=True)):
        exp = expected_window(records[e], int(t), n_step)
        where = f"env {e} step {t}"
        np.testing.assert_array_equal(batch.obs[i], exp["obs"], where)
        np.testing.assert_array_equal(batch.next_obs[i], exp["next_obs"], where)
        assert batch.action[i] == exp["action"], where
        assert batch.terminated[i] == exp["terminated"], where
        assert batch.truncated[i] == exp["truncated"], where
        assert batch.steps[i] == exp["steps"], where
        np.testing.assert_allclose(batch.reward[i], exp["reward"], rtol=1e-6, err_msg=where)
        np.testing.assert_allclose(batch.discount[i], exp["discount"], rtol=1e-6, err_msg=where)
    # No autoreset step slipped in: those have reward 0 (CartPole pays 1 per real step) and an
    # observation that does not follow from the previous one.
    if n_step == 1:
        np.testing.assert_array_equal(batch.reward, np.ones(ids.size, np.float32))
    sample = buf.sample(64)
    assert np.isin(sample.ids, ids).all()


# --------------------------------------------------------------------------- the how-to
def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_doc_snippets_are_the_code_the_tests_use() -> None:
    text = DOC.read_text()
    source = Path(__file__).read_text()
    for name in ("next-step", "same-step"):
        block = re.search(rf"# --- doc: {name}\n(.*?)# --- end doc", source, flags=re.DOTALL)
        assert block is not None
        lines = [ln.strip() for ln in block.group(1).splitlines() if ln.strip()]
        for line in lines:
            assert line in text, f"docs/gymnasium.md lacks: {line}"


def test_doc_snippets_run() -> None:
    blocks = doc_blocks()
    assert len(blocks) >= 3
    namespace: dict[str, Any] = {}
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), namespace)
