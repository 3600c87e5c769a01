"""ReAgent's prioritized checkpoints: the pickled ``sum_tree`` file, read safely and written back.

ReAgent's ``PrioritizedReplayBuffer`` keeps ``self.sum_tree = sum_tree.SumTree(capacity)`` and
saves with Dopamine's ``save``: every public attribute to ``<name>_ckpt.<N>.gz``, arrays with
``np.save(..., allow_pickle=False)``, anything else with ``pickle.dump`` (so the sum tree is a
pickled ``reagent.replay_memory.sum_tree.SumTree``, state ``{"nodes": [...],
"max_recorded_priority": ...}``). ``ReAgentSumTree`` below transcribes ReAgent's ``SumTree``
(``__init__``, ``set``, ``get``, ``sample``); the fixture registers it under ReAgent's module
path in ``sys.modules`` so ``pickle`` writes (and reads) exactly the global ReAgent's files name.
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.compat.reagent import PrioritizedReplayBuffer
from rlreplay.compat.reagent._pickled import RestrictedUnpickler, loads_sum_tree
from rlreplay.compat.reagent.sum_tree import SumTree
from tests.compat.test_reagent import LOG_PROB, RefReAgent, fill, make, obs_of

MODULE = "reagent.replay_memory.sum_tree"


class ReAgentSumTree:
    """ReAgent's ``SumTree`` (``reagent/replay_memory/sum_tree.py``), transcribed."""

    def __init__(self, capacity: int) -> None:
        assert isinstance(capacity, int)
        self.nodes: list[np.ndarray] = []
        tree_depth = int(math.ceil(np.log2(capacity)))  # noqa: RUF046 (ReAgent's line)
        level_size = 1
        for _ in range(tree_depth + 1):
            self.nodes.append(np.zeros(level_size))
            level_size *= 2
        self.max_recorded_priority = 1.0

    def _total_priority(self) -> float:
        return float(self.nodes[0][0])

    def sample(self, query_value: float) -> int:
        query_value *= self._total_priority()
        node_index = 0
        for nodes_at_this_depth in self.nodes[1:]:
            left_child = node_index * 2
            left_sum = nodes_at_this_depth[left_child]
            if query_value < left_sum:
                node_index = left_child
            else:
                node_index = left_child + 1
                query_value -= left_sum
        return node_index

    def get(self, node_index: int) -> float:
        return float(self.nodes[-1][node_index])

    def set(self, node_index: int, value: float) -> None:
        if value < 0.0:
            raise ValueError(f"Sum tree values should be nonnegative. Got {value}")
        self.max_recorded_priority = max(value, self.max_recorded_priority)
        delta_value = value - self.nodes[-1][node_index]
        for nodes_at_this_depth in reversed(self.nodes):
            nodes_at_this_depth[node_index] += delta_value
            node_index //= 2


@pytest.fixture
def reagent_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[type]:
    """``ReAgentSumTree`` importable as ``reagent.replay_memory.sum_tree.SumTree``."""
    mod = types.ModuleType(MODULE)
    cls = type("SumTree", (ReAgentSumTree,), {"__module__": MODULE})
    mod.SumTree = cls  # type: ignore[attr-defined]
    for name in ("reagent", "reagent.replay_memory"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, MODULE, mod)
    yield cls


class RefPrioritized(RefReAgent):
    """ReAgent's prioritized ring: ``_add`` sets the cursor's leaf before each row (0 for the
    zero padding rows ``_add_zero_transition`` writes)."""

    def __init__(self, tree_cls: type, cap: int, k: int, n: int, gamma: float) -> None:
        super().__init__(cap, k, n, gamma)
        self.sum_tree = tree_cls(cap)

    def add_p(self, o: Any, a: int, r: float, term: bool, x: float, p: Any) -> None:
        start = self.add_count == 0 or self.terminal[(self.cursor() - 1) % self.cap]
        pads = self.k - 1 if start else 0
        for i in range(pads):
            self.sum_tree.set((self.cursor() + i) % self.cap, 0.0)
        self.sum_tree.set((self.cursor() + pads) % self.cap, p)
        self.add(o, a, r, term, x)

    def save(self, checkpoint_dir: Any, suffix: int, protocol: int | None = None) -> None:
        """Dopamine's ``save``: ``$store$`` arrays and public attributes, one gzip file each."""
        attrs: dict[str, Any] = {
            "$store$_observation": self.obs,
            "$store$_action": self.action,
            "$store$_reward": self.reward,
            "$store$_terminal": self.terminal,
            "$store$_log_prob": self.extra,
            "add_count": np.array(self.add_count),
            "invalid_range": (self.cursor() - self.n + np.arange(self.k + self.n)) % self.cap,
            "sum_tree": self.sum_tree,
        }
        for name, value in attrs.items():
            path = os.path.join(checkpoint_dir, f"{name}_ckpt.{suffix}.gz")
            with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb") as out:
                if isinstance(value, np.ndarray):
                    np.save(out, value, allow_pickle=False)
                else:
                    pickle.dump(value, out, protocol=protocol)


