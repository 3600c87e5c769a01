"""``storage="torch"`` on the core's constructors: ``rr.ReplayBuffer`` and
``rr.PrioritizedReplayBuffer`` make the device buffers of :mod:`rlreplay.torch` with the same
arguments; what the device buffer does not offer is refused by name unless left at its default;
subclasses keep the host storages."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rlreplay as rr  # noqa: E402
import rlreplay.torch as rrt  # noqa: E402

FIELDS = {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)}


def steps(n: int, num_envs: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        out.append(
            {
                "obs": rng.standard_normal((num_envs, 3)).astype(np.float32),
                "action": rng.integers(0, 4, num_envs),
                "reward": rng.standard_normal(num_envs).astype(np.float32),
                "terminated": rng.random(num_envs) < 0.1,
                "truncated": rng.random(num_envs) < 0.05,
                "next_obs": rng.standard_normal((num_envs, 3)).astype(np.float32),
            }
        )
    return out


def test_the_core_constructors_make_device_buffers() -> None:
    kw: dict[str, Any] = dict(num_envs=4, n_step=3, gamma=0.9, frame_stack=2, seed=5)
    routed: Any = rr.ReplayBuffer(64, FIELDS, storage="torch", device="cpu", **kw)
    direct = rrt.DeviceReplayBuffer(64, FIELDS, device="cpu", **kw)
    assert type(routed) is rrt.DeviceReplayBuffer
    assert isinstance(
        rr.PrioritizedReplayBuffer(64, FIELDS, storage="torch", alpha=0.7, **kw),
        rrt.DevicePrioritizedReplayBuffer,
    )
    for step in steps(30, 4):
        routed.add(**step)
        direct.add(**step)
    a, b = routed.sample(16), direct.sample(16)  # same arguments, same seed: same draws
    assert sorted(a) == sorted(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_device_defaults_to_the_cpu() -> None:
    buf: Any = rr.ReplayBuffer(16, FIELDS, storage="torch")
    assert buf.storage.steps["obs"].device.type == "cpu"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("record_episodic_return", True),
        ("path", "/tmp/x"),
        ("default_return", 0.0),
    ],
)
def test_what_the_device_buffer_lacks_is_refused_by_name(name: str, value: Any) -> None:
    with pytest.raises(rr.ConfigError, match=rf"^{name}: storage='torch' does not offer it"):
        rr.ReplayBuffer(16, FIELDS, storage="torch", **{name: value})


def test_defaults_pass_and_as_must_be_torch() -> None:
    buf: Any = rr.ReplayBuffer(
        16, FIELDS, storage="torch", transforms=[], rate_limiter=None, as_="torch",
        record_episodic_return=False, path=None,
    )  # fmt: skip
    assert type(buf) is rrt.DeviceReplayBuffer
    with pytest.raises(rr.ConfigError, match="as_: a storage='torch' buffer returns torch"):
        rr.ReplayBuffer(16, FIELDS, storage="torch", as_="numpy")


def test_subclasses_and_other_storages_stay_on_the_host() -> None:
    class Mine(rr.ReplayBuffer):
        pass

    with pytest.raises(rr.ConfigError, match="storage: expected 'memory'"):
        Mine(16, FIELDS, storage="torch")
    with pytest.raises(rr.ConfigError, match=r"or 'torch' for rr\.ReplayBuffer"):
        rr.ReplayBuffer(16, FIELDS, storage="cuda")
    assert type(rr.ReplayBuffer(16, FIELDS)) is rr.ReplayBuffer
    with pytest.raises(TypeError, match="finals_per_env"):
        rr.ReplayBuffer(16, FIELDS, finals_per_env=2)  # type: ignore[call-arg]  # device-only


def test_rr_load_into_a_device_buffer(tmp_path: Any) -> None:
    buf: Any = rr.PrioritizedReplayBuffer(64, FIELDS, num_envs=4, n_step=2, storage="torch")
    for step in steps(30, 4):
        buf.add(**step)
    path = tmp_path / "replay.rr"
    buf.save(path)
    again: Any = rr.load(path, storage="torch", device="cpu", seed=3)
    host = rr.load(path)
    assert type(again) is rrt.DevicePrioritizedReplayBuffer
    assert type(host) is rr.PrioritizedReplayBuffer
    ids = host.sampleable_ids()
    assert again.sampleable_ids().tolist() == ids.tolist()
    mine, theirs = again.get_transitions(torch.from_numpy(ids)), host.get_transitions(ids)
    for key in ("obs", "reward", "next_obs", "discount"):
        np.testing.assert_array_equal(mine[key].numpy(), theirs[key], err_msg=key)
    with pytest.raises(rr.ConfigError, match=r"^transforms: storage='torch' loads"):
        rr.load(path, storage="torch", transforms=[])
