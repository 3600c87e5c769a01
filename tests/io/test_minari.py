"""Minari out and in: round trips field by field, skipped episodes, datasets Minari wrote."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

minari = pytest.importorskip("minari")
gym = pytest.importorskip("gymnasium")
pytest.importorskip("pyarrow")

import rlreplay as rr  # noqa: E402
from rlreplay.io._steps import episode_runs, stored_steps  # noqa: E402
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill  # noqa: E402


def episodes_of(buf: Any) -> list[rr.Batch]:
    with buf.atomic():
        runs = episode_runs(stored_steps(buf))
        return [buf.get_episode(first) for first, _ in runs.complete]


def complete_in_record(buf: Any, rec: Any) -> tuple[int, int, int, int]:
    """(complete, running, overwritten, abandoned) episode counts from the record of what was
    added (an abandoned episode counts as abandoned, overwritten or not)."""
    complete = running = overwritten = abandoned = 0
    for steps in rec.steps:
        kept = steps[max(0, len(steps) - buf.env_capacity) :]
        starts = {s["_start"] for s in kept}
        for start in starts:
            ep = [s for s in kept if s["_start"] == start]
            if ep[-1]["_abandoned"]:
                abandoned += 1
            elif not (ep[-1]["terminated"] or ep[-1]["truncated"]):
                running += 1
            elif ep[0]["_t"] != start:
                overwritten += 1
            else:
                complete += 1
    return complete, running, overwritten, abandoned


def assert_same_episodes(a: list[rr.Batch], b: list[rr.Batch], names: list[str]) -> None:
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        for name in names:
            assert x[name].dtype == y[name].dtype, (k, name)
            np.testing.assert_array_equal(x[name], y[name], err_msg=f"episode {k} {name}")


@pytest.mark.parametrize("num_envs", [1, 2])
def test_round_trip_dict_observations(minari_path: Any, num_envs: int) -> None:
    src = Buffer(60 * num_envs, FIELDS, num_envs=num_envs, n_step=3, gamma=0.9, seed=0)
    rec = fill(src, 100, seed=num_envs, finish=False)
    out = src.to_minari("test/roundtrip-v0", progress=False, author="tests")
    want_complete, want_running, want_over, want_abandoned = complete_in_record(src, rec)
    assert (out.episodes, out.skipped_incomplete, out.skipped_overwritten) == (
        want_complete, want_running, want_over,
    )  # fmt: skip
    assert out.skipped_abandoned == want_abandoned == 0
    assert want_complete > 3 and want_running >= 1 and want_over >= 1
    assert isinstance(out.dataset.observation_space, gym.spaces.Dict)

    dst = Buffer.from_minari("test/roundtrip-v0", n_step=3, gamma=0.9, progress=False)
    assert isinstance(dst, Buffer)
    assert dst.schema.fields == src.schema.fields
    names = [*src.schema.names, "next_obs", "next_frame"]
    ours, theirs = episodes_of(src), episodes_of(dst)
    assert_same_episodes(ours, theirs, names)
    assert sum(len(e.reward) for e in ours) == out.steps == len(dst)
    # Identical n-step transitions, episode by episode.
    for x, y in zip(ours, theirs, strict=True):
        a, b = src.get_transitions(x.ids), dst.get_transitions(y.ids)
        for name in [*names, "discount", "steps"]:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("cls", [Buffer, PBuffer])
def test_abandoned_episodes_are_skipped_not_given_a_final_step(cls: Any, minari_path: Any) -> None:
    src = cls(80, FIELDS, num_envs=2, n_step=2, seed=0)
    rec = fill(src, 70, seed=11, end_p=0.1, finish=False, abandon_p=0.08)
    want = complete_in_record(src, rec)
    assert want[0] > 2 and want[3] >= 2
    with src.atomic():
        assert episode_runs(stored_steps(src))[1:] == want[1:]
    out = src.to_minari("test/abandoned-v0", progress=False)
    got = (out.episodes, out.skipped_incomplete, out.skipped_overwritten, out.skipped_abandoned)
    assert got == want
    # Every exported episode is one that ended terminated or truncated, with its true final
    # observation (an abandoned one would end neither way, with a zero final observation).
    exported = list(out.dataset.iterate_episodes())
    for ep, mine in zip(exported, episodes_of(src), strict=True):
        assert bool(ep.terminations[-1] or ep.truncations[-1])
        assert mine.next_known.all()
        np.testing.assert_array_equal(ep.observations["obs"][-1], mine.next_obs[-1])
    assert sum(len(ep.rewards) for ep in exported) == out.steps


def test_only_abandoned_episodes_is_nothing_to_export(minari_path: Any) -> None:
    buf = Buffer(10, {"obs": rr.Field((), np.float32), "action": rr.Field((), np.int64)})
    for _ in range(2):
        buf.add(obs=0.0, action=1, reward=0.0, terminated=False, truncated=False)
        buf.abandon_episode()
    buf.add(obs=0.0, action=1, reward=0.0, terminated=False, truncated=False)
    with pytest.raises(rr.EmptyBufferError, match="1 running, 0 with overwritten steps, 2 aband"):
        buf.to_minari("abandoned-v0", progress=False)


def test_single_box_observation_discrete_action_prioritized(minari_path: Any) -> None:
    fields = {"obs": rr.Field((84, 84), np.uint8), "action": rr.Field((), np.int64)}
    src = PBuffer(200, fields, n_step=3, frame_stack=4, seed=0)
    rng = np.random.default_rng(0)
    for t in range(150):
        frame = rng.integers(0, 256, (84, 84), dtype=np.uint8)
        src.add(obs=frame, action=int(rng.integers(3)), reward=float(t), terminated=t % 50 == 49,
                truncated=False, next_obs=frame[::-1].copy())  # fmt: skip
    out = src.to_minari("frames-v0", action_space=gym.spaces.Discrete(3), progress=False)
    assert (out.episodes, out.steps, out.skipped_incomplete) == (3, 150, 0)
    assert out.dataset.action_space == gym.spaces.Discrete(3)
    dst = PBuffer.from_minari("frames-v0", n_step=3, frame_stack=4, progress=False)
    assert_same_episodes(episodes_of(src), episodes_of(dst), [*fields, "reward", "next_obs"])
    # One env, nothing overwritten: the same ids name the same transitions, stacks included.
    ids = src.sampleable_ids()
    np.testing.assert_array_equal(ids, dst.sampleable_ids())
    a, b = src.get_transitions(ids), dst.get_transitions(ids)
    assert a.obs.shape == (len(ids), 4, 84, 84)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_nothing_complete_and_bad_fields(minari_path: Any) -> None:
    buf = Buffer(10, {"obs": rr.Field((), np.float32), "action": rr.Field((), np.int64)})
    buf.add(obs=0.0, action=1, reward=0.0, terminated=False, truncated=False)
    with pytest.raises(rr.EmptyBufferError, match="1 running"):
        buf.to_minari("empty-v0", progress=False)
    with pytest.raises(rr.FieldError, match="act"):
        buf.to_minari("empty-v0", action_field="act", progress=False)
    vec = Buffer(10, {"obs": rr.Field((), np.float32), "action": rr.Field((), np.int64),
                      "reward": rr.Field((2,), np.float32)})  # fmt: skip
    with pytest.raises(rr.FieldError, match="scalar reward"):
        vec.to_minari("vec-v0", progress=False)
    with pytest.raises(rr.ConfigError, match="num_envs"):
        Buffer.from_minari("empty-v0", num_envs=2)


def test_missing_dataset_is_not_downloaded(minari_path: Any, monkeypatch: Any) -> None:
    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("from_minari tried to download")

    monkeypatch.setattr(minari, "download_dataset", no_network)
    with pytest.raises(FileNotFoundError):
        Buffer.from_minari("nobody/nothing-v0", progress=False)


def collect_cartpole(n_episodes: int) -> Any:
    """A dataset written by Minari's writer from CartPole episodes (random actions).

    (Minari's DataCollector leaks a TemporaryDirectory per dataset, a ResourceWarning that the
    test suite treats as an error, so the episodes are collected here and handed to
    ``create_dataset_from_buffers``.)
    """
    from minari.data_collector import EpisodeBuffer

    env = gym.make("CartPole-v1", max_episode_steps=40)
    rng = np.random.default_rng(0)
    episodes = []
    for k in range(n_episodes):
        obs, _ = env.reset(seed=k)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        done = False
        while not done:
            action = int(rng.integers(2))
            obs, reward, term, trunc, _ = env.step(action)
            observations.append(obs)
            actions.append(action)
            rewards.append(reward)
            terms.append(term)
            truncs.append(trunc)
            done = term or trunc
        episodes.append(
            EpisodeBuffer(id=k, observations=np.array(observations), actions=np.array(actions),
                          rewards=rewards, terminations=terms, truncations=truncs)
        )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari's metadata reminders
        return minari.create_dataset_from_buffers(
            "cartpole/random-v0", episodes, env=env, algorithm_name="random", data_format="arrow"
        )


def test_dataset_written_by_minari(minari_path: Any) -> None:
    dataset = collect_cartpole(6)
    buf = Buffer.from_minari(dataset, n_step=2, progress=False)
    ours = episodes_of(buf)
    theirs = list(dataset.iterate_episodes())
    assert len(ours) == len(theirs) == 6
    truncated_seen = False
    for mine, ep in zip(ours, theirs, strict=True):
        n = len(ep.rewards)
        np.testing.assert_array_equal(mine.obs, ep.observations[:n])
        np.testing.assert_array_equal(mine.next_obs[-1], ep.observations[n])
        np.testing.assert_array_equal(mine.next_obs[:-1], ep.observations[1:n])
        np.testing.assert_array_equal(mine.action, ep.actions)
        np.testing.assert_array_equal(mine.reward, ep.rewards)
        np.testing.assert_array_equal(mine.terminated, ep.terminations)
        np.testing.assert_array_equal(mine.truncated, ep.truncations)
        truncated_seen |= bool(ep.truncations[-1])
    assert truncated_seen  # both kinds of ends occur (40-step limit vs falling pole)
    assert len(buf) == dataset.total_steps
    # And back out: the same dataset again, written by rlreplay.
    out = buf.to_minari("cartpole/again-v0", progress=False)
    again = list(out.dataset.iterate_episodes())
    for ep, ep2 in zip(theirs, again, strict=True):
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(ep, key), getattr(ep2, key))


def test_smaller_capacity_keeps_newest_and_progress_bar(minari_path: Any, capsys: Any) -> None:
    dataset = collect_cartpole(5)
    buf = Buffer.from_minari(dataset, capacity=30, progress=True)
    assert "from_minari" in capsys.readouterr().err
    last = list(dataset.iterate_episodes())[-1]
    newest = episodes_of(buf)[-1]
    np.testing.assert_array_equal(newest.obs, last.observations[:-1])