KW: dict[str, Any] = dict(
    stack_size=2, update_horizon=2, replay_capacity=13, extra_storage_types=[LOG_PROB]
)


def drive_both(ref: RefPrioritized, buf: Any, lengths: list[int]) -> None:
    rng = np.random.default_rng(3)
    for e, n in enumerate(lengths):
        for t in range(n):
            p = np.float32(rng.uniform(0.1, 3.0))  # TD errors come as NumPy values
            args = (obs_of(e, t), t % 3, float(t + 1), t == n - 1, -float(100 * e + t))
            ref.add_p(*args, p)
            buf.add(*args, p)


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5, None])
@pytest.mark.parametrize("lengths", [[4, 3], [6, 5, 9]])  # the second wraps the ring
def test_reagent_prioritized_checkpoint_loads(
    tmp_path: Any, reagent_module: type, protocol: int | None, lengths: list[int]
) -> None:
    ref = RefPrioritized(reagent_module, 13, 2, 2, 0.5)
    direct = make(PrioritizedReplayBuffer, **KW)
    drive_both(ref, direct, lengths)
    ref.save(tmp_path, 7, protocol)
    loaded = make(PrioritizedReplayBuffer, **KW)
    loaded.load(tmp_path, 7)
    slots = np.arange(13, dtype=np.int32)
    # The leaves ReAgent's tree holds, per slot, are the loaded priorities.
    np.testing.assert_array_equal(loaded.get_priority(slots), ref.sum_tree.nodes[-1][:13])
    np.testing.assert_array_equal(loaded.get_priority(slots), direct.get_priority(slots))
    assert loaded.sum_tree.max_recorded_priority == float(ref.sum_tree.max_recorded_priority)
    assert loaded._is_valid.tolist() == ref.valid.tolist()
    for x, y in zip(
        loaded.sample_all_valid_transitions(), direct.sample_all_valid_transitions(), strict=True
    ):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    # Sampling draws by the loaded priorities: only valid slots with mass, probability p_i.
    drawn = loaded.sample_index_batch(64).numpy()
    assert ref.valid[drawn].all() and (ref.sum_tree.nodes[-1][drawn] > 0).all()


def test_reagent_tree_with_torch_priorities_loads(tmp_path: Any, reagent_module: type) -> None:
    # ReAgent's set_priority(indices, td_errors) with a tensor of TD errors sets each leaf
    # from a 0-d tensor; max(value, max_recorded_priority) then keeps a tensor, and pickle
    # writes it through torch's storage bytes.
    import torch

    ref = RefPrioritized(reagent_module, 13, 2, 2, 0.5)
    direct = make(PrioritizedReplayBuffer, **KW)
    drive_both(ref, direct, [4, 3])
    td = torch.tensor([2.5, 4.0])
    for i, p in zip([1, 4], td, strict=True):
        ref.sum_tree.set(i, p)
    direct.set_priority(torch.tensor([1, 4]), td)
    assert isinstance(ref.sum_tree.max_recorded_priority, torch.Tensor)
    ref.save(tmp_path, 2)
    loaded = make(PrioritizedReplayBuffer, **KW)
    loaded.load(tmp_path, 2)
    slots = np.arange(13, dtype=np.int32)
    np.testing.assert_array_equal(loaded.get_priority(slots), direct.get_priority(slots))
    assert loaded.sum_tree.max_recorded_priority == 4.0


