"""ReAgent front-end: ``replay_buffer_to_pre_timeline_df`` builds reagent 0.1's frame (issue 13).

reagent 0.1's ``replay_buffer_to_pre_timeline_df`` (``reagent/replay_memory/utils.py``,
BSD-licensed, Copyright (c) Facebook, Inc. and its affiliates) takes ``n = replay_buffer.size``
rows of ``sample_transition_batch_tensor(batch_size=n)`` and builds, in this column order:
``ds`` (``"2019-01-01"``); ``state_features`` (``_dense_to_sparse(batch.state)``: ``{i:
v.item()}``, int keys, after ``assert len(dense.shape) == 2``); ``action`` (discrete:
``str(a.item())`` after asserting ``(B, 1)``; else ``_dense_to_sparse``); ``mdp_id``
(``batch.mdp_id.tolist()``, so one-element lists); ``sequence_number``;
``action_probability`` (``np.exp(batch.log_prob.squeeze(1))``); ``reward``; ``metrics``
(``{"reward": r}``); then, for discrete actions, ``possible_actions_mask`` and
``possible_actions`` (every distinct action of the batch as a str, ``[]`` on terminal rows).
Missing extras raise ``AttributeError`` (``batch.sequence_number``), an empty buffer what its
``sample_index_batch(0)`` raises.

One deliberate difference (a real bug of 0.1): its ``batch_size=n`` draw is *with replacement*,
so the exported dataset silently loses about a third of the transitions and repeats others
(side by side: 2,693 rows drawn by 0.1 covered 1,801 of the 2,693 valid slots). The front-end
exports every valid slot once, in slot order, each row being 0.1's read of that slot.

The expected frames were transcribed from running reagent 0.1's own function (``/tmp/orig``,
NumPy 2 with ``np.bool`` available, torch, pandas; its ``np.empty`` store zeroed as a fresh
process's memory reads) on the same adds, its draw replaced by ``indices=`` every valid slot. A
scratch driver compared both side by side on 1,610 exports of 300 random runs (uniform and
prioritized, ``stack_size`` 1-3, ``update_horizon`` 1-3, discrete and continuous actions,
``return_everything_as_stack``, random ``set_index_valid_status`` calls): the 804 frames 0.1
builds were equal (columns, dtypes, every value and its Python type; 195 rows read slots set
valid by hand that hold no step), and the other 806 calls raised 0.1's exception type.
Each row of 0.1's actual (drawn) frame was a row of the front-end's.

Step ``g`` (from 0) has observation ``g + 1`` (every component), action ``g % 5`` (continuous:
``[(g % 3) / 2, -(g % 4) / 2]``), reward ``g + 1``, extras ``mdp_id`` = its episode,
``sequence_number`` = its position, ``log_prob = -(g % 4) / 4``, priority ``g % 4 + 1``;
``gamma = 0.5``.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from rlreplay.compat.reagent import PrioritizedReplayBuffer, ReplayBuffer
from rlreplay.compat.reagent.circular_replay_buffer import ReplayElement
from rlreplay.compat.reagent.utils import DEFAULT_DS, replay_buffer_to_pre_timeline_df
from rlreplay.errors import ReplayError

pd = pytest.importorskip("pandas")

EXTRAS = [
    ReplayElement("mdp_id", (), np.int64),
    ReplayElement("sequence_number", (), np.int64),
    ReplayElement("log_prob", (), np.float32),
]

# name: (prioritized, stack_size, update_horizon, capacity, observation_shape, observation
#        dtype, discrete, episodes [(length, terminal)], set_index_valid_status calls)
# fmt: off
SPECS: dict[str, Any] = {
    # slot 0 a padding row, slot 6 never written, slot 4 the newest step (window unknown)
    "hand_set_padding_and_unwritten": (
        False, 2, 1, 7, (), np.float32, True, [(2, True), (1, False)],
        [(0, True), (6, True), (-3, True)],
    ),
    # the newest slots 2 and 3: n-step windows over slots never written
    "newest_horizon_3": (
        False, 1, 3, 6, (2,), np.float32, True, [(4, False)], [(3, True), (2, True)],
    ),
    # a wrapped ring: stacks over overwritten rows (slot 7), the newest step (4), a padding
    # row whose stack holds the newest steps (5)
    "wrapped_stale_k3": (
        True, 3, 2, 8, (), np.uint8, True, [(3, True), (4, False), (2, False)],
        [(1, True), (7, True), (4, True), (5, True)],
    ),
    "continuous_horizon_2": (
        True, 1, 2, 6, (2,), np.float32, False, [(2, True), (3, False)], [(5, True), (-1, True)],
    ),
    "stack_2_horizon_2_wrapped": (
        False, 2, 2, 5, (), np.float32, False, [(3, False), (3, True)], [(4, True)],
    ),
}
# fmt: on

# reagent 0.1's frame of each scenario (ds left out: DEFAULT_DS on every row)
EXPECTED: dict[str, dict[str, list[Any]]] = {
    "hand_set_padding_and_unwritten": {
        "state_features": [
            {0: 0.0, 1: 0.0},
            {0: 0.0, 1: 1.0},
            {0: 1.0, 1: 2.0},
            {0: 0.0, 1: 3.0},
            {0: 0.0, 1: 0.0},
        ],
        "action": ["0", "0", "1", "2", "0"],
        "mdp_id": [[0], [0], [0], [1], [0]],
        "sequence_number": [0, 0, 1, 0, 0],
        "action_probability": [1.0, 1.0, 0.7788007259368896, 0.6065306663513184, 1.0],
        "reward": [0.0, 1.0, 2.0, 3.0, 0.0],
        "metrics": [
            {"reward": 0.0},
            {"reward": 1.0},
            {"reward": 2.0},
            {"reward": 3.0},
            {"reward": 0.0},
        ],
        "possible_actions_mask": [[1, 1, 1], [1, 1, 1], [], [1, 1, 1], [1, 1, 1]],
        "possible_actions": [
            ["0", "1", "2"],
            ["0", "1", "2"],
            [],
            ["0", "1", "2"],
            ["0", "1", "2"],
        ],
    },
    "newest_horizon_3": {
        "state_features": [{0: 1.0, 1: 1.0}, {0: 3.0, 1: 3.0}, {0: 4.0, 1: 4.0}],
        "action": ["0", "2", "3"],
        "mdp_id": [[0], [0], [0]],
        "sequence_number": [0, 2, 3],
        "action_probability": [1.0, 0.6065306663513184, 0.4723665416240692],
        "reward": [2.75, 5.0, 4.0],
        "metrics": [{"reward": 2.75}, {"reward": 5.0}, {"reward": 4.0}],
        "possible_actions_mask": [[1, 1, 1], [1, 1, 1], [1, 1, 1]],
        "possible_actions": [["0", "2", "3"], ["0", "2", "3"], ["0", "2", "3"]],
    },
    "wrapped_stale_k3": {
        "state_features": [
            {0: 0, 1: 4, 2: 5},
            {0: 4, 1: 5, 2: 6},
            {0: 5, 1: 6, 2: 7},
            {0: 7, 1: 8, 2: 9},
            {0: 8, 1: 9, 2: 0},
            {0: 0, 1: 0, 2: 4},
        ],
        "action": ["4", "0", "1", "3", "0", "3"],
        "mdp_id": [[1], [1], [1], [2], [0], [1]],
        "sequence_number": [1, 2, 3, 1, 0, 0],
        "action_probability": [
            1.0,
            0.7788007259368896,
            0.6065306663513184,
            1.0,
            1.0,
            0.4723665416240692,
        ],
        "reward": [8.0, 9.5, 11.0, 9.0, 0.0, 6.5],
        "metrics": [
            {"reward": 8.0},
            {"reward": 9.5},
            {"reward": 11.0},
            {"reward": 9.0},
            {"reward": 0.0},
            {"reward": 6.5},
        ],
        "possible_actions_mask": [
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1, 1, 1],
        ],
        "possible_actions": [
            ["0", "1", "3", "4"],
            ["0", "1", "3", "4"],
            ["0", "1", "3", "4"],
            ["0", "1", "3", "4"],
            ["0", "1", "3", "4"],
            ["0", "1", "3", "4"],
        ],
    },
    "continuous_horizon_2": {
        "state_features": [{0: 1.0, 1: 1.0}, {0: 2.0, 1: 2.0}, {0: 3.0, 1: 3.0}, {0: 0.0, 1: 0.0}],
        "action": [{0: 0.0, 1: 0.0}, {0: 0.5, 1: -0.5}, {0: 1.0, 1: -1.0}, {0: 0.0, 1: 0.0}],
        "mdp_id": [[0], [0], [1], [0]],
        "sequence_number": [0, 1, 0, 0],
        "action_probability": [1.0, 0.7788007259368896, 0.6065306663513184, 1.0],
        "reward": [2.0, 2.0, 5.0, 0.5],
        "metrics": [{"reward": 2.0}, {"reward": 2.0}, {"reward": 5.0}, {"reward": 0.5}],
    },
    "stack_2_horizon_2_wrapped": {
        "state_features": [{0: 4.0, 1: 5.0}, {0: 5.0, 1: 6.0}, {0: 2.0, 1: 3.0}, {0: 3.0, 1: 4.0}],
        "action": [{0: 0.5, 1: 0.0}, {0: 1.0, 1: -0.5}, {0: 1.0, 1: -1.0}, {0: 0.0, 1: -1.5}],
        "mdp_id": [[1], [1], [0], [1]],
        "sequence_number": [1, 2, 2, 0],
        "action_probability": [1.0, 0.7788007259368896, 0.6065306663513184, 0.4723665416240692],
        "reward": [8.0, 6.0, 5.0, 6.5],
        "metrics": [{"reward": 8.0}, {"reward": 6.0}, {"reward": 5.0}, {"reward": 6.5}],
    },
}

DTYPES = ["object", "object", "object", "object", "int64", "float64", "float64", "object"]


def build(spec: Any, *, extras: list[Any] | None = EXTRAS, **kw: Any) -> Any:
    pri, k, n, cap, obs_shape, odt, disc, episodes, hand_set = spec
    buf = (PrioritizedReplayBuffer if pri else ReplayBuffer)(
        observation_shape=obs_shape,
        stack_size=k,
        replay_capacity=cap,
        batch_size=2,
        update_horizon=n,
        gamma=0.5,
        observation_dtype=odt,
        action_shape=() if disc else (2,),
        action_dtype=np.int32 if disc else np.float32,
        extra_storage_types=extras,
        **kw,
    )
    g = 0
    for e, (length, terminal) in enumerate(episodes):
        for t in range(length):
            obs = np.full(obs_shape, g + 1, np.float32)
            act = g % 5 if disc else np.array([(g % 3) * 0.5, -(g % 4) * 0.5], np.float32)
            args: list[Any] = [obs, act, float(g + 1), terminal and t == length - 1]
            if extras:
                args += [e, t, -0.25 * (g % 4)]
            if pri:
                args.append(float(g % 4 + 1))
            buf.add(*args)
            g += 1
    for slot, flag in hand_set:
        buf.set_index_valid_status(slot, flag)
    return buf


def typed(x: Any) -> Any:
    """A value with the Python type of every part (1 and 1.0 and True differ)."""
    if isinstance(x, dict):
        return tuple((typed(k), typed(v)) for k, v in x.items())
    if isinstance(x, list):
        return ("list", tuple(typed(v) for v in x))
    if isinstance(x, float) and math.isnan(x):
        return (float, "nan")
    return (type(x), x)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_frame_is_reagent_01s(name: str) -> None:
    spec = SPECS[name]
    buf = build(spec)
    df = replay_buffer_to_pre_timeline_df(spec[6], buf)
    expected = EXPECTED[name]
    assert list(df.columns) == ["ds", *expected]
    discrete = ["object", "object"] if spec[6] else []
    # Columns of Python strings (``ds``; a discrete ``action``) get the dtype pandas infers for
    # strings, as 0.1's ``pd.DataFrame`` of lists does: object before pandas 3, str from 3 on.
    text = str(pd.Series(["x"]).dtype)
    want = [text if i == 0 or (i == 2 and spec[6]) else d for i, d in enumerate(DTYPES)]
    assert [str(d) for d in df.dtypes] == want + discrete
    assert len(df) == buf.size == len(expected["reward"])
    assert list(df.index) == list(range(buf.size))
    assert df.ds.tolist() == [DEFAULT_DS] * buf.size
    for column, values in expected.items():
        assert [typed(v) for v in df[column].tolist()] == [typed(v) for v in values], column


def test_rows_are_the_slot_reads_in_slot_order() -> None:
    """Every valid slot once, in slot order, each row the sampler's (0.1's) read of the slot."""
    spec = SPECS["wrapped_stale_k3"]
    buf = build(spec)
    valid = np.flatnonzero([buf.is_valid_transition(i) for i in range(spec[3])])
    batch = buf.sample_transition_batch(batch_size=valid.size, indices=valid)
    df = replay_buffer_to_pre_timeline_df(True, buf)
    assert [list(s.values()) for s in df.state_features] == batch.state.tolist()
    assert df.reward.tolist() == batch.reward[:, 0].tolist()
    assert df.sequence_number.tolist() == batch.sequence_number[:, 0].tolist()
    assert df.mdp_id.tolist() == batch.mdp_id.tolist()


def test_the_global_generators_are_left_alone() -> None:
    """0.1 draws its rows from np.random (uniform) or random (prioritized); the front-end's
    export of every valid slot draws nothing, so a seeded run goes on as without the export."""
    for name in ("newest_horizon_3", "continuous_horizon_2"):
        buf = build(SPECS[name])
        np_state: Any = np.random.get_state()  # noqa: NPY002
        py_state = random.getstate()
        replay_buffer_to_pre_timeline_df(SPECS[name][6], buf)
        after: Any = np.random.get_state()  # noqa: NPY002
        assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1])
        assert after[2:] == np_state[2:] and random.getstate() == py_state


def _scalar_spec(**changes: Any) -> Any:
    base = dict(
        pri=False, k=1, n=1, cap=6, shape=(2,), dtype=np.float32, disc=True, eps=[(2, True)]
    )
    base.update(changes)
    return (*base.values(), [])


# (spec, constructor keywords, extras, exception type 0.1 raises; what raises it in 0.1)
ERRORS: dict[str, Any] = {
    # sample_index_batch(0): "Cannot sample 0 since there are no valid indices so far."
    "uniform_empty": (_scalar_spec(eps=[]), {}, EXTRAS, RuntimeError),
    # the sum tree's stratified_sample: "Cannot sample from an empty sum tree."
    "prioritized_empty_tree": (_scalar_spec(pri=True, eps=[]), {}, EXTRAS, Exception),
    # stratified_sample(0) -> np.array([]) (float64) indexes the store: IndexError
    "prioritized_no_valid_slot": (_scalar_spec(pri=True, eps=[(1, False)]), {}, EXTRAS, IndexError),
    # batch.sequence_number
    "missing_extras": (_scalar_spec(), {}, None, AttributeError),
    # _dense_to_sparse(batch.state) of a (B, 2, 2) stack
    "stacked_vectors": (_scalar_spec(k=2), {}, EXTRAS, AssertionError),
    # _dense_to_sparse of a (B, 2, 2, 1) image state
    "image_observations": (_scalar_spec(shape=(2, 2)), {}, EXTRAS, AssertionError),
    # sample_transition_batch_tensor: t.squeeze(2) of a (B, 1) state
    "scalar_observations_stack_1": (_scalar_spec(shape=()), {}, EXTRAS, IndexError),
    # is_discrete_action with (2,) actions: "discrete action batch with shape torch.Size([B, 2])"
    "discrete_vector_actions": (_scalar_spec(disc=False), {}, EXTRAS, AssertionError),
    # sample_transition_batch: "Uncertain how to do this without double counting.."
    "stacked_n_step_rewards": (
        _scalar_spec(n=2),
        {"return_everything_as_stack": True},
        EXTRAS,
        NotImplementedError,
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_raises_where_reagent_01_raises(name: str) -> None:
    spec, kw, extras, error = ERRORS[name]
    buf = build(spec, extras=extras, **kw)
    before = buf.size
    with pytest.raises(error) as info:
        replay_buffer_to_pre_timeline_df(True, buf)
    assert isinstance(info.value, ReplayError) or name == "uniform_empty"
    assert buf.size == before
    assert FRAGMENTS.get(name, "") in str(info.value)


# what each message names (0.1's own Exception for the empty tree is caught by any except)
FRAGMENTS = {
    "prioritized_empty_tree": "empty sum tree",
    "prioritized_no_valid_slot": "integer",
    "missing_extras": "sequence_number",
    "stacked_vectors": "(2, 2, 2)",
    "scalar_observations_stack_1": "stack_size=1",
    "discrete_vector_actions": "(2, 2)",
    "stacked_n_step_rewards": "update_horizon=2",
}
