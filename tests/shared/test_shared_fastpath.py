"""The shared writer's generated per-step ``add`` (rlreplay.sharing.fastpath) against
its general path: the same bytes in every shared array, the same ids, the same errors, and a
rejected call leaves everything unchanged. In-process writers (no child process)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlreplay as rr
from rlreplay.sharing.fastpath import IDS_BLOCK, build_add
from rlreplay.sharing.writer import BEGIN, CLOSED, HCOLS, PUB, SharedWriter

# A 1-D observation (copied by memoryview slice), a 2-D one (NumPy row assignment), a scalar.
FIELDS = {
    "obs": rr.Field((3,), np.float32),
    "pix": rr.Field((2, 2), np.uint8, observation=True),
    "action": rr.Field((), np.int64),
}
C = 16  # slots: the random runs lap the ring


@contextmanager
def writer_pair() -> Iterator[tuple[SharedWriter, SharedWriter]]:
    """Two one-env buffers, each with a writer of env 0 (the second's fast path unused)."""
    bufs = [rr.ReplayBuffer(C, FIELDS, seed=0, storage="shared") for _ in range(2)]
    ws = [rr.attach(b.share([0])) for b in bufs]
    try:
        yield ws[0], ws[1]
    finally:
        for w in ws:
            w.close()
        for b in bufs:
            b.close()


def arrays(w: SharedWriter) -> dict[str, np.ndarray]:
    """Every array a writer writes (shared and its own counters), copied."""
    out = {f"step {k}": v for k, v in w._steps.items()}
    out.update({f"final {k}": v for k, v in w._finals.items()})
    out.update(hdr=w._hdr, records=w._records, t=w._t, last_end=w._last_end, fcount=w._fcount)
    return {k: v.copy() for k, v in out.items()}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call().tolist()
    except rr.ReplayError as exc:
        return type(exc).__name__, str(exc)


# Values as an env hands them over: the plain kinds the fast path takes, kinds that need the
# general path's conversion, and invalid ones (which both must reject alike).
OBS = st.sampled_from(["f32", "f32 strided", "f64", "list", "short"])
PIX = st.sampled_from(["u8", "u8 fortran", "i64", "short"])
ACTION = st.sampled_from(
    [1, 7, True, np.int64(3), np.int32(-2), np.uint64(5), np.uint64(2**63), np.float64(1.0),
     2**64, np.array(4), np.array([4]), 1.5]
)  # fmt: skip
REWARD = st.sampled_from(
    [0.5, 2, False, np.float32(1.5), np.float64(-3.0), np.float64(1e300), 1e300, np.array(0.25),
     np.array(1.0, np.float32), "x"]
)  # fmt: skip
FLAG = st.sampled_from([False, False, False, True, np.bool_(False), np.bool_(True),
                        np.array(False), 0, None])  # fmt: skip
NEXT = st.sampled_from(["omit", "omit", "none", "plain", "f64", "short"])


def make_obs(kind: str, t: int) -> Any:
    base = np.arange(3, dtype=np.float32) + t
    return {
        "f32": base, "f32 strided": np.repeat(base, 2)[::2], "f64": base.astype(np.float64),
        "list": base.tolist(), "short": base[:2],
    }[kind]  # fmt: skip


def make_pix(kind: str, t: int) -> Any:
    base = (np.arange(4, dtype=np.uint8) + t % 200).reshape(2, 2)
    return {"u8": base, "u8 fortran": np.asfortranarray(base), "i64": base.astype(np.int64),
            "short": base[:1]}[kind]  # fmt: skip


def make_next(kind: str, t: int) -> dict[str, Any]:
    if kind == "omit":
        return {}
    if kind == "none":
        return {"next_obs": None, "next_pix": None}
    obs = make_obs("f32" if kind == "plain" else kind, -t)
    return {"next_obs": obs, "next_pix": make_pix("u8" if kind == "plain" else "short", -t)}


ANY_STEP = st.tuples(OBS, PIX, ACTION, REWARD, FLAG, FLAG, NEXT, st.sampled_from(["", "opt"]))
# Steps the fast path takes (every plain kind of value; some end their episode).
PLAIN_STEP = st.tuples(
    st.sampled_from(["f32", "f32 strided"]), st.sampled_from(["u8", "u8 fortran"]),
    st.sampled_from([1, True, np.int64(3), np.int32(-2), np.uint64(5), np.array(4)]),
    st.sampled_from([0.5, 2, np.float32(1.5), np.float64(-3.0), np.array(1.0, np.float32)]),
    st.sampled_from([False, False, True, np.bool_(False), np.array(False)]),
    st.sampled_from([False, False, np.bool_(True)]),
    st.sampled_from(["omit", "none", "plain", "plain"]), st.just(""),
)  # fmt: skip
STEP = st.one_of(PLAIN_STEP, ANY_STEP)
OP = st.one_of(STEP, st.just("end"))


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OP, max_size=45))
def test_fast_and_general_add_store_the_same_bytes(ops: list[Any]) -> None:
    """Random steps (plain values, values to convert, invalid ones, options, episode ends)
    given to the generated add and to the general path of a twin writer."""
    with writer_pair() as (fast, slow):
        fast._due[0] = slow._due[0] = time.monotonic() + 3600  # no liveness detour
        for t, op in enumerate(ops):
            before = arrays(fast)
            if op == "end":
                final = {"next_obs": make_obs("f32", 100 + t), "next_pix": make_pix("u8", t)}
                a = outcome(lambda f=final: fast.end_episode(0, **f))
                b = outcome(lambda f=final: slow.end_episode(0, **f))
            else:
                o, p, act, rew, term, trunc, nxt, opt = op
                kw = dict(obs=make_obs(o, t), pix=make_pix(p, t), action=act, reward=rew,
                          terminated=term, truncated=trunc, **make_next(nxt, t))  # fmt: skip
                kw = {k: v for k, v in kw.items() if v is not None or k.startswith("next_")}
                if opt:
                    kw["env_ids"] = None
                a = outcome(lambda k=kw: fast.add(**k))
                b = outcome(lambda k=kw: SharedWriter.add(slow, **k))
            assert a == b
            assert_same(arrays(fast), arrays(slow))
            if a[0] != "ok":  # a refused call changes nothing
                assert_same(arrays(fast), before)