def test_reagent_tree_padded_past_capacity_loads(tmp_path: Any, reagent_module: type) -> None:
    # capacity 13 -> 16 leaves; ReAgent's set_priority on 13..15 puts mass on padding leaves
    # (no slot: its bug). Those leaves are no slot here and are dropped.
    ref = RefPrioritized(reagent_module, 13, 2, 2, 0.5)
    direct = make(PrioritizedReplayBuffer, **KW)
    drive_both(ref, direct, [5])
    ref.sum_tree.set(14, 9.0)
    ref.save(tmp_path, 0)
    loaded = make(PrioritizedReplayBuffer, **KW)
    loaded.load(tmp_path, 0)
    np.testing.assert_array_equal(
        loaded.get_priority(np.arange(13, dtype=np.int32)), ref.sum_tree.nodes[-1][:13]
    )
    assert loaded.sum_tree.max_recorded_priority == 9.0


class _Evil:
    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> Any:
        return self.func, self.args


@pytest.mark.parametrize(
    ("payload", "refused"),
    [
        (lambda marker: _Evil(os.system, f"touch {marker}"), "system"),
        (lambda marker: _Evil(eval, f"open({str(marker)!r}, 'w')"), "builtins.eval"),
        (lambda marker: _Evil(open, str(marker), "w"), "open"),
        (lambda marker: {"nodes": [_Evil(np.save, str(marker), np.zeros(1))]}, "numpy.save"),
        (lambda marker: _Evil(getattr, 0, "real"), "builtins.getattr"),
        (lambda marker: _Evil(types.SimpleNamespace), "types.SimpleNamespace"),
    ],
)
def test_hostile_pickles_are_refused_without_running(
    tmp_path: Any, payload: Any, refused: str
) -> None:
    buf = make(PrioritizedReplayBuffer, **KW)
    drive_both(RefPrioritized(ReAgentSumTree, 13, 2, 2, 0.5), buf, [4])
    buf.save(tmp_path, 0)
    marker = tmp_path / "ran"
    with gzip.open(tmp_path / "sum_tree_ckpt.0.gz", "wb") as f:
        pickle.dump(payload(marker), f)
    before = buf.get_priority(np.arange(13, dtype=np.int32))
    with pytest.raises(rr.CheckpointError, match=refused):
        buf.load(tmp_path, 0)
    assert not marker.exists()  # nothing the pickle names was called
    np.testing.assert_array_equal(
        buf.get_priority(np.arange(13, dtype=np.int32)), before
    )  # load changed nothing


@pytest.mark.parametrize(
    "state",
    [
        {"nodes": [np.zeros(1), np.zeros(3)]},  # a level of the wrong size
        {"nodes": [np.zeros(1), np.array([1.0, -1.0])]},  # a negative leaf
        {"nodes": [np.zeros(1), np.array([1.0, np.nan])]},
        {"nodes": [np.array(["a"])]},
        {"nodes": "x"},
        ["nodes"],
    ],
)
def test_malformed_sum_tree_states_are_checkpoint_errors(reagent_module: type, state: Any) -> None:
    if isinstance(state, dict):  # ReAgent's class with a state it would not have written
        obj = reagent_module.__new__(reagent_module)
        obj.__dict__.update(state)
        data = pickle.dumps(obj)
    else:  # not a SumTree at all
        data = pickle.dumps(state)
    with pytest.raises(rr.CheckpointError):
        loads_sum_tree(data)


def test_find_class_names_the_refused_global() -> None:
    import io

    with pytest.raises(rr.CheckpointError, match=r"refused global subprocess\.Popen"):
        RestrictedUnpickler(io.BytesIO(b"")).find_class("subprocess", "Popen")
    allowed = RestrictedUnpickler(io.BytesIO(b"")).find_class(MODULE, "SumTree")
    assert issubclass(allowed, SumTree)  # a throwaway subclass of the front-end's SumTree


@pytest.mark.parametrize(
    ("module", "name", "attr"),
    [
        (MODULE, "SumTree", "sample"),
        (MODULE, "SumTree", "__setstate__"),
        ("numpy.core.numeric", "_frombuffer", "__defaults__"),
        ("_codecs", "encode", "__kwdefaults__"),
        ("copyreg", "_reconstructor", "__defaults__"),
    ],
)
def test_build_on_a_global_patches_nothing_shared(module: str, name: str, attr: str) -> None:
    # GLOBAL, then BUILD with a slot state: pickle's setattr(obj, attr, None) on the object
    # find_class returned. It must reach only an object made for that one load.
    import numpy._core.numeric as numeric

    data = (
        b"\x80\x02c"
        + f"{module}\n{name}\n".encode()
        + b"N}X"
        + len(attr).to_bytes(4, "little")
        + attr.encode()
        + b"Ns\x86b."
    )
    watched = {"sample": SumTree.sample, "__setstate__": SumTree.__setstate__}
    defaults = numeric._frombuffer.__defaults__
    with pytest.raises(rr.CheckpointError):
        loads_sum_tree(data)
    assert SumTree.sample is watched["sample"] and SumTree.__setstate__ is watched["__setstate__"]
    assert numeric._frombuffer.__defaults__ == defaults
    tree = SumTree(2)  # the class still works
    tree.set(1, 2.0)
    assert tree.sample(0.5) == 1


