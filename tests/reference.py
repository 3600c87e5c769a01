"""A slow, obviously correct model of the replay buffer, for tests.

It keeps every step ever added (per env, as plain Python lists), decides what is stored and
sampleable from first principles, and builds each transition by walking the episode step by
step. It shares no code with ``rlreplay``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Step:
    values: dict[str, Any]  # every field of the step, plus next_<obs> if it ended its episode
    done: bool
    cut: bool = False  # ends an abandoned episode: no final observation, no flag


@dataclass
class RefBuffer:
    num_envs: int
    env_capacity: int
    n_step: int
    gamma: float
    frame_stack: int
    zero_pad: bool
    observation_names: tuple[str, ...]
    history: list[list[Step]] = field(default_factory=list)
    cleared_at: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.history = [[] for _ in range(self.num_envs)]
        self.cleared_at = [0] * self.num_envs

    # ---------------------------------------------------------------- writing
    def add(self, env: int, values: dict[str, Any]) -> int:
        done = bool(values["terminated"]) or bool(values["truncated"])
        stored = {k: np.array(v) for k, v in values.items() if done or not k.startswith("next_")}
        self.history[env].append(Step(stored, done))
        return (len(self.history[env]) - 1) * self.num_envs + env

    def end(self, env: int, final: dict[str, Any]) -> bool:
        """Truncate the running episode at env's newest stored step; False if there is none."""
        h = self.history[env]
        if len(h) <= self.oldest_stored(env) or h[-1].done or h[-1].cut:
            return False
        h[-1].values["truncated"] = np.array(True)
        h[-1].values.update({k: np.array(v) for k, v in final.items()})
        h[-1].done = True
        return True

    def abandon(self, env: int) -> int:
        """End env's running episode at its newest step, unobserved; -1 if none runs."""
        h = self.history[env]
        if not h or h[-1].done or h[-1].cut:
            return -1
        h[-1].cut = True
        return len(h) - 1

    def clear(self) -> None:
        self.cleared_at = [len(h) for h in self.history]

    # ---------------------------------------------------------------- queries
    def oldest_stored(self, env: int) -> int:
        return max(self.cleared_at[env], len(self.history[env]) - self.env_capacity)

    def episode_start(self, env: int, t: int) -> int:
        h = self.history[env]
        s = t
        while s > 0 and not (h[s - 1].done or h[s - 1].cut):
            s -= 1
        return s

    def steps_to_end(self, env: int, t: int) -> int:
        h = self.history[env]
        for j in range(t, len(h)):
            if h[j].done or h[j].cut:
                return j - t
        return -1

    def stored_ids(self) -> list[int]:
        return sorted(
            t * self.num_envs + e
            for e, h in enumerate(self.history)
            for t in range(self.oldest_stored(e), len(h))
        )

    def window(self, env: int, t: int) -> tuple[int, bool] | None:
        """``(m, ended)``, or None when the window is not known yet."""
        h = self.history[env]
        for j in range(self.n_step):
            if t + j >= len(h) or h[t + j].cut:
                return None  # not known yet, or never (the episode was abandoned)
            if h[t + j].done:
                return j + 1, True
        if t + self.n_step >= len(h):
            return None  # obs_{t+n} not added yet
        return self.n_step, False

    def in_hole(self, env: int, t: int) -> bool:
        """A stored step of an abandoned episode whose window will never be known."""
        return self.window(env, t) is None and self.steps_to_end(env, t) >= 0

    def is_sampleable(self, env: int, t: int) -> bool:
        lo = self.oldest_stored(env)
        if t < lo or t >= len(self.history[env]):
            return False
        if self.window(env, t) is None:
            return False
        start = self.episode_start(env, t)
        for i in range(self.frame_stack):
            p = t - i
            if p < start:
                break
            if p < lo:
                return False
        return True

    def sampleable_ids(self) -> list[int]:
        out = []
        for env in range(self.num_envs):
            for t in range(len(self.history[env])):
                if self.is_sampleable(env, t):
                    out.append(t * self.num_envs + env)
        return sorted(out)

    # ---------------------------------------------------------------- transitions
    def frame(self, env: int, t: int, name: str, start: int, final_of: int | None) -> Any:
        """Observation ``name`` at position t of the episode starting at ``start``."""
        h = self.history[env]
        if final_of is not None and t == final_of + 1:
            return h[final_of].values["next_" + name]
        if t < start:
            first = h[start].values[name]
            return np.zeros_like(first) if self.zero_pad else first
        return h[t].values[name]

    def stack(self, env: int, t: int, name: str, start: int, final_of: int | None) -> Any:
        if name != "obs" or self.frame_stack == 1:
            return self.frame(env, t, name, start, final_of)
        return np.stack(
            [
                self.frame(env, p, name, start, final_of)
                for p in range(t - self.frame_stack + 1, t + 1)
            ]
        )

    def transition(self, env: int, t: int) -> dict[str, Any]:
        h = self.history[env]
        win = self.window(env, t)
        assert win is not None
        m, ended = win
        start = self.episode_start(env, t)
        last = t + m - 1
        final_of = last if ended else None
        out: dict[str, Any] = {}
        for name, value in h[t].values.items():
            if name in ("reward", "terminated", "truncated") or name.startswith("next_"):
                continue
            out[name] = (
                self.stack(env, t, name, start, None) if name in self.observation_names else value
            )
        reward = sum(self.gamma**j * h[t + j].values["reward"].astype(np.float64) for j in range(m))
        term = ended and bool(h[last].values["terminated"])
        trunc = ended and bool(h[last].values["truncated"]) and not term
        out["reward"] = reward
        for name in self.observation_names:
            out["next_" + name] = self.stack(env, t + m, name, start, final_of)
        out["terminated"] = term
        out["truncated"] = trunc
        out["discount"] = 0.0 if term else self.gamma**m
        out["steps"] = m
        out["ids"] = t * self.num_envs + env
        out["env_ids"] = env
        return out


def assert_batch_matches(batch: Any, ref: RefBuffer, *, rtol: float = 1e-5) -> None:
    """Every row of ``batch`` equals the reference transition of its id."""
    for row, tid in enumerate(np.asarray(batch["ids"]).tolist()):
        env, t = tid % ref.num_envs, tid // ref.num_envs
        expected = ref.transition(env, t)
        for name, value in expected.items():
            got = batch[name][row]
            if name in ("reward", "discount"):
                np.testing.assert_allclose(
                    got, value, rtol=rtol, atol=1e-6, err_msg=f"{name} id {tid}"
                )
            else:
                np.testing.assert_array_equal(got, value, err_msg=f"{name} of id {tid}")
