"""The torch sum and min trees against the NumPy ones: every node bit for bit after random
batches of updates, the same leaves for the same uniforms and masses (rounding and ties
included), the same checks of host inputs, interchangeable states, and no host synchronisation
in updates and descents."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.sampling import MaxTree, MinTree, SumTree
from rlreplay.sampling.torch_trees import TorchMaxTree, TorchMinTree, TorchSumTree
from tests.torch_device.helpers import CountSyncs, no_host_sync

Array = np.ndarray[Any, Any]


def nodes(tree: TorchSumTree | TorchMinTree | TorchMaxTree) -> bytes:
    return np.ascontiguousarray(tree.nodes.to("cpu").numpy()).tobytes()


def tensor(a: Array, device: str) -> torch.Tensor:
    return torch.from_numpy(np.array(a)).to(device)


# Leaves that make rounding matter: zeros, subnormals, tiny and huge magnitudes side by side,
# repeated values (ties), powers of two.
SUM_VALUES = st.one_of(
    st.just(0.0),
    st.sampled_from([5e-324, 1e-300, 1e-17, 0.1, 0.5, 1.0, 3.0, 2.0**52, 1e15, 1e200]),
    st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False),
)
MIN_VALUES = st.one_of(
    st.sampled_from([0.0, -0.0, float("inf"), float("-inf"), 1.0, -1.0, 5e-324]),
    st.floats(allow_nan=False),
)


@st.composite
def batches(draw: st.DrawFn, capacity: int, values: st.SearchStrategy[float]) -> list[Any]:
    """A list of (indices, values) batches, duplicates included."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        k = draw(st.integers(0, 40))
        idx = draw(st.lists(st.integers(0, capacity - 1), min_size=k, max_size=k))
        vals = draw(st.lists(values, min_size=k, max_size=k))
        out.append((np.array(idx, np.int64), np.array(vals, np.float64)))
    return out


def boundary_masses(leaves: Array, total: float, rng: np.random.Generator) -> Array:
    """Masses on and next to the running sums of the leaves, ``0`` and ``total`` (where a
    rounding difference would change the leaf), plus uniform ones."""
    sums = np.cumsum(leaves)
    near = np.concatenate([sums, np.nextafter(sums, 0.0), np.nextafter(sums, np.inf)])
    near = near[(near >= 0.0) & (near <= total)]
    picks = near[rng.integers(0, near.size, 64)] if near.size else np.zeros(0)
    extra = [0.0, total, np.nextafter(total, 0.0)]
    return np.concatenate([picks, extra, rng.random(64) * total])


CAPACITIES = st.sampled_from([1, 2, 7, 8, 9, 63, 64, 65, 100, 511, 512, 513, 700])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_sum_tree_matches_the_numpy_tree(device: str, data: st.DataObject) -> None:
    """After every batch the nodes are the NumPy tree's bit for bit; samples (stratified or not)
    from the same uniforms and descents from the same masses give the same leaves."""
    capacity = data.draw(CAPACITIES, "capacity")
    ref, tree = SumTree(capacity), TorchSumTree(capacity, device)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), "seed"))
    for idx, vals in data.draw(batches(capacity, SUM_VALUES), "batches"):
        ref.set(idx, vals)
        tree.set(tensor(idx, device), tensor(vals, device))
        assert nodes(tree) == ref._tree.tobytes()
        assert float(tree.total) == ref.total
        if ref.total <= 0.0:
            continue
        for stratified in (True, False):
            n = int(rng.integers(1, 300))
            seed = int(rng.integers(2**32))
            want = ref.sample(n, np.random.default_rng(seed), stratified=stratified)
            uniforms = np.random.default_rng(seed).random(n)
            got = tree.sample(tensor(uniforms, device), stratified=stratified)
            assert got.device == torch.device(device)
            np.testing.assert_array_equal(got.cpu().numpy(), want)
        masses = boundary_masses(ref.get(np.arange(capacity)), ref.total, rng)
        got = tree.find_prefix_sum(tensor(masses, device))
        np.testing.assert_array_equal(got.cpu().numpy(), ref.find_prefix_sum(masses))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_min_and_max_trees_match_the_numpy_trees(device: str, data: st.DataObject) -> None:
    """Every node bit for bit (signed zeros and infinities included) after every batch."""
    capacity = data.draw(CAPACITIES, "capacity")
    mins, tmins = MinTree(capacity), TorchMinTree(capacity, device)
    maxs, tmaxs = MaxTree(capacity), TorchMaxTree(capacity, device)
    pairs: list[tuple[MinTree | MaxTree, TorchMinTree | TorchMaxTree]] = [
        (mins, tmins),
        (maxs, tmaxs),
    ]
    for idx, vals in data.draw(batches(capacity, MIN_VALUES), "batches"):
        for ref, tree in pairs:
            ref.set(idx, vals)
            tree.set(tensor(idx, device), tensor(vals, device))
            assert nodes(tree) == ref._tree.tobytes()
    assert float(tmins.min) == mins.min
    assert float(tmaxs.max) == maxs.max