def test_saved_checkpoint_is_what_reagent_reads_back(tmp_path: Any, reagent_module: type) -> None:
    ref = RefPrioritized(reagent_module, 13, 2, 2, 0.5)
    buf = make(PrioritizedReplayBuffer, **KW)
    drive_both(ref, buf, [6, 5, 9])
    buf.save(tmp_path, 4)
    # Dopamine's load: one file per public attribute, `$store$` arrays without pickle, the rest
    # (here the sum tree) with pickle.load. The extra `_is_valid` and `_is_padding` files are
    # ignored by ReAgent.
    want = {"$store$_" + n for n in ("observation", "action", "reward", "terminal", "log_prob")}
    want |= {"add_count", "invalid_range", "sum_tree", "_is_valid", "_is_padding"}
    assert {f.split("_ckpt.")[0] for f in os.listdir(tmp_path)} == want
    arrays = {}
    for name in want - {"sum_tree"}:
        with gzip.open(tmp_path / f"{name}_ckpt.4.gz") as f:
            arrays[name] = np.load(f, allow_pickle=False)
    np.testing.assert_array_equal(arrays["$store$_observation"], ref.obs)
    np.testing.assert_array_equal(arrays["$store$_terminal"], ref.terminal)
    assert arrays["$store$_terminal"].dtype == np.uint8
    assert int(arrays["add_count"]) == ref.add_count
    with gzip.open(tmp_path / "sum_tree_ckpt.4.gz") as f:
        tree = pickle.load(f)  # plain pickle, as ReAgent reads it
    assert type(tree) is reagent_module
    assert [len(level) for level in tree.nodes] == [len(x) for x in ref.sum_tree.nodes]
    for got, want_level in zip(tree.nodes, ref.sum_tree.nodes, strict=True):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want_level, rtol=1e-12)
    assert tree.max_recorded_priority == float(ref.sum_tree.max_recorded_priority)
    assert tree.sample(0.5) == ref.sum_tree.sample(0.5)
    # The front-end's own load of its own checkpoint is unchanged (and exact).
    loaded = make(PrioritizedReplayBuffer, **KW)
    loaded.load(tmp_path, 4)
    np.testing.assert_array_equal(
        loaded.get_priority(np.arange(13, dtype=np.int32)),
        buf.get_priority(np.arange(13, dtype=np.int32)),
    )
    assert loaded.sum_tree.max_recorded_priority == buf.sum_tree.max_recorded_priority


def test_pickled_file_names_only_reagents_and_numpys_globals(tmp_path: Any) -> None:
    import pickletools

    buf = make(PrioritizedReplayBuffer, **KW)
    drive_both(RefPrioritized(ReAgentSumTree, 13, 2, 2, 0.5), buf, [4])
    buf.save(tmp_path, 0)
    with gzip.open(tmp_path / "sum_tree_ckpt.0.gz") as f:
        data = f.read()
    strings = [arg for op, arg, _ in pickletools.genops(data) if isinstance(arg, str)]
    assert MODULE in strings and "numpy.core.multiarray" in strings
    assert not any("rlreplay" in s or "numpy._core" in s for s in strings)


def test_earlier_front_end_checkpoints_still_load(tmp_path: Any) -> None:
    # Earlier versions of the front-end wrote the leaves as a plain float64 array.
    buf = make(PrioritizedReplayBuffer, **KW)
    drive_both(RefPrioritized(ReAgentSumTree, 13, 2, 2, 0.5), buf, [6, 5])
    buf.save(tmp_path, 0)
    with gzip.open(tmp_path / "sum_tree_ckpt.0.gz", "wb") as f:
        np.save(
            f,
            buf.get_priority(np.arange(13, dtype=np.int32)).astype(np.float64),
            allow_pickle=False,
        )
    loaded = make(PrioritizedReplayBuffer, **KW)
    loaded.load(tmp_path, 0)
    np.testing.assert_array_equal(
        loaded.get_priority(np.arange(13, dtype=np.int32)),
        buf.get_priority(np.arange(13, dtype=np.int32)),
    )