def test_the_fast_path_takes_plain_steps_and_hands_the_rest_on() -> None:
    """With a general path that records its calls: plain steps (every plain value kind, with
    and without next_<obs>, ending ones with them) never reach it; the others all do, and are
    then stored (or refused) by it."""
    calls: list[dict[str, Any]] = []

    def general(w: SharedWriter, **kw: Any) -> np.ndarray:
        calls.append(kw)
        return SharedWriter.add(w, **kw)

    with writer_pair() as (w, _):
        w.__dict__["add"] = build_add(
            w, general, 0, (PUB, BEGIN, CLOSED), (w._t, w._last_end, w._fcount), w._due
        )
        w._due[0] = time.monotonic() + 3600
        obs, pix = np.zeros(3, np.float32), np.zeros((2, 2), np.uint8)
        plain = dict(obs=obs, pix=pix, action=1, reward=1.0, terminated=False, truncated=False)
        nexts = dict(next_obs=obs + 1, next_pix=pix + 1)
        for kw in (
            plain,
            {**plain, **nexts},
            {**plain, "next_obs": None, "next_pix": None},
            {**plain, "action": np.int32(2), "reward": np.float64(0.5), "truncated": np.bool_(0)},
            {**plain, "action": np.array(3), "reward": np.array(2.0, np.float32)},
            {**plain, "terminated": True, **nexts},
            {**plain, "obs": np.repeat(obs, 2)[::2]},
        ):
            w.add(**kw)
        assert calls == [] and w.next_step(0) == 7
        for kw in (
            {**plain, "obs": obs.astype(np.float64)},  # converted by the general path
            {**plain, "env_ids": None},
            {**plain, "next_obs": obs},  # some next_<obs> but not all
        ):
            w.add(**kw)
        assert len(calls) == 3 and w.next_step(0) == 10
        for kw in (
            {**plain, "terminated": True},  # no next_<obs>
            {**plain, "obs": obs[:2]},
            {**plain, "action": 2**64},
            {k: v for k, v in plain.items() if k != "reward"},
            {**plain, "other": 1},
        ):
            with pytest.raises(rr.ReplayError):
                w.add(**kw)
        assert len(calls) == 8 and w.next_step(0) == 10
        w._due[0] = 0.0  # the owner's liveness is due: the general path checks it
        w.add(**plain)
        assert len(calls) == 9 and w._due[0] > time.monotonic()


