"""The TorchRL adapter's pure parts: how TensorDict leaves are sorted into core fields, and
where one env's steps stop following each other."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

from tensordict import TensorDict  # noqa: E402

import rlreplay as rr  # noqa: E402
from rlreplay.integrations.torchrl.layout import Layout, breaks  # noqa: E402


def collector_like(T: int = 3) -> TensorDict:
    z = torch.zeros
    return TensorDict(
        {
            "pixels": z(T, 2, 2, dtype=torch.uint8),
            "observation": z(T, 4),
            "action": z(T, 2, dtype=torch.int64),
            "done": z(T, 1, dtype=torch.bool),
            "terminated": z(T, 1, dtype=torch.bool),
            ("collector", "traj_ids"): z(T, dtype=torch.int64),
            "td_error": z(T, 1),
            "index": z(T, dtype=torch.int64),
            "next": {
                "pixels": z(T, 2, 2, dtype=torch.uint8),
                "observation": z(T, 4),
                "reward": z(T, 1, dtype=torch.float64),
                "done": z(T, 1, dtype=torch.bool),
                "terminated": z(T, 1, dtype=torch.bool),
                "original_reward": z(T, 1),
            },
        },
        batch_size=[T],
    )


def test_leaves_are_sorted_into_observations_steps_and_next_only_entries() -> None:
    layout = Layout.of(collector_like(), ignore=("td_error",))
    assert [(e.key, e.name, e.shape) for e in layout.obs] == [
        (("pixels",), "o0", (2, 2)),
        (("observation",), "o1", (4,)),
    ]
    assert [(e.key, e.name) for e in layout.step] == [
        (("action",), "s0"),
        (("done",), "s1"),
        (("terminated",), "s2"),
        (("collector", "traj_ids"), "s3"),
    ]
    assert [(e.key, e.name) for e in layout.next_only] == [(("original_reward",), "n0")]
    assert layout.reward == ((1,), torch.float64)
    assert layout.flags == (("done", (1,)), ("terminated", (1,)))
    fields = layout.fields()
    assert fields["o0"] == rr.Field((2, 2), np.uint8, observation=True)
    assert fields["s3"] == rr.Field((), np.int64)
    assert "reward" not in fields


def test_values_take_done_flags_from_next() -> None:
    td = collector_like(4)
    td["next", "done"][1] = True  # done without terminated: a truncation
    td["next", "done"][3] = True
    td["next", "terminated"][3] = True
    values = Layout.of(td, ignore=("td_error",)).arrays(td)
    assert values["terminated"].tolist() == [False, False, False, True]
    assert values["truncated"].tolist() == [False, True, False, False]
    assert values["reward"].shape == (4,)
    assert values["next_o1"].shape == (4, 4)


@pytest.mark.parametrize(
    ("next_obs", "ended", "expected"),
    [
        ([1, 2, 3, 4], [0, 0, 0, 0], []),  # one trajectory
        ([1, 9, 3, 4], [0, 1, 0, 0], []),  # an episode end: the next step starts anew
        ([1, 9, 3, 4], [0, 0, 0, 0], [1]),  # step 2 does not follow step 1
        ([9, 9, 9, 9], [0, 0, 1, 0], [0, 1]),  # ... nor 1 after 0; 3 after 2 starts anew
    ],
)
def test_breaks_are_steps_not_followed_by_their_successor(
    next_obs: list[int], ended: list[int], expected: list[int]
) -> None:
    obs = np.array([0, 1, 2, 3], np.float32)[:, None]
    values = {
        "o0": obs,
        "next_o0": np.array(next_obs, np.float32)[:, None],
        "terminated": np.array(ended, bool),
        "truncated": np.zeros(4, bool),
    }
    assert breaks(values, ["o0"]).tolist() == expected


def test_nan_observations_compare_by_their_bytes() -> None:
    nan = np.full((2, 1), np.nan, np.float32)
    values = {"o0": nan, "next_o0": nan.copy(), "terminated": np.zeros(2, bool),
              "truncated": np.zeros(2, bool)}  # fmt: skip
    assert breaks(values, ["o0"]).tolist() == []