def reaches_an_inner_end(tree: SumTree, mass: float) -> bool:
    """Whether the NumPy tree's descent of ``mass`` finds a mass at or past the end of a line
    between the root's and the leaves' (not there from the root on): a rounding case with its
    own rule for the levels below."""
    nodes, levels = tree._tree, tree._levels
    rest = mass if mass < tree.total else np.inf
    out = 0
    for d in range(1, levels.shape[0]):
        line = nodes[levels[d, 0] + out]
        prefix = np.cumsum(line)  # sequential: the tree's left-to-right sums
        count = int((prefix <= rest).sum())
        if count == 8:
            return bool(np.isfinite(rest)) and d < levels.shape[0] - 1
        rest = rest - (prefix[count - 1] if count else 0.0)
        out = out * 8 + count
    return False


@pytest.mark.parametrize(("capacity", "seed"), [(100, 189), (512, 45), (64, 0), (700, 1)])
def test_masses_next_to_prefix_sums(device: str, capacity: int, seed: int) -> None:
    """Masses next to the running sums of every line of a tree of awkward magnitudes give the
    NumPy tree's leaves. The first two trees (found by a search) have masses that rounding
    carries to the end of a line between the root's and the leaves'."""
    awkward = np.array([1.0, 1e-16, 3e-16, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 1 - 2**-53, 2**-53, 0.0,
                        1e16, 3.0, 7.0])  # fmt: skip
    rng = np.random.default_rng(seed)
    leaves = rng.choice(awkward, capacity) * rng.choice([1.0, 1.0, 1e-8, 1e8], capacity)
    ref, tree = SumTree(capacity), TorchSumTree(capacity, device)
    ref.set(np.arange(capacity), leaves)
    tree.set(np.arange(capacity), leaves)
    sums = np.unique(np.concatenate([np.cumsum(leaves), *np.cumsum(ref._tree, axis=1)]))
    masses = np.concatenate([sums + k * np.spacing(sums) for k in range(-4, 5)])
    masses = masses[(masses >= 0.0) & (masses <= ref.total)]
    got = tree.find_prefix_sum(tensor(masses, device))
    np.testing.assert_array_equal(got.cpu().numpy(), ref.find_prefix_sum(masses))
    if seed in (189, 45):
        assert any(reaches_an_inner_end(ref, m) for m in masses)  # the case is met


def test_large_batches_and_host_inputs(device: str) -> None:
    """Batches larger than the lower levels (the whole-level path), batches with many
    duplicates, and NumPy inputs give the NumPy tree's nodes and draws."""
    rng = np.random.default_rng(3)
    capacity = 100_000
    ref, tree = SumTree(capacity), TorchSumTree(capacity, device)
    mins, tmins = MinTree(capacity), TorchMinTree(capacity, device)
    for k in (capacity, 256, 5000, 1, 70_000):
        idx = rng.integers(0, capacity, k)
        vals = rng.random(k) * (rng.random(k) < 0.8)
        ref.set(idx, vals)
        mins.set(idx, vals)
        tree.set(idx, vals)  # NumPy inputs
        tmins.set(tensor(idx, device), tensor(vals, device))
        assert nodes(tree) == ref._tree.tobytes()
        assert nodes(tmins) == mins._tree.tobytes()
        uniforms = rng.random(4096)
        want = ref.sample(4096, np.random.default_rng(uniforms.view(np.uint64)[0]))
        got = tree.sample(tensor(np.random.default_rng(uniforms.view(np.uint64)[0]).random(4096),
                                 device))  # fmt: skip
        np.testing.assert_array_equal(got.cpu().numpy(), want)
    got_leaves = tree.get(np.array([[0, 5], [99_999, 7]]))
    assert got_leaves.shape == (2, 2)
    np.testing.assert_array_equal(got_leaves.cpu().numpy(), ref.get([[0, 5], [99_999, 7]]))


def test_duplicate_indices_keep_the_last_value(device: str) -> None:
    tree = TorchSumTree(10, device)
    idx = torch.tensor([3, 3, 5, 3, 5, 9], device=device)
    vals = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=torch.float64, device=device)
    tree.set(idx, vals)
    assert tree.get(torch.tensor([3, 5, 9], device=device)).tolist() == [4.0, 5.0, 6.0]
    assert float(tree.total) == 15.0
    tree.set(torch.tensor([1, 2], device=device), torch.tensor(0.5, dtype=torch.float64))
    assert tree.get(torch.tensor([1, 2])).tolist() == [0.5, 0.5]