def test_ids_are_fresh_arrays_across_id_blocks() -> None:
    """Ids handed out by the fast path: one int64 each, ``t * E + e``, and changing one
    changes no other (also across the blocks they are cut from)."""
    buf = rr.ReplayBuffer(2 * C, FIELDS, num_envs=2, seed=0, storage="shared")
    w = rr.attach(buf.share([1]))
    plain = dict(obs=np.zeros(3, np.float32), pix=np.zeros((2, 2), np.uint8), action=1,
                 reward=1.0, terminated=False, truncated=False)  # fmt: skip
    got = [w.add(**plain) for _ in range(IDS_BLOCK + 5)]
    assert all(g.dtype == np.int64 and g.shape == (1,) for g in got)
    assert [int(g[0]) for g in got] == [t * 2 + 1 for t in range(IDS_BLOCK + 5)]
    got[3][0] = -1
    assert w.add(**plain)[0] == (IDS_BLOCK + 5) * 2 + 1 and got[4][0] == 4 * 2 + 1
    w.close()
    buf.close()


def test_a_closed_writer_or_buffer_refuses_the_fast_path() -> None:
    buf = rr.ReplayBuffer(C, FIELDS, seed=0, storage="shared")
    w = rr.attach(buf.share())
    add = w.add  # kept by the caller past close()
    plain = dict(obs=np.zeros(3, np.float32), pix=np.zeros((2, 2), np.uint8), action=1,
                 reward=1.0, terminated=False, truncated=False)  # fmt: skip
    add(**plain)
    add(**plain)
    w.close()
    assert w._due[0] == -math.inf
    with pytest.raises(rr.ReplayClosed):
        add(**plain)
    with pytest.raises(rr.ReplayClosed):
        w.add(**plain)
    w = rr.attach(buf.share())
    w.add(**plain)
    assert w._hdr[0, CLOSED] == 0 and w._hdr.shape[1] == HCOLS
    buf.close()  # the owner closes: the writer's next add sees CLOSED
    with pytest.raises(rr.ReplayClosed):
        w.add(**plain)
    w.close()


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float64, np.complex64, np.bool_, np.int8, np.uint64, np.int32]
)
def test_every_dtype_and_field_names_like_generated_ones(dtype: Any) -> None:
    """Plain steps of 1-D, 2-D and scalar fields of each dtype (memoryview copies where the
    buffer format allows, NumPy elsewhere), with field names that the generated code also
    uses for its own values: all taken by the fast path, stored as the general path does."""
    dt = np.dtype(dtype)
    fields = {
        "obs": rr.Field((3,), dt), "kind": rr.Field((2, 2), dt, observation=True),
        "t": rr.Field((), dt), "type": rr.Field((2,), dt), "v0": rr.Field((), np.int64),
        "nd": rr.Field((0,), dt),
    }  # fmt: skip
    bufs = [rr.ReplayBuffer(8, fields, seed=0, storage="shared") for _ in range(2)]
    fast, slow = (rr.attach(b.share()) for b in bufs)
    calls: list[Any] = []

    def general(w: SharedWriter, **kw: Any) -> np.ndarray:
        calls.append(kw)
        return SharedWriter.add(w, **kw)

    fast.__dict__["add"] = build_add(
        fast, general, 0, (PUB, BEGIN, CLOSED),
        (fast._t, fast._last_end, fast._fcount), fast._due,
    )  # fmt: skip
    fast._due[0] = time.monotonic() + 3600
    rng = np.random.default_rng(0)
    for t in range(11):  # laps the ring; every 4th step ends its episode
        kw: dict[str, Any] = {
            name: (
                rng.integers(0, 100, f.shape) if name != "v0" else rng.integers(0, 100, ())
            ).astype(f.dtype)
            for name, f in fields.items()
        }
        kw.update(reward=float(t), terminated=t % 4 == 3, truncated=False)
        if t % 4 == 3:
            kw.update(next_obs=kw["obs"][::-1].copy(), next_kind=kw["kind"].T.copy())
        for name in ("t", "v0"):  # scalars as NumPy scalars
            kw[name] = kw[name][()]
        assert fast.add(**kw).tolist() == SharedWriter.add(slow, **kw).tolist() == [t]
    assert calls == []
    assert_same(arrays(fast), arrays(slow))
    for w in (fast, slow):
        w.close()
    for b in bufs:
        b.close()