def test_front_end_sum_tree_pickles_as_reagents() -> None:
    tree = SumTree(5)
    for i, p in enumerate([0.5, 1.0, 0.0, 2.5, 0.25]):
        tree.set(i, p)
    back = pickle.loads(pickle.dumps(tree))
    assert isinstance(back, SumTree)
    assert [x.tolist() for x in back.nodes] == [x.tolist() for x in tree.nodes]
    assert back.max_recorded_priority == 2.5
    assert back.sample(0.7) == tree.sample(0.7)
    assert set(tree.__getstate__()) == {"nodes", "max_recorded_priority"}  # ReAgent's state


# ---------------------------------------------------------------------- misfit store arrays
def _rewrite(tmp_path: Any, name: str, arr: np.ndarray) -> None:
    with gzip.open(tmp_path / f"$store$_{name}_ckpt.0.gz", "wb") as f:
        np.save(f, arr, allow_pickle=False)


def _stored(tmp_path: Any, name: str, suffix: int = 0) -> np.ndarray:
    with gzip.open(tmp_path / f"$store$_{name}_ckpt.{suffix}.gz") as f:
        out: np.ndarray = np.load(f, allow_pickle=False)
    return out


def test_store_arrays_longer_than_the_ring_load_their_first_rows(tmp_path: Any) -> None:
    # reagent 0.1's load sets ``self._store[name] = np.load(infile)`` whatever its shape; its
    # sampling reads ``self._store[key][indices % replay_capacity]`` and ``_add_transition``
    # writes ``self._store[name][cursor]`` with ``cursor < replay_capacity``, so rows past the
    # capacity are never used: load, sample and add work (side by side, /tmp/s5f5/misfit.py).
    buf = make(replay_capacity=5)
    fill(buf, [3])
    buf.save(tmp_path, 0)
    for name, extra in [("observation", np.full((2, 2), 99.0, np.float32)), ("terminal", [1, 1])]:
        _rewrite(tmp_path, name, np.concatenate([_stored(tmp_path, name), np.asarray(extra)]))
    loaded = make(replay_capacity=5)
    loaded.load(tmp_path, 0)
    indices = np.array([0, 1, 2])
    got, want = loaded.sample_transition_batch(3, indices), buf.sample_transition_batch(3, indices)
    for field in ("state", "action", "reward", "terminal"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    loaded.add(obs_of(1, 0), 0, 1.0, False)  # 0.1's add works there too
    assert loaded.add_count == 4


@pytest.mark.parametrize(
    "name, arr",
    [
        # 0.1: every add from cursor 4 on raises IndexError (index 4 out of bounds), forever
        ("observation", np.zeros((4, 2), np.float32)),
        ("terminal", np.zeros((4,), np.uint8)),
        # 0.1: every add raises ValueError (a (2,) observation into a (3,) row)
        ("observation", np.zeros((5, 3), np.float32)),
        ("observation", np.zeros((5,), np.float32)),
        # 0.1: every add broadcasts the scalar action into a (2,) row; batches come back (B, 2)
        ("action", np.zeros((5, 2), np.int32)),
    ],
)
def test_store_arrays_that_break_the_buffer_are_refused(
    tmp_path: Any, name: str, arr: np.ndarray
) -> None:
    # Deliberate difference 12 (docs/migrating/reagent.md): 0.1 loads these as they are and
    # the buffer is corrupted from then on; rlreplay refuses them at load and changes nothing.
    buf = make(replay_capacity=5)
    fill(buf, [3])
    buf.save(tmp_path, 0)
    _rewrite(tmp_path, name, arr)
    fresh = make(replay_capacity=5)
    fresh.add(obs_of(2, 0), 1, 1.0, True)
    with pytest.raises(rr.CheckpointError, match=rf"{name}: expected shape \(5,") as info:
        fresh.load(tmp_path, 0)
    assert isinstance(info.value, ValueError)
    assert str(arr.shape) in str(info.value)
    assert fresh.add_count == 1
    state = fresh.sample_transition_batch(1, np.array([0])).state
    np.testing.assert_array_equal(np.asarray(state).reshape(-1), obs_of(2, 0))


def _complex_of(arr: np.ndarray) -> np.ndarray:
    """``arr + 0.25``, with an imaginary part ``0.5 * (1 + i)`` on flat element ``i``."""
    imag = 0.5 * (1 + np.arange(arr.size)).reshape(arr.shape)
    return arr.astype(np.complex128) + 0.25 + 1j * imag


def _complex_warnings(call: Any) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [w.category.__name__ for w in caught]


@pytest.mark.parametrize(
    "name, field, want",
    [
        ("observation", "state", [[1.25, 1.25], [2.25, 2.25], [3.25, 3.25]]),
        ("action", "action", [[0], [1], [2]]),
        ("reward", "reward", [[1.25], [2.25], [3.25]]),
    ],
)
def test_complex_store_arrays_load_and_warn_on_each_sample(
    tmp_path: Any, name: str, field: str, want: list[list[float]]
) -> None:
    # reagent 0.1 (side by side, /tmp/s13/rc.py): ``load`` sets ``self._store[name] =
    # np.load(...)``, a complex array kept as it is, without a warning; each sample's
    # ``batch.astype(element.type)`` then raises NumPy's ComplexWarning once per element read
    # from it (x and next_x; state and next_state) and returns the real parts (0.25 + 1.0 ->
    # 1 for the int32 action); ``add`` writes into it and sampling goes on the same way.
    buf = make(replay_capacity=5)
    fill(buf, [3])
    buf.save(tmp_path, 0)
    dtype = _stored(tmp_path, name).dtype
    _rewrite(tmp_path, name, _complex_of(_stored(tmp_path, name)))
    loaded = make(replay_capacity=5)
    _, at_load = _complex_warnings(lambda: loaded.load(tmp_path, 0))
    assert at_load == []
    batch, caught = _complex_warnings(
        lambda: loaded.sample_transition_batch(3, np.array([0, 1, 2]))
    )
    assert caught == ["ComplexWarning", "ComplexWarning"]
    np.testing.assert_array_equal(np.asarray(getattr(batch, field)), want)
    assert np.asarray(batch.terminal).reshape(-1).tolist() == [False, False, True]
    loaded.add(obs_of(1, 0), 2, 7.0, False)
    batch, caught = _complex_warnings(lambda: loaded.sample_transition_batch(2, np.array([2, 3])))
    assert caught == ["ComplexWarning", "ComplexWarning"]
    assert np.asarray(batch.state).tolist() == [
        [3.25 if name == "observation" else 3.0] * 2,
        [101.0, 101.0],
    ]
    assert np.asarray(batch.reward).reshape(-1).tolist() == [3.25 if name == "reward" else 3, 7]
    with pytest.warns(np.exceptions.ComplexWarning, match="discards the imaginary part"):
        loaded.sample_transition_batch(1, np.array([0]))
    # 0.1 saves the complex array it holds (imaginary parts too); rlreplay saves the rows it
    # samples from, so a reload samples the same values (without warning again).
    loaded.save(tmp_path, 1)
    assert _stored(tmp_path, name, 1).dtype == dtype
    again = make(replay_capacity=5)
    again.load(tmp_path, 1)
    reread, caught = _complex_warnings(lambda: again.sample_transition_batch(2, np.array([2, 3])))
    assert caught == []
    np.testing.assert_array_equal(np.asarray(reread.state), np.asarray(batch.state))


@pytest.mark.parametrize("imag", [False, True])
def test_terminal_flags_load_as_0_1_reads_them(tmp_path: Any, imag: bool) -> None:
    # reagent 0.1 reads the terminal rows with ``astype(np.bool)``: any non-zero value ends
    # the window, a fraction (0.25) or an imaginary part alone (0.5j) too, and a complex
    # array does not warn there (side by side, /tmp/s13/rc.py).
    buf = make(replay_capacity=5)
    fill(buf, [4])
    buf.save(tmp_path, 0)
    flags = np.array([0, 0, 0, 0, 0], np.complex128 if imag else np.float64)
    flags[1] = 0.5j if imag else 0.25
    flags[3] = 2.5 + 1j if imag else 2.5
    _rewrite(tmp_path, "terminal", flags)
    loaded = make(replay_capacity=5)
    batch, caught = _complex_warnings(
        lambda: (loaded.load(tmp_path, 0), loaded.sample_transition_batch(3, np.array([0, 1, 3])))[
            1
        ]
    )
    assert caught == []
    assert np.asarray(batch.terminal).reshape(-1).tolist() == [False, True, True]
    loaded.save(tmp_path, 1)
    assert _stored(tmp_path, "terminal", 1)[:4].tolist() == [0, 1, 0, 2]