def test_host_inputs_are_checked_as_the_numpy_tree_checks_them(device: str) -> None:
    """NumPy / Python inputs: the NumPy tree's errors, and nothing written."""
    tree = TorchSumTree(8, device)
    tree.set([1, 2], [1.0, 2.0])
    before = nodes(tree)
    with pytest.raises(rr.InvalidIdError):
        tree.set([1, 8], [1.0, 1.0])
    with pytest.raises(rr.PriorityError):
        tree.set([1, 2], [1.0, -1.0])
    with pytest.raises(rr.PriorityError):
        tree.set([1], [float("nan")])
    with pytest.raises(rr.DTypeError):
        tree.set([1.5], [1.0])
    with pytest.raises(rr.ShapeError):
        tree.set([1, 2], [1.0, 2.0, 3.0])
    with pytest.raises(rr.DTypeError):
        tree.set(torch.tensor([1.0]), torch.tensor([1.0]))
    with pytest.raises(rr.ShapeError):
        tree.set(torch.tensor([1, 2]), torch.tensor([1.0, 2.0, 3.0]))
    assert nodes(tree) == before
    tree.set([], [])
    assert nodes(tree) == before
    with pytest.raises(rr.ConfigError):
        TorchSumTree(0, device)
    mins = TorchMinTree(4, device)
    mins.set([0, 1], [float("-inf"), -0.0])  # a min tree takes infinities
    with pytest.raises(rr.PriorityError):
        mins.set([0], [float("nan")])


def test_states_move_between_the_numpy_and_torch_trees(device: str) -> None:
    rng = np.random.default_rng(4)
    ref = SumTree(300)
    ref.set(np.arange(300), rng.random(300))
    tree = TorchSumTree.from_state_dict(ref.state_dict(), device)
    assert nodes(tree) == ref._tree.tobytes()
    tree.set([5, 6], [0.0, 9.0])
    ref.set([5, 6], [0.0, 9.0])
    state = tree.state_dict()
    assert state.keys() == ref.state_dict().keys()
    back = SumTree.from_state_dict(state)
    assert back._tree.tobytes() == ref._tree.tobytes()
    other = SumTree(300)
    other.set(np.arange(300), rng.random(300))
    tree.load_state_dict(other.state_dict())  # over a tree with other leaves
    assert nodes(tree) == other._tree.tobytes()
    uniforms = rng.random(512)
    want = other.sample(512, np.random.default_rng(uniforms.view(np.uint64)[:1]))
    uniforms = np.random.default_rng(uniforms.view(np.uint64)[:1]).random(512)
    np.testing.assert_array_equal(tree.sample(tensor(uniforms, device)).cpu().numpy(), want)
    bad = dict(other.state_dict(), leaves=np.full(300, -1.0))
    with pytest.raises(rr.CheckpointError):
        tree.load_state_dict(bad)
    assert nodes(tree) == other._tree.tobytes()
    mins = TorchMinTree(300, device)
    with pytest.raises(rr.CheckpointError):
        mins.load_state_dict(ref.state_dict())  # a sum tree's state
    with pytest.raises(rr.CheckpointError):
        TorchSumTree(10, device).load_state_dict(ref.state_dict())  # another capacity


def test_an_empty_sum_tree_maps_every_mass_to_leaf_0(device: str) -> None:
    tree = TorchSumTree(20, device)
    u = torch.rand(5, dtype=torch.float64)
    assert tree.sample(u).tolist() == [0] * 5
    assert tree.sample(u[:0]).shape == (0,)


def test_the_sync_counter_sees_host_reads() -> None:
    t = torch.arange(4.0)
    with CountSyncs() as counter:
        t[1].item()
        bool(t[0])
        int(t[1])
        float(t[2])
        t.tolist()
        t.cpu()
        [0, 1, 2][torch.tensor(1)]
        torch.nonzero(t)
    assert set(counter.calls) >= {"item", "__bool__", "__int__", "__float__", "tolist", "cpu"}
    assert {"__index__", "nonzero"} <= set(counter.calls)


def test_updates_and_descents_do_not_synchronise(device: str) -> None:
    """set (tensor inputs, small and whole-level batches), sample, find_prefix_sum, get, and
    the roots read no device value on the host (on a CUDA device: make no synchronising CUDA
    call)."""
    capacity = 100_000
    gen = torch.Generator(device=device).manual_seed(0)
    tree, mins = TorchSumTree(capacity, device), TorchMinTree(capacity, device)
    for k in (256, 50_000):
        idx = torch.randint(0, capacity, (k,), device=device, generator=gen)
        vals = torch.rand(k, dtype=torch.float64, device=device, generator=gen)
        u = torch.rand(256, dtype=torch.float64, device=device, generator=gen)
        with no_host_sync(device) as counter:
            tree.set(idx, vals)
            mins.set(idx, vals)
            leaves = tree.sample(u)
            tree.sample(u, stratified=False)
            tree.find_prefix_sum(u * tree.total)
            tree.get(leaves)
            mins.min  # noqa: B018
        assert counter.calls == {}, dict(counter.calls)
