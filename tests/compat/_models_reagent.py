"""Reference model of ReAgent's replay memory (reagent 0.1), slot by slot, for the state machine.

Written from ``reagent/replay_memory/circular_replay_buffer.py`` and
``prioritized_replay_buffer.py`` of reagent 0.1 (``/tmp/orig``), with the deliberate
differences of ``docs/migrating/reagent.md`` where they change what a call returns:

* the ring: ``stack_size - 1`` zero padding rows at the start of each episode (counted in
  ``add_count``, priority 0), validity marked as ReAgent's ``add`` marks it, ``invalid_range``
  around the cursor;
* a transition of slot ``s`` read from consecutive slots: the stack ``s - k + 1 .. s``, the
  n-step window ``s .. s + m - 1`` (``m``: up to the first terminal), next values at ``s + m``;
* the prioritized buffer's sum-tree leaves: a power of two ``>= capacity``, negative indices
  counting back from the last leaf, padding leaves read 0 and refused on write (difference 6),
  ``max_recorded_priority`` the largest value ever set (starting at 1).

:meth:`ReAgentModel.transition` is what reagent 0.1 reads for *any* slot, whatever the slots
hold (rows never written are zeros here, ``np.empty`` memory in 0.1): the front-end returns it
for every slot it samples or is asked for, valid or not, one episode's steps or not.
:meth:`ReAgentModel.intact` tells whether the slots of a transition hold the steps of one
episode as written (counted by the machine: the rows the core assembles), and
:meth:`ReAgentModel.real` whether a slot holds a step at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]
OBS_DIM = 2


def step_values(g: int, reward: float) -> tuple[Array, int, float, float]:
    """Observation, action, reward and extra of the ``g``-th real step: each names ``g``."""
    obs = np.array([g + 1, -(g + 1)], np.float32)
    return obs, g % 5, reward, 0.25 * g


class ReAgentModel:
    """ReAgent's slot ring (observation ``(2,)`` float32, int action, one float extra)."""

    def __init__(self, cap: int, k: int, n: int, gamma: float, prioritized: bool) -> None:
        self.cap, self.k, self.n, self.gamma = cap, k, n, gamma
        self.prioritized = prioritized
        self.obs = np.zeros((cap, OBS_DIM), np.float32)
        self.action = np.zeros(cap, np.int32)
        self.reward = np.zeros(cap, np.float32)
        self.terminal = np.zeros(cap, np.uint8)
        self.extra = np.zeros(cap, np.float32)
        self.step_of = np.full(cap, -1, np.int64)  # global step number held, -1: no step
        self.t_of = np.full(cap, -1, np.int64)  # the step's position in its episode
        self.valid = np.zeros(cap, bool)
        self.leaves = np.zeros(1 << (cap - 1).bit_length(), np.float64)
        self.max_recorded = 1.0
        self.add_count = 0
        self.in_episode = 0
        self.steps = 0  # real steps added so far (the next step's number)

    # ------------------------------------------------------------------ ring
    def cursor(self) -> int:
        return self.add_count % self.cap

    def _write(self, o: Any, a: int, r: float, term: bool, x: float, g: int, p: float) -> None:
        """One row at the cursor: step ``g`` (``-1``: a padding row) with leaf priority ``p``."""
        c = self.cursor()
        self.obs[c], self.action[c], self.reward[c] = o, a, r
        self.terminal[c], self.extra[c] = term, x
        self.step_of[c], self.t_of[c] = g, (self.in_episode if g >= 0 else -1)
        if self.prioritized:
            self.leaves[c] = p
            self.max_recorded = max(self.max_recorded, p)
        self.add_count += 1

    def add(self, reward: float, term: bool, priority: float | None = None) -> tuple[Any, ...]:
        """ReAgent's ``add`` of the next step; returns the values given to the buffer."""
        g = self.steps
        o, a, r, x = step_values(g, reward)
        if self.add_count == 0 or self.terminal[(self.cursor() - 1) % self.cap]:
            self.in_episode = 0
            for _ in range(self.k - 1):
                self._write(np.zeros(OBS_DIM), 0, 0.0, False, 0.0, -1, 0.0)
        cur = self.cursor()
        self.valid[cur] = False
        if self.in_episode >= self.n:
            self.valid[(cur - self.n) % self.cap] = True
        p = self.max_recorded if priority is None else priority
        self._write(o, a, r, term, x, g, p)
        self.in_episode += 1
        self.steps += 1
        for i in range(self.k - 1):
            self.valid[(self.cursor() + i) % self.cap] = False
        if term:
            for i in range(min(self.n, self.in_episode)):
                self.valid[(cur - i) % self.cap] = True
        return o, a, r, term, x

    def invalid_range(self) -> Array:
        if self.add_count == 0:
            return np.zeros(self.k)
        c = self.cursor()
        return np.array([(c - self.n + i) % self.cap for i in range(self.k + self.n)])

    def size(self) -> int:
        return int(self.valid.sum())

    # ------------------------------------------------------------------ priorities
    def leaf(self, i: int) -> int:
        """The leaf ReAgent's ``nodes[-1][i]`` reads (``IndexError`` outside the level)."""
        size = self.leaves.size
        if not -size <= i < size:
            raise IndexError(i)
        return i % size

    def get_priority(self, indices: list[int]) -> Array:
        return self.leaves[[self.leaf(i) for i in indices]].astype(np.float32)

    def set_priority(self, indices: list[int], values: list[float]) -> None:
        for i, v in zip(indices, values, strict=True):
            self.leaves[self.leaf(i)] = v
            self.max_recorded = max(self.max_recorded, v)

    # ------------------------------------------------------------------ reads
    def real(self, s: int) -> bool:
        """Slot ``s`` holds a step (not a padding row, not never written)."""
        return bool(self.step_of[s % self.cap] >= 0)

    def window(self, s: int) -> int:
        """``m``: the steps of the n-step window read from ``s`` (up to the first terminal)."""
        rows = [(s + j) % self.cap for j in range(self.n)]
        term = self.terminal[rows].astype(bool)
        return int(np.argmax(term)) + 1 if term.any() else self.n

    def intact(self, s: int) -> bool:
        """The stack, window and (non-terminal) next step of ``s`` are one episode's steps.

        Then the slots hold exactly what was written for that transition (the front-end
        assembles it in the core; other rows it reads from the slots).
        """
        if not self.real(s):
            return False
        g, t = int(self.step_of[s]), int(self.t_of[s])
        for j in range(1, self.k):  # earlier frames: the episode's steps, else zero rows
            held = int(self.step_of[(s - j) % self.cap])
            if (held != g - j) if t - j >= 0 else (held >= 0):
                return False
        m = self.window(s)
        terminal = bool(self.terminal[(s + m - 1) % self.cap])
        return all(
            self.step_of[(s + j) % self.cap] == g + j for j in range(1, m + (0 if terminal else 1))
        )

    def stack(self, s: int) -> Array:
        rows = [(s - self.k + 1 + j) % self.cap for j in range(self.k)]
        frames = self.obs[rows]  # (k, 2)
        return frames[-1] if self.k == 1 else np.moveaxis(frames, 0, -1)

    def transition(self, s: int) -> dict[str, Any]:
        """What reagent 0.1's ``sample_transition_batch`` reads for slot ``s`` (any slot)."""
        m = self.window(s)
        rows = [(s + j) % self.cap for j in range(m)]
        nxt = (s + m) % self.cap
        reward = sum(self.gamma**j * np.float64(self.reward[rows[j]]) for j in range(m))
        return {
            "state": self.stack(s),
            "action": self.action[s],
            "reward": np.float32(reward),
            "terminal": bool(self.terminal[rows[-1]]),
            "step": m,
            "log_prob": self.extra[s],
            "next_state": self.stack(nxt),
            "next_action": self.action[nxt],
            "next_reward": self.reward[nxt],
            "next_log_prob": self.extra[nxt],
        }
