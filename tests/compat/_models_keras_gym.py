"""Reference model of keras-gym's ExperienceReplayBuffer (0.2.17 / the seed), for the machine.

Written from the seed's ``keras_gym.caching.experience_replay`` (``/work/shared/seeds/002_*``)
with the deliberate differences of ``docs/migrating/keras_gym.md`` that define what a row is:
a step history since the last ``clear`` (fix 6), episodes cut by ``done`` (fix 4), a new
``episode_id`` or ``clear``, and for each step the row keras-gym builds from the frames the
agent saw (fix 2). Which steps a draw may return (:meth:`KerasGymModel.candidates`):

* the steps in keras-gym's ring: the newest ``min(adds, capacity + bootstrap_n)``;
* whose n-step window is known: it ends at a ``done`` of the same episode, or step
  ``t + bootstrap_n`` of the same episode was added (fixes 1 and 3; ``bootstrap_n=0``: any);
* that the seed does not reject: a frame ``t - i`` of the stack whose ring slot holds a larger
  ``episode_id`` (``np.any(_e[js[:-1]] > ep)``; past the overwrite boundary the slot holds a
  newer step, which may be of another episode with the same id: kept, fix 2 builds its stack).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
ACTIONS = 3  # the env's Discrete(3)


@dataclass(frozen=True)
class Step:
    frame: Array  # the frame stored for the step (the stack's last one)
    action: int
    reward: float
    done: bool
    episode_id: int
    episode: int  # the model's own episode number: done, a new id and clear all cut


def frame_of(g: int, k: int) -> Array:
    """The frame of the ``g``-th step: ``(1, 2)`` with frame stacks, else ``(2,)``; names ``g``."""
    f = np.array([g + 1, -(g + 1)], np.float32)
    return f.reshape(1, 2) if k > 1 else f


def state_of(frames: list[Array], k: int) -> Array:
    """The state handed to ``add``: the last ``k`` frames on a last axis (``(1, 2, k)``)."""
    if k == 1:
        return frames[-1]
    return np.stack(frames[-k:], axis=-1)


def one_hot(a: int) -> Array:
    out: Array = np.eye(ACTIONS)[a]
    return out


class KerasGymModel:
    """The steps since the last ``clear`` and keras-gym's rows built from them."""

    def __init__(self, capacity: int, n: int, k: int, gamma: float) -> None:
        self.capacity, self.n, self.k, self.gamma = capacity, n, k, gamma
        self.ring = capacity + n  # keras-gym's slots
        self.steps: list[Step] = []
        self.total = 0  # steps ever added (frames name it)
        self.episode = 0
        self.ended = True  # the next add starts an episode

    # ------------------------------------------------------------------ writing
    def add(self, reward: float, done: bool, episode_id: int) -> tuple[Any, ...]:
        """Record the next step; returns ``add``'s arguments ``(s, a, r, done, episode_id)``."""
        last = self.steps[-1] if self.steps else None
        if self.ended or last is None or last.episode_id != episode_id:
            self.episode += 1
        g = self.total
        step = Step(frame_of(g, self.k), g % ACTIONS, reward, done, episode_id, self.episode)
        self.steps.append(step)
        self.total += 1
        self.ended = done
        seen = [frame_of(max(g - i, self.first(len(self.steps) - 1)), self.k)
                for i in range(self.k - 1, -1, -1)]  # fmt: skip
        return state_of(seen, self.k), step.action, reward, done, episode_id

    def first(self, p: int) -> int:
        """The frame number of the first step of position ``p``'s episode."""
        e = self.steps[p].episode
        while p > 0 and self.steps[p - 1].episode == e:
            p -= 1
        return self.total - len(self.steps) + p

    def clear(self) -> None:
        self.steps = []
        self.ended = True

    def __len__(self) -> int:
        return max(0, min(len(self.steps), self.ring) - self.n)

    # ------------------------------------------------------------------ reads
    def held(self) -> range:
        """Positions (in ``self.steps``) that keras-gym's ring can draw."""
        adds = len(self.steps)
        return range(adds - min(adds, self.ring), adds)

    def window(self, p: int) -> int | None:
        """``m`` of position ``p``'s window, or None when the window is not known (rejected)."""
        adds, e = len(self.steps), self.steps[p].episode
        for j in range(self.n):
            if p + j >= adds or self.steps[p + j].episode != e:
                return None
            if self.steps[p + j].done:
                return j + 1
        if self.n and (p + self.n >= adds or self.steps[p + self.n].episode != e):
            return None
        return self.n

    def seed_rejects(self, p: int) -> bool:
        """The seed's ``np.any(_e[js[:-1]] > ep)``: a stack slot holding a larger id (a slot
        not written since the ``clear`` holds id 0)."""
        adds, ep = len(self.steps), self.steps[p].episode_id
        for i in range(1, self.k):
            q = p - i
            while q + self.ring < adds:  # the slot holds the newest step of its residue
                q += self.ring
            if (self.steps[q].episode_id if q >= 0 else 0) > ep:
                return True
        return False

    def candidates(self) -> list[int]:
        return [p for p in self.held() if self.window(p) is not None and not self.seed_rejects(p)]

    def stack(self, p: int) -> Array:
        """The frames the agent saw at position ``p``: padded with its episode's first frame."""
        base = self.total - len(self.steps)
        first = self.first(p) - base
        frames = [self.steps[max(p - i, first)].frame for i in range(self.k - 1, -1, -1)]
        return frames[-1] if self.k == 1 else np.stack(frames, axis=-1)

    def row(self, p: int) -> dict[str, Any]:
        """keras-gym's ``(S, A, Rn, In, S_next, A_next)`` for position ``p`` (a candidate)."""
        m = self.window(p)
        assert m is not None
        rn = 0.0
        for j in range(m):
            rn += pow(self.gamma, j) * self.steps[p + j].reward
        done = m > 0 and self.steps[p + m - 1].done
        nxt = p + self.n
        out: dict[str, Any] = {
            "S": self.stack(p),
            "A": one_hot(self.steps[p].action),
            "Rn": rn,
            "In": 0.0 if done else self.gamma**self.n,
            "done": done,
        }
        if done:  # masked by In = 0, but returned all the same
            out["S_next"], out["A_next"] = self.after_done(p)
        else:
            out["S_next"] = self.stack(nxt)
            out["A_next"] = one_hot(self.steps[nxt].action)
        return out

    def held_at(self, q: int) -> Step | None:
        """What keras-gym's ring slot of position ``q`` holds when ``q`` is read as a step.

        ``q`` added: that step (the front-end keeps the frames the agent saw, fix 2). Not added
        yet: the slot ``q % ring`` holds step ``q - ring`` (the oldest data), or, before the
        ring came round to it since the last ``clear``, nothing (None: keras-gym's
        ``np.empty`` frame, read as zeros by the front-end (fixes 6 and 7), its ``np.zeros``
        action and episode id 0).
        """
        if q < len(self.steps):
            return self.steps[q]
        return self.steps[q - self.ring] if q >= self.ring else None

    def after_done(self, p: int) -> tuple[Array, Array]:
        """The seed's ``S_next``/``A_next`` of position ``p`` whose window ended at a ``done``.

        The seed reads ``ks = j + n - arange(k - 1, -1, -1)`` (``j + n`` may not be added yet)
        and, from the second-newest frame back, replaces ``ks[~i]`` by ``ks[~i + 1]`` where
        the slot's episode id is below ``ep = _e[j]``; ``A_next`` is the action at ``ks[-1]``.
        Frames before ``p``'s episode repeat its first frame (fix 4; the seed's padding for
        smaller ids).
        """
        ep, first = self.steps[p].episode_id, self.first(p) - (self.total - len(self.steps))
        zero = np.zeros_like(self.steps[p].frame)
        frames: list[Array] = []
        ids: list[int] = []
        for q in range(p + self.n - self.k + 1, p + self.n + 1):
            held = self.held_at(max(q, first))
            frames.append(zero if held is None else held.frame)
            ids.append(0 if held is None else held.episode_id)
        for i in range(1, self.k):  # the seed's loop: `if self._e[ks[~i]] < ep`
            if ids[~i] < ep:
                frames[~i] = frames[~i + 1]
        last = self.held_at(p + self.n)
        action = np.zeros(ACTIONS) if last is None else one_hot(last.action)
        return (frames[-1] if self.k == 1 else np.stack(frames, axis=-1)), action

    def position_of(self, frame_number: int) -> int:
        return frame_number - (self.total - len(self.steps))
