"""Mutated checkpoints: every one raises ``rr.CheckpointError``, and nothing worse happens.

A seeded driver mutates a valid checkpoint: bit flips anywhere, truncations, appended bytes,
and header fields (sizes, shapes, offsets, dtypes, names, the configuration and the state's
scalars) set to huge, negative, zero, off-by-one, wrongly typed or hostile values. A mutated
header is written back with a correct checksum, so only validation can refuse it. For each
mutant, loading must raise :class:`rlreplay.CheckpointError` (never another exception), within
a few seconds (an alarm fails a hang), with a peak of traced memory no larger than twice that
of loading the intact file (no allocation larger than the file, or than the buffer the header
configures within a 16 MiB size budget: a file holds stored rows only), without unpickling anything
and without running code named by the file. A mutant that loads must be a checkpoint as a
buffer writes it: the buffer it loads into saves it back exactly (a field set to another valid
value, or to the value it had).

The default run takes a few hundred mutants; ``-m slow`` takes 10^4.

Data mutants (:class:`TestDataMutants`) rewrite array DATA instead (index counters, slot
records, final-record owners, priorities, stored values) with both checksums recomputed, so
only the loaded state's meaning can refuse them. Each either raises ``CheckpointError`` or
loads into a buffer that is consistent: the sum tree's root is the sum of its leaves, every
sampled id is sampleable in a slow reference rebuilt from the mutant's arrays
(``tests/reference.py``), every sampled transition and ``get_transitions`` row equals the
reference's, each probability is its priority's mass over the reference's total, and
``update_priorities`` then reads back.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
import random
import signal
import struct
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.checkpoint.file import FORMAT_VERSION, CheckpointReader
from tests.reference import RefBuffer, Step, assert_batch_matches

_PREFIX = struct.Struct("<8sIQ")
HOSTILE_NAME = "x=__import__('pathlib').Path('PWNED').touch(),y"
VALUES: list[Any] = [
    -1, -(2**63), 0, 1, 2**31, 2**62, 2**64, 10**30, 1.5, float("nan"), True, None, "7", [], {},
    [1, 2], {"a": 1}, "O", "|O", "<U8", "(2,)f4", HOSTILE_NAME,
]  # fmt: skip


class Hung(BaseException):
    """Raised by the alarm: not an Exception, so nothing in the library can swallow it."""


class Unpickled(BaseException):
    """Raised if anything unpickles or loads an .npy file while a mutant loads."""


def make_checkpoint(path: Path, **options: Any) -> None:
    buf = rr.PrioritizedReplayBuffer(
        48,
        {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)},
        num_envs=2,
        n_step=2,
        seed=1,
        **options,
    )
    for t in range(40):
        end = t % 9 == 8
        extra = {"next_obs": np.full((2, 3), -t, np.float32)} if end else {}
        buf.add(obs=np.full((2, 3), t, np.float32), action=np.array([t, -t]),
                reward=np.ones(2, np.float32), terminated=np.array([end, False]),
                truncated=np.zeros(2, bool), **extra)  # fmt: skip
    batch = buf.sample(8)
    buf.update_priorities(batch.ids, np.linspace(0.1, 2.0, 8))
    buf.save(path)


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The parsed header and the data region with its checksum (everything after the header)."""
    _, _, hlen = _PREFIX.unpack_from(data)
    header = json.loads(data[_PREFIX.size : _PREFIX.size + hlen])
    start = -(-(_PREFIX.size + hlen + 32) // 64) * 64
    return header, data[start:]


def join(header: dict[str, Any], rest: bytes) -> bytes:
    """A file around ``header`` with a correct header checksum (the data region unchanged)."""
    raw = json.dumps(header).encode()
    head = _PREFIX.pack(b"RLREPLAY", FORMAT_VERSION, len(raw)) + raw + hashlib.sha256(raw).digest()
    return head + b"\0" * (-len(head) % 64) + rest


def paths(tree: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path of a JSON tree (its leaves and its inner nodes)."""
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from paths(v, (*prefix, i))


def get(tree: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def set_at(tree: Any, path: tuple[Any, ...], value: Any) -> None:
    get(tree, path[:-1])[path[-1]] = value


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One mutant of ``data``: the kind is drawn first, then its details."""
    kind = rng.random()
    if kind < 0.25:  # bit flips anywhere
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(out) * 8)
            out[i // 8] ^= 1 << (i % 8)
        return bytes(out)
    if kind < 0.35:  # truncation
        return data[: rng.randrange(len(data))]
    if kind < 0.4:  # trailing garbage
        return data + rng.randbytes(rng.randint(1, 200))
    header, rest = split(data)
    if kind < 0.45:  # a whole array entry or a top-level key removed, duplicated or swapped
        table = header["arrays"]
        i, j = rng.randrange(len(table)), rng.randrange(len(table))
        choice = rng.randrange(4)
        if choice == 0:
            del table[i]
        elif choice == 1:
            table.insert(j, copy.deepcopy(table[i]))
        elif choice == 2:
            table[i], table[j] = table[j], table[i]
        else:
            del header[rng.choice(["meta", "arrays", "data_size"])]
        return join(header, rest)
    # A field of the header set to a bad value (repeatedly, sometimes).
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        path = rng.choice([p for p in paths(header) if p])
        old = get(header, path)
        pick = rng.random()
        if isinstance(old, int) and not isinstance(old, bool) and pick < 0.5:
            value: Any = rng.choice([old + 1, old - 1, old * 2, -old, old + 64, old // 2])
        else:
            value = rng.choice(VALUES)
        set_at(header, path, value)
    return join(header, rest)


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    """The valid checkpoint's bytes and the peak traced memory of loading it."""
    path = tmp_path_factory.mktemp("fuzz") / "ok"
    make_checkpoint(path)
    return bytes_and_load_peak(path)


def bytes_and_load_peak(path: Path) -> tuple[bytes, int]:
    """The checkpoint's bytes and the peak traced memory of a second load of it."""
    rr.load(path)  # warm: code generation and compiled kernels are not counted below
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        rr.load(path)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return path.read_bytes(), peak


def _alarm(*_: Any) -> None:
    raise Hung


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No unpickling, no .npy loading, and an alarm against hangs, while a test runs."""

    def refusing(original: Any) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            # Numba reads its own kernel cache (``__pycache__/*.nbi``) with pickle the first time
            # a process calls a cached kernel: that is the library's compiled code, not the file.
            if sys._getframe(1).f_globals.get("__name__", "").startswith("numba."):
                return original(*args, **kwargs)
            raise Unpickled

        return refuse

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refusing(getattr(pickle, name)))
    monkeypatch.setattr(np, "load", refusing(np.load))
    # A file holds only stored rows: a header's capacity sizes the buffer it loads into up to
    # the size budget (the machine's memory). A small budget makes the peak bound below hold
    # on every machine: a capacity mutated past it is refused before anything is allocated.
    monkeypatch.setattr(rr.spec.arguments, "SIZE_BUDGET", 1 << 24)
    monkeypatch.chdir(tmp_path)  # where a hostile name would create PWNED
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not (tmp_path / "PWNED").exists(), "a checkpoint ran code"


def load_mutant(path: Path, data: bytes, budget: int) -> str:
    """Loads one mutant; returns what happened ("refused" or "intact" for a harmless one)."""
    path.write_bytes(data)
    tracemalloc.start()
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            buf = rr.load(path)
        except rr.CheckpointError:
            outcome = "refused"
        else:
            buf.close()
            outcome = "loaded"
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        tracemalloc.stop()
    assert peak <= budget, f"loading took {peak} bytes at its peak (budget {budget})"
    return outcome


def run_fuzz(tmp_path: Path, intact: tuple[bytes, int], seed: int, count: int) -> None:
    data, peak = intact
    budget = 2 * peak + 64 * 1024
    rng = random.Random(seed)
    path = tmp_path / "mutant"
    outcomes = {"refused": 0, "loaded": 0}
    for i in range(count):
        mutant = mutate(data, rng)
        try:
            outcome = load_mutant(path, mutant, budget)
        except Exception as exc:  # any other exception is a failure: say which mutant
            raise AssertionError(f"mutant {i} (seed {seed}) raised {exc!r}") from exc
        if outcome == "loaded":
            # A mutant may load only if it is a checkpoint a buffer writes: the buffer it loads
            # into saves it back exactly (a value set to what it was, or another valid value).
            again = rr.load(path)
            again.save(tmp_path / "resaved")
            assert split((tmp_path / "resaved").read_bytes()) == split(mutant), (
                f"mutant {i} (seed {seed}) loaded, but not as the buffer it describes"
            )
            again.close()
        outcomes[outcome] += 1
    assert outcomes["refused"] >= count * 0.9


def test_the_intact_checkpoint_loads(
    tmp_path: Path, intact: tuple[bytes, int], guarded: None
) -> None:
    assert load_mutant(tmp_path / "ok", intact[0], 2 * intact[1] + 64 * 1024) == "loaded"


def test_mutated_checkpoints_raise_checkpoint_error(
    tmp_path: Path, intact: tuple[bytes, int], guarded: None
) -> None:
    run_fuzz(tmp_path, intact, seed=16, count=300)


@pytest.mark.slow
def test_mutated_checkpoints_raise_checkpoint_error_10k(
    tmp_path: Path, intact: tuple[bytes, int], guarded: None
) -> None:
    run_fuzz(tmp_path, intact, seed=1616, count=10_000)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("data_size",), 2**70),
        (("arrays", 0, "offset"), -64),
        (("arrays", 0, "offset"), 2**63),
        (("arrays", 1, "nbytes"), 2**40),
        (("arrays", 1, "shape"), [2**31, 2**31, 2**31]),
        (("arrays", 1, "dtype"), "|O"),
        (("arrays", 1, "dtype"), "(1000000000,)f8"),
        (("meta", "config", "capacity"), 2**40),
        (("meta", "config", "capacity"), -5),
        (("meta", "config", "fields", "obs", "shape"), [2**20, 2**20]),
        (("meta", "config", "fields", "obs", "dtype"), "|O"),
        (("meta", "state", "finals_capacity"), 2**50),
        (("meta", "state", "rng"), {"bit_generator": "MT19937"}),
        (("meta", "class"), "__import__('os').system('touch PWNED')"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_named_hostile_fields_are_refused(
    tmp_path: Path,
    intact: tuple[bytes, int],
    guarded: None,
    where: tuple[Any, ...],
    value: Any,
) -> None:
    header, rest = split(intact[0])
    set_at(header, where, value)
    out = load_mutant(tmp_path / "m", join(header, rest), 2 * intact[1] + 64 * 1024)
    assert out == "refused"


def test_hostile_field_names_run_nothing(
    tmp_path: Path, intact: tuple[bytes, int], guarded: None
) -> None:
    header, rest = split(intact[0])
    fields = header["meta"]["config"]["fields"]
    fields[HOSTILE_NAME] = fields.pop("action")
    assert load_mutant(tmp_path / "m", join(header, rest), 2 * intact[1] + 64 * 1024) == "refused"


def test_the_reader_refuses_entries_outside_the_data_region(
    tmp_path: Path, intact: tuple[bytes, int]
) -> None:
    header, rest = split(intact[0])
    last = header["arrays"][-1]
    last["offset"] = header["data_size"]  # one past the end: would read the checksum and beyond
    (tmp_path / "m").write_bytes(join(header, rest))
    with pytest.raises(rr.CheckpointError, match="does not fit"):
        CheckpointReader(tmp_path / "m")


# ------------------------------------------------------------------------------ data mutants
DATA_VALUES: list[Any] = [-(2**62), -2, -1, 0, 1, 2, 3, 23, 24, 25, 47, 48, 2**40, 2**62]
FLOAT_VALUES = [
    np.nan,
    np.inf,
    -np.inf,
    -1.0,
    -0.0,
    0.0,
    1e-300,
    1.0,
    1e300,
    np.finfo(np.float64).max,
]


def arrays_of(data: bytes) -> dict[str, np.ndarray[Any, Any]]:
    """The mutant's arrays as a state dict holds them (whole), read from its bytes (copies).

    A file holds per-slot arrays for the stored steps only and per-final-record arrays for
    the live records only (env by env, oldest first); the rows it leaves out are put back as a
    fresh buffer has them (no record: -1, rank 1, else 0).
    """
    header, rest = split(data)
    read = {
        e["name"]: np.frombuffer(rest, np.dtype(e["dtype"]), int(np.prod(e["shape"])),
                                 e["offset"]).reshape(e["shape"]).copy()
        for e in header["arrays"]
    }  # fmt: skip
    env = read["index/env"]
    E = env.shape[0]
    C = int(header["meta"]["config"]["capacity"]) // E
    F = int(header["meta"]["state"]["finals_capacity"])
    stored = [
        (e * C, C, int(env[e, 1]), int(env[e, 0])) for e in range(E)
    ]  # (base, size, head, count)
    live = [(e * F, F, int(env[e, 6]), int(env[e, 5])) for e in range(E)]
    out = {}
    for name, arr in read.items():
        if name.startswith(("index/slot_meta", "columns/steps/", "columns/derived/")) or name in (
            "priorities/prio",
            "priorities/rank",
        ):
            rings = stored
        elif name.startswith(("index/final_owner", "columns/finals/")):
            rings = live
        elif name == "priorities/snapshot":
            full = np.zeros(E * C, arr.dtype)
            full[: arr.shape[0]] = arr
            out[name] = full
            continue
        else:
            out[name] = arr
            continue
        full = np.zeros((E * rings[0][1], *arr.shape[1:]), arr.dtype)
        if name == "index/slot_meta":
            full[:, 1:] = -1
        elif name in ("index/final_owner",):
            full[:] = -1
        elif name == "priorities/rank":
            full[:] = 1
        at = 0
        for base, size, first, end in rings:
            rows = base + np.arange(first, end) % size
            full[rows] = arr[at : at + end - first]
            at += end - first
        assert at == arr.shape[0], name
        out[name] = full
    return out


def mutate_data(data: bytes, rng: random.Random) -> bytes:
    """Rewrite one to three elements of the arrays' data; both checksums stay correct."""
    header, rest = split(data)
    body = bytearray(rest[: header["data_size"]])
    table = header["arrays"]
    weights = [8 if e["name"].startswith(("index/", "priorities/")) else 1 for e in table]
    for _ in range(rng.choice([1, 1, 2, 3])):
        entry = rng.choices(table, weights)[0]
        dtype = np.dtype(entry["dtype"])
        view = np.frombuffer(body, dtype, entry["nbytes"] // dtype.itemsize, entry["offset"])
        i = rng.randrange(view.shape[0])
        old = view[i].item()
        if dtype.kind == "f":
            value: Any = rng.choice([*FLOAT_VALUES, old * 2, -old, old + 1])
        elif dtype.kind == "b":
            value = rng.choice([0, 1, 2, 255])
            view = view.view(np.uint8)
        else:
            value = rng.choice([*DATA_VALUES, old + 1, old - 1, old + 24, old - 24, -old])
            value = max(-(2**63), min(value, 2**63 - 1))
        with np.errstate(over="ignore", invalid="ignore"):
            view[i] = value
    body_bytes = bytes(body)
    return join(header, body_bytes + hashlib.sha256(body_bytes).digest())


def reference_of(buf: rr.PrioritizedReplayBuffer, arrays: dict[str, Any]) -> RefBuffer:
    """A :class:`RefBuffer` holding what the arrays say is stored (steps before ``head``
    stand in for overwritten ones: only where the oldest stored episode began matters)."""
    E, C = buf.num_envs, buf.env_capacity
    env, meta, finals = arrays["index/env"], arrays["index/slot_meta"], arrays["index/final_owner"]
    F = finals.shape[0] // E
    ref = RefBuffer(E, C, buf.n_step, buf.gamma, buf.frame_stack, True, ("obs",))
    for e in range(E):
        count, head = int(env[e, 0]), int(env[e, 1])
        first = int(meta[e * C + head % C, 0]) if head < count else head
        history = [Step({}, done=t == first - 1) for t in range(head)]
        for t in range(head, count):
            s = e * C + t % C
            values = {k: np.array(arrays[f"columns/steps/{k}"][s])
                      for k in ("obs", "action", "reward", "terminated", "truncated")}  # fmt: skip
            fid = int(meta[s, 1])
            if fid >= 0:
                values["next_obs"] = np.array(arrays["columns/finals/obs"][e * F + fid % F])
            history.append(Step(values, done=fid >= 0))
        ref.history[e] = history
        ref.cleared_at[e] = head
    return ref


def check_consistent(buf: Any, arrays: dict[str, Any], where: str) -> None:
    """The loaded buffer samples, assembles and updates as the reference of its arrays says."""
    tree = buf._prios.sum_tree
    leaves = tree.get(np.arange(buf.num_envs * buf.env_capacity))
    assert np.isclose(tree.total, leaves.sum(), rtol=1e-9, atol=0.0), where
    ref = reference_of(buf, arrays)
    sampleable = ref.sampleable_ids()
    assert buf.num_sampleable == len(sampleable), where
    prio = arrays["priorities/prio"]
    E, C = buf.num_envs, buf.env_capacity
    p = {i: float(prio[(i % E) * C + (i // E) % C]) for i in sampleable}
    if buf.variant == "rank_based":  # sort_interval=1 and changes saved: exact ranks
        ranked = sorted(v for v in p.values() if v > 0)
        masses = {i: (1 + sum(w > v for w in ranked)) ** -buf.alpha if v > 0 else 0.0
                  for i, v in p.items()}  # fmt: skip
    else:
        masses = {i: v**buf.alpha if v > 0 else 0.0 for i, v in p.items()}
    total = sum(masses.values())
    if total <= 0.0:
        with pytest.raises(rr.EmptyBufferError):
            buf.sample(4)
        return
    batch = buf.sample(16)
    ids = np.asarray(batch["ids"])
    assert set(ids.tolist()) <= set(sampleable), where
    assert_batch_matches(batch, ref)
    expected = np.array([masses[i] for i in ids.tolist()]) / total
    np.testing.assert_allclose(batch["probabilities"], expected, rtol=1e-9, err_msg=where)
    assert_batch_matches(buf.get_transitions(ids), ref)
    new = np.linspace(0.5, 3.0, ids.shape[0])
    assert buf.update_priorities(ids, new) == 0
    last = {i: p for i, p in zip(ids.tolist(), new.tolist(), strict=True)}
    got = buf.get_priorities(np.array(list(last)))
    np.testing.assert_allclose(got, np.array(list(last.values())) + buf.eps, err_msg=where)


@pytest.fixture(scope="module")
def ranked(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    """A rank-based checkpoint with frame stacks (rank and snapshot arrays, cut episodes)."""
    path = tmp_path_factory.mktemp("fuzz") / "ranked"
    make_checkpoint(path, variant="rank_based", sort_interval=1, frame_stack=2)
    return bytes_and_load_peak(path)


class TestDataMutants:
    """Array data rewritten (checksums recomputed): refused, or loaded consistent."""

    @staticmethod
    def run(tmp_path: Path, intact: tuple[bytes, int], seed: int, count: int) -> dict[str, int]:
        data, peak = intact
        budget = 2 * peak + 64 * 1024
        rng = random.Random(seed)
        path = tmp_path / "mutant"
        outcomes = {"refused": 0, "loaded": 0}
        for i in range(count):
            mutant = mutate_data(data, rng)
            where = f"data mutant {i} (seed {seed})"
            try:
                outcome = load_mutant(path, mutant, budget)
            except Exception as exc:
                raise AssertionError(f"{where} raised {exc!r}") from exc
            outcomes[outcome] += 1
            if outcome == "loaded":
                buf = rr.load(path)
                try:
                    check_consistent(buf, arrays_of(mutant), where)
                finally:
                    buf.close()
        return outcomes

    def test_refused_or_consistent(
        self, tmp_path: Path, intact: tuple[bytes, int], guarded: None
    ) -> None:
        outcomes = self.run(tmp_path, intact, seed=61, count=300)
        # Both kinds occur: values refused for their meaning, harmless ones loaded and checked.
        assert outcomes["refused"] >= 30 and outcomes["loaded"] >= 30, outcomes

    def test_rank_based_refused_or_consistent(
        self, tmp_path: Path, ranked: tuple[bytes, int], guarded: None
    ) -> None:
        outcomes = self.run(tmp_path, ranked, seed=62, count=300)
        assert outcomes["refused"] >= 30 and outcomes["loaded"] >= 30, outcomes

    @pytest.mark.slow
    def test_refused_or_consistent_10k(
        self,
        tmp_path: Path,
        intact: tuple[bytes, int],
        ranked: tuple[bytes, int],
        guarded: None,
    ) -> None:
        self.run(tmp_path, intact, seed=6161, count=10_000)
        self.run(tmp_path, ranked, seed=6262, count=10_000)

    @pytest.mark.parametrize(
        ("name", "index", "value", "match"),
        [
            ("priorities/rank", 40, 0, "rank 0"),
            ("priorities/rank", 40, 10**6, "rank 1000000"),
            ("priorities/snapshot", 0, np.nan, "snapshot"),
            ("priorities/snapshot", 0, 1.0, "snapshot"),
            ("priorities/snapshot", 1, -1e9, "snapshot"),
        ],
        ids=lambda v: str(v),
    )
    def test_named_meaningless_ranks_are_refused(
        self,
        tmp_path: Path,
        ranked: tuple[bytes, int],
        name: str,
        index: int,
        value: Any,
        match: str,
    ) -> None:
        self.check_refused(tmp_path, ranked[0], name, index, value, match)

    @staticmethod
    def check_refused(
        tmp_path: Path, data: bytes, name: str, index: int, value: Any, match: str
    ) -> None:
        """The checkpoint ``data`` with one element of array ``name`` set to ``value``
        (checksums recomputed) is refused with a message matching ``match``."""
        header, rest = split(data)
        entry = next(e for e in header["arrays"] if e["name"] == name)
        body = bytearray(rest[: header["data_size"]])
        dtype = np.dtype(entry["dtype"])
        view = np.frombuffer(body, dtype, entry["nbytes"] // dtype.itemsize, entry["offset"])
        view[index] = value
        (tmp_path / "m").write_bytes(join(header, bytes(body) + hashlib.sha256(body).digest()))
        with pytest.raises(rr.CheckpointError, match=match):
            rr.load(tmp_path / "m")

    @pytest.mark.parametrize(
        ("name", "index", "value", "match"),
        [
            ("priorities/prio", 3, np.inf, "priority inf"),
            ("priorities/prio", 5, np.nan, "priority nan"),
            ("priorities/prio", 5, -1.0, "priority -1.0"),
            ("index/env", 0, 10**6, "oldest stored step"),  # count far past head: beyond capacity
            ("index/env", 1, -3, "oldest stored step"),
            ("index/env", 2, 10**6, "last episode end"),
            ("index/env", 3, 0, "sampleable range"),
            ("index/env", 6, 10**6, "final-record cursors"),
            ("index/slot_meta", 3 * 3 + 0, 30, "episode start"),
            ("index/slot_meta", 3 * 3 + 2, 5, "episode end"),
            ("index/final_owner", 1, 1000, "final record"),
        ],
        ids=lambda v: str(v),
    )
    def test_named_meaningless_states_are_refused(
        self,
        tmp_path: Path,
        intact: tuple[bytes, int],
        guarded: None,
        name: str,
        index: int,
        value: Any,
        match: str,
    ) -> None:
        self.check_refused(tmp_path, intact[0], name, index, value, match)

    def test_negative_beta_step_is_refused(self, tmp_path: Path, intact: tuple[bytes, int]) -> None:
        header, rest = split(intact[0])
        header["meta"]["state"]["priorities"]["beta_step"] = -1
        (tmp_path / "m").write_bytes(join(header, rest))
        with pytest.raises(rr.CheckpointError, match="beta_step -1"):
            rr.load(tmp_path / "m")
