"""The plain-NumPy limit: the same memory work as a replay buffer with no bookkeeping.

Preallocated arrays written at a cursor, uniform random indices, fancy-index gathers. It does
not validate input, track episodes, mask windows crossing the cursor or an episode end, or
keep final observations: it is the practical ceiling of a NumPy-based buffer, not a buffer.
Next observations are read from the following row (``obs[(i + 1) % n]``), as a buffer that
stores each observation once does. Prioritized sampling uses a vectorised NumPy sum tree and
min tree (the least bookkeeping that sampling by priority needs).
"""

from __future__ import annotations

from typing import Any

import harness as h
import numpy as np

Array = np.ndarray[Any, Any]

CHUNK = 256
VCHUNK = 64


def version() -> str:
    return f"numpy {np.__version__}"


class Flat:
    """Columns of one ring, written one row (or a few rows) at a time."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], dtype: Any) -> None:
        self.n = capacity
        self.obs = np.zeros((capacity, *obs_shape), dtype)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, bool)
        self.ptr = 0
        self.size = 0

    def add(self, obs: Any, action: Any, reward: Any, done: Any) -> None:
        p = self.ptr
        self.obs[p] = obs
        self.action[p] = action
        self.reward[p] = reward
        self.done[p] = done
        self.ptr = (p + 1) % self.n
        self.size = min(self.size + 1, self.n)

    def add_rows(self, obs: Array, action: Array, reward: Array, done: Array) -> None:
        k = obs.shape[0]
        rows = (self.ptr + np.arange(k)) % self.n
        self.obs[rows] = obs
        self.action[rows] = action
        self.reward[rows] = reward
        self.done[rows] = done
        self.ptr = (self.ptr + k) % self.n
        self.size = min(self.size + k, self.n)

    def gather(self, idx: Array) -> dict[str, Array]:
        return {
            "obs": self.obs[idx],
            "action": self.action[idx],
            "reward": self.reward[idx],
            "done": self.done[idx],
            "next_obs": self.obs[(idx + 1) % self.n],
        }


def single(sz: h.Sizes) -> dict[str, Any]:
    st = h.single_steps((h.OBS_DIM,), np.float32)
    buf = Flat(sz.capacity, (h.OBS_DIM,), np.float32)
    rng = np.random.default_rng(0)

    def add(i: int) -> int:
        base = (i * CHUNK) & h.MASK
        for j in range(base, base + CHUNK):
            buf.add(st.obs[j], st.action[j], st.reward[j], st.done[j])
        return CHUNK

    rates = h.timed_windows(add, sz.repeats, sz.window)
    while buf.size < sz.single_fill:
        buf.add_rows(st.obs[:-1], st.action_arr, st.reward_arr, st.done_arr)

    def sample(i: int) -> int:
        buf.gather(rng.integers(0, buf.size, sz.batch))
        return sz.batch

    return {"add": rates, "sample": h.timed_windows(sample, sz.repeats, sz.window)}


def _env_rings(capacity: int, obs_shape: tuple[int, ...]) -> dict[str, Array]:
    per_env = capacity // h.NUM_ENVS
    return {
        "obs": np.zeros((h.NUM_ENVS, per_env, *obs_shape), np.float32),
        "action": np.zeros((h.NUM_ENVS, per_env), np.int64),
        "reward": np.zeros((h.NUM_ENVS, per_env), np.float32),
        "done": np.zeros((h.NUM_ENVS, per_env), bool),
    }


def _vector_add(cols: dict[str, Array], vs: h.VectorSteps, cursor: list[int]) -> Any:
    per_env = cols["action"].shape[1]

    def run(i: int) -> int:
        base = (i * VCHUNK) & h.MASK
        for j in range(base, base + VCHUNK):
            p = cursor[0]
            cols["obs"][:, p] = vs.obs[j]
            cols["action"][:, p] = vs.action[j]
            cols["reward"][:, p] = vs.reward[j]
            cols["done"][:, p] = vs.done[j]
            cursor[0] = (p + 1) % per_env
            cursor[1] += 1
        return VCHUNK * h.NUM_ENVS

    return run


def vector(sz: h.Sizes) -> dict[str, Any]:
    vs = h.vector_steps((h.OBS_DIM,))
    cols = _env_rings(sz.capacity, (h.OBS_DIM,))
    return {"add": h.timed_windows(_vector_add(cols, vs, [0, 0]), sz.repeats, sz.window)}


def atari(sz: h.Sizes) -> dict[str, Any]:
    st = h.single_steps(h.FRAME, np.uint8, end_p=1 / 1000)
    rss0 = h.rss_bytes()
    buf = Flat(sz.atari_capacity, h.FRAME, np.uint8)

    def add(i: int) -> int:
        base = (i * 128) & h.MASK
        for j in range(base, base + 128):
            buf.add(st.obs[j], st.action[j], st.reward[j], st.done[j])
        return 128

    fill = h.timed_segments(add, sz.atari_fill, sz.repeats)
    rss = h.rss_bytes() - rss0
    rng = np.random.default_rng(0)
    offsets = np.arange(1 - h.STACK, 1)

    def sample(i: int) -> int:
        idx = rng.integers(0, buf.size, sz.atari_batch)
        stack = (idx[:, None] + offsets) % buf.n
        buf.obs[stack], buf.obs[(stack + 1) % buf.n]  # the gathers are the work
        buf.action[idx], buf.reward[idx], buf.done[idx]
        return sz.atari_batch

    return {
        "fill": fill,
        "sample": h.timed_windows(sample, sz.repeats, sz.window),
        "memory": [rss],
        "info": {"stored": buf.size},
    }


class SumMinTree:
    """Sum and min segment trees in flat arrays (leaves at ``[size, 2 * size)``)."""

    def __init__(self, capacity: int) -> None:
        self.size = 1 << (capacity - 1).bit_length()
        self.sum = np.zeros(2 * self.size)
        self.min = np.full(2 * self.size, np.inf)

    def set(self, leaves: Array, mass: Array) -> None:
        i = leaves + self.size
        self.sum[i] = mass
        self.min[i] = mass
        while i[0] > 1:
            i = np.unique(i >> 1)
            self.sum[i] = self.sum[2 * i] + self.sum[2 * i + 1]
            self.min[i] = np.minimum(self.min[2 * i], self.min[2 * i + 1])

    def find(self, u: Array) -> Array:
        """Leaves whose prefix-sum interval holds each ``u`` in ``[0, total)``."""
        i = np.ones(u.shape[0], np.int64)
        while i[0] < self.size:
            left = 2 * i
            go_right = u >= self.sum[left]
            u = np.where(go_right, u - self.sum[left], u)
            i = left + go_right
        return i - self.size


def per(sz: h.Sizes) -> dict[str, Any]:
    vs = h.vector_steps((h.OBS_DIM,))
    cols = _env_rings(sz.capacity, (h.OBS_DIM,))
    per_env = sz.capacity // h.NUM_ENVS
    tree = SumMinTree(sz.capacity)
    cursor = [0, 0]
    add_rows = _vector_add(cols, vs, cursor)
    envs = np.arange(h.NUM_ENVS) * per_env
    max_mass = [1.0]

    def add(i: int) -> int:
        p0 = cursor[0]
        n = add_rows(i)
        steps = (p0 + np.arange(VCHUNK)) % per_env
        tree.set((envs[:, None] + steps).ravel(), np.full(n, max_mass[0]))
        return n

    fill = h.timed_segments(add, sz.per_fill, sz.repeats)
    rng = np.random.default_rng(0)
    prios = np.abs(rng.normal(size=(64, sz.batch))) + 1e-6

    def iteration(i: int) -> int:
        for k in range(10):
            total = tree.sum[1]
            u = (np.arange(sz.batch) + rng.random(sz.batch)) * (total / sz.batch)
            leaf = tree.find(u)
            p = tree.sum[leaf + tree.size] / total
            _ = ((tree.min[1] / total) / p) ** sz.per_beta  # normalised weights
            env, t = np.divmod(leaf, per_env)
            for v in cols.values():
                v[env, t]  # the gather is the work
            cols["obs"][env, (t + 1) % per_env]
            mass = prios[(i * 10 + k) & 63] ** sz.per_alpha
            unique, first = np.unique(leaf, return_index=True)
            tree.set(unique, mass[first])
            max_mass[0] = max(max_mass[0], float(mass.max()))
        return 10

    return {"fill": fill, "iteration": h.timed_windows(iteration, sz.repeats, sz.window)}


def sequences(sz: h.Sizes) -> dict[str, Any]:
    vs = h.vector_steps((h.SEQ_OBS_DIM,))
    cols = _env_rings(sz.capacity, (h.SEQ_OBS_DIM,))
    per_env = sz.capacity // h.NUM_ENVS
    cursor = [0, 0]
    add = _vector_add(cols, vs, cursor)
    i = 0
    while cursor[1] * h.NUM_ENVS < sz.seq_fill:
        add(i)
        i += 1
    stored = min(cursor[1], per_env)
    rng = np.random.default_rng(0)
    offsets = np.arange(sz.seq_len)

    def sample(i: int) -> int:
        env = rng.integers(0, h.NUM_ENVS, sz.seq_batch)[:, None]
        t = (rng.integers(0, stored - sz.seq_len, sz.seq_batch)[:, None] + offsets) % per_env
        for v in cols.values():
            v[env, t]  # the gather is the work
        cols["obs"][env, (t + 1) % per_env]
        return sz.seq_batch

    return {"sample": h.timed_windows(sample, sz.repeats, sz.window)}


if __name__ == "__main__":
    raise SystemExit(
        h.main(
            "numpy-limit",
            version,
            {f.__name__: f for f in (single, vector, atari, per, sequences)},
        )
    )
