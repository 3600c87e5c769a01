"""Mutated checkpoints: every one raises ``rr.CheckpointError``, and nothing worse happens.

A seeded driver mutates a valid checkpoint: bit flips anywhere, truncations, appended bytes,
and header fields (sizes, shapes, offsets, dtypes, names, the configuration and the state's
scalars) set to huge, negative, zero, off-by-one, wrongly typed or hostile values. A mutated
header is written back with a correct checksum, so only validation can refuse it. For each
mutant, loading must raise :class:`rlreplay.CheckpointError` (never another exception), within
a few seconds (an alarm fails a hang), with a peak of traced memory no larger than twice that
of loading the intact file (no allocation larger than the file), without unpickling anything
and without running code named by the file. A mutant that loads must be a checkpoint as a
buffer writes it: the buffer it loads into saves it back exactly (a field set to another valid
value, or to the value it had).

The default run takes a few hundred mutants; ``-m slow`` takes 10^4.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
import random
import signal
import struct
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.checkpoint import CheckpointReader

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


def make_checkpoint(path: Path) -> None:
    buf = rr.PrioritizedReplayBuffer(
        48,
        {"obs": rr.Field((3,), np.float32), "action": rr.Field((), np.int64)},
        num_envs=2,
        n_step=2,
        seed=1,
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
    head = _PREFIX.pack(b"RLREPLAY", 1, len(raw)) + raw + hashlib.sha256(raw).digest()
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

    def refuse(*_: Any, **__: Any) -> Any:
        raise Unpickled

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(np, "load", refuse)
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
