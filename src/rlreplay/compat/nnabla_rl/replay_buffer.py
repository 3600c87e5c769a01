"""Stand-in for ``nnabla_rl.replay_buffer``: nnabla-rl's ``ReplayBuffer`` over the rlreplay core.

nnabla-rl stores *experiences*, Python tuples ``(s, a, r, non_terminal, s_next, info)``, and
hands them back by position (index 0 is the oldest stored experience). This front-end keeps that
API and stores the experiences in one :class:`rlreplay.ReplayBuffer` (one env, ``n_step=1``):

==========================  ===============================================================
nnabla-rl                   core
==========================  ===============================================================
``s`` (array)               observation field ``obs`` (shape and dtype of the first ``s``)
``s`` (tuple of arrays)     observation fields ``obs_0``, ``obs_1``, ... (one per element)
``a`` (array / tuple)       field ``action`` (or ``action_0``, ``action_1``, ...)
``r``                       ``reward`` (a Python ``int``/``float`` is stored as float64)
``non_terminal == 0``       ``terminated`` (the final observation is ``s_next``)
episode cut (see below)     ``truncated`` (the final observation is ``s_next``)
``s_next``                  *not stored*: the next step's ``s``, or the final observation
``info`` (and any extras)   Python objects in a side ring aligned with the core's ids
==========================  ===============================================================

The schema is inferred from the first experience: each array becomes an ``rr.Field`` of its
shape and dtype; NumPy scalars and Python scalars come back as the same kind of value.

Episode boundaries. nnabla-rl has no truncation flag and its experiences are independent
tuples, whereas the core stores each observation once (the ``s_next`` of a step is the ``s`` of
the following step of its episode). So the adapter decides where episodes end: an experience
ends its episode when ``non_terminal == 0`` (terminated), when its ``info`` has a true
``"TimeLimit.truncated"`` (nnabla-rl's environment wrappers set it; truncated), or when the
next appended experience's ``s`` differs (byte for byte) from its ``s_next`` (truncated).
The last case is only known at the next :meth:`~ReplayBuffer.append`: until then the newest
experience is *held* by the adapter (it is already in ``len``, indexable and sampled
uniformly), and the core's newest step, whose successor is the held one, is cached too. Two
experiences at most live outside the core. Every ``(s, a, r, non_terminal, s_next, info)`` comes
back exactly as appended (``non_terminal`` as a Python float ``1.0``/``0.0``).

Capacity. ``capacity=None`` is unbounded: the core starts with room for
``_INITIAL_CAPACITY`` steps and, when full, is rebuilt with twice the room and every stored
step re-added (amortised O(1) per append; nothing is ever dropped). A bounded buffer keeps the
newest ``capacity`` experiences, as nnabla-rl's ring does.

Random numbers. nnabla-rl draws from its global ``nnabla_rl.random.drng``; each buffer here has
its own generator, seeded with the extra keyword ``seed`` (same seed, same calls: same samples).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlreplay.batch import Batch
from rlreplay.buffer import ReplayBuffer as CoreBuffer
from rlreplay.errors import ConfigError, DTypeError, ShapeError
from rlreplay.sampling.uniform import draw_mixed
from rlreplay.spec import Field, Schema

__all__ = ["Experience", "Indices", "ReplayBuffer"]

Array = np.ndarray[Any, Any]
#: ``(s, a, r, non_terminal, s_next, info)``; ``s``/``s_next``/``a`` may be tuples of arrays.
Experience = tuple[Any, ...]
#: Positions of experiences: a sequence of ints or a 1-D integer array.
Indices = Sequence[int] | np.ndarray[Any, Any]

#: Core room (steps) of an unbounded buffer before its first doubling.
_INITIAL_CAPACITY = 1024
#: The ``info`` key nnabla-rl's environment wrappers set on a time-limit truncation.
TIMELIMIT_KEY = "TimeLimit.truncated"


# ---------------------------------------------------------------------------- experience codec
@dataclass(frozen=True)
class _Part:
    """One core field holding one element of an experience, and how to give it back."""

    name: str
    field: Field
    kind: str  # "array" (ndarray), "numpy" (NumPy scalar) or "python" (bool/int/float)

    def decode(self, col: Array) -> list[Any]:
        """Per-row values of a gathered column, of the kind that was appended."""
        if col.dtype != self.field.dtype:
            col = col.astype(self.field.dtype)  # the core widens integer rewards
        if self.kind == "python":
            return list(col.tolist())
        return list(col)  # row views (fresh copies made by the core) or NumPy scalars


def _infer_part(name: str, value: Any, *, observation: bool, reward: bool = False) -> _Part:
    """A :class:`_Part` of the first appended value of an element."""
    if isinstance(value, np.generic):
        kind, arr = "numpy", np.asarray(value)
    elif isinstance(value, bool | int | float):
        # Python rewards are stored as float64 (a later float reward must fit an int one).
        kind, arr = "python", np.asarray(float(value) if reward else value)
    else:
        kind, arr = "array", np.asarray(value)
    if arr.dtype == object or arr.dtype.kind not in "biufc":
        raise DTypeError(
            f"{name}: expected numeric arrays or scalars, got {type(value).__name__} "
            f"(dtype {arr.dtype}); nnabla-rl experiences hold arrays"
        )
    return _Part(name, Field(arr.shape, arr.dtype, observation=observation), kind)


@dataclass(frozen=True)
class _Slot:
    """An experience element that is one array or a tuple of arrays (``s``, ``a``)."""

    parts: tuple[_Part, ...]
    is_tuple: bool

    @classmethod
    def infer(cls, base: str, value: Any, *, observation: bool) -> _Slot:
        if isinstance(value, tuple):
            if not value:
                raise ShapeError(f"{base}: expected a non-empty tuple of arrays, got ()")
            parts = [
                _infer_part(f"{base}_{i}", v, observation=observation) for i, v in enumerate(value)
            ]
            return cls(tuple(parts), True)
        return cls((_infer_part(base, value, observation=observation),), False)

    def split(self, what: str, value: Any) -> tuple[Any, ...]:
        """The elements of ``value``, checked against the inferred structure."""
        if self.is_tuple:
            if not isinstance(value, tuple) or len(value) != len(self.parts):
                raise ShapeError(
                    f"{what}: expected a tuple of {len(self.parts)} arrays (as in the first "
                    f"experience), got {type(value).__name__}"
                )
            return value
        if isinstance(value, tuple):
            raise ShapeError(
                f"{what}: expected one array (as in the first experience), got a tuple"
            )
        return (value,)

    def join(self, cols: list[list[Any]]) -> list[Any]:
        if self.is_tuple:
            return [tuple(vals) for vals in zip(*cols, strict=True)]
        return cols[0]


@dataclass
class _Row:
    """One validated experience, as the core will store it (values are private copies)."""

    obs: tuple[Any, ...]  # every element of s, converted (Atari: the whole uint8 stack)
    next_obs: tuple[Any, ...]  # the same for s_next
    action: tuple[Any, ...]
    reward: Any
    terminal: bool  # non_terminal == 0
    timelimit: bool  # info["TimeLimit.truncated"] is true
    extras: tuple[Any, ...]  # experience[5:]: info and anything after it, kept as objects


def _copy(value: Any) -> Any:
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Byte equality (so -0.0 != 0.0 and NaN == NaN bit patterns): the round trip is exact."""
    for x, y in zip(a, b, strict=True):
        ax, ay = np.asarray(x), np.asarray(y)
        if ax.shape != ay.shape or ax.dtype != ay.dtype or ax.tobytes() != ay.tobytes():
            return False
    return True


def _terminal(value: Any) -> bool:
    """``non_terminal == 0``; nnabla-rl's flag is the float 1.0 or 0.0."""
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        raise DTypeError(f"non_terminal: expected the number 1.0 or 0.0, got {value!r}")
    flag = float(arr.reshape(()).item())
    if flag not in (0.0, 1.0):
        raise ValueError(
            f"non_terminal: expected 1.0 (episode goes on) or 0.0 (terminal), got {flag}; "
            "the core stores it as a terminated flag"
        )
    return flag == 0.0


class _Codec:
    """Maps experience tuples to core fields and back (schema inferred from one experience)."""

    def __init__(self, state: _Slot, action: _Slot, reward: _Part) -> None:
        self.state = state
        self.action = action
        self.reward = reward

    @classmethod
    def infer(cls, experience: Sequence[Any]) -> _Codec:
        """The schema of the first experience: one field per array (element of a tuple)."""
        return cls(
            _Slot.infer("obs", experience[0], observation=True),
            _Slot.infer("action", experience[1], observation=False),
            _infer_part("reward", experience[2], observation=False, reward=True),
        )

    @property
    def obs_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.state.parts)

    def fields(self) -> dict[str, Field]:
        out = {p.name: p.field for p in self.state.parts + self.action.parts}
        out["reward"] = self.reward.field
        return out

    # -- writing
    def encode(self, schema: Schema, experience: Any) -> _Row:
        """Validate one experience against the schema (nothing is stored here)."""
        exp = _check_experience(experience)
        s, a, r, non_terminal, s_next = exp[:5]
        extras = tuple(exp[5:])
        obs = self._convert_state(schema, "", "s", s)
        next_obs = self._convert_state(schema, "next_", "s_next", s_next)
        action = tuple(
            _copy(schema.convert(p.name, v, ()))
            for p, v in zip(self.action.parts, self.action.split("a", a), strict=True)
        )
        reward = _copy(schema.convert("reward", r, ()))
        info = extras[0]
        timelimit = isinstance(info, Mapping) and bool(info.get(TIMELIMIT_KEY, False))
        return _Row(obs, next_obs, action, reward, _terminal(non_terminal), timelimit, extras)

    def _convert_state(self, schema: Schema, prefix: str, what: str, value: Any) -> tuple[Any, ...]:
        return tuple(
            _copy(schema.convert(prefix + p.name, v, ()))
            for p, v in zip(self.state.parts, self.state.split(what, value), strict=True)
        )

    def step_values(self, row: _Row) -> dict[str, Any]:
        """The values :meth:`rlreplay.ReplayBuffer.add` stores for the row's step."""
        out = dict(zip(self.obs_names, row.obs, strict=True))
        out.update(zip((p.name for p in self.action.parts), row.action, strict=True))
        out["reward"] = row.reward
        return out

    def final_values(self, row: _Row) -> dict[str, Any]:
        """``next_<obs>`` for a step that ends its episode."""
        return {"next_" + n: v for n, v in zip(self.obs_names, row.next_obs, strict=True)}

    # -- reading
    def row_batch(self, row: _Row) -> dict[str, Array]:
        """A row laid out like one transition of :meth:`rlreplay.ReplayBuffer.get_transitions`."""
        out: dict[str, Array] = {}
        for p, v, nv in zip(self.state.parts, row.obs, row.next_obs, strict=True):
            out[p.name] = np.asarray(v, p.field.dtype)[None]
            out["next_" + p.name] = np.asarray(nv, p.field.dtype)[None]
        for p, v in zip(self.action.parts, row.action, strict=True):
            out[p.name] = np.asarray(v, p.field.dtype)[None]
        out["reward"] = np.asarray(row.reward, self.reward.field.dtype)[None]
        out["terminated"] = np.array([row.terminal])
        return out

    def decode_state(self, batch: Mapping[str, Array], prefix: str) -> list[Any]:
        return self.state.join([p.decode(batch[prefix + p.name]) for p in self.state.parts])

    def decode(
        self, batch: Mapping[str, Array], extras: Sequence[tuple[Any, ...]]
    ) -> list[Experience]:
        """Experience tuples from gathered transitions (``extras`` per row: info, ...)."""
        s = self.decode_state(batch, "")
        s_next = self.decode_state(batch, "next_")
        a = self.action.join([p.decode(batch[p.name]) for p in self.action.parts])
        r = self.reward.decode(batch["reward"])
        non_terminal = np.where(batch["terminated"], 0.0, 1.0).tolist()
        return [(s[i], a[i], r[i], non_terminal[i], s_next[i], *extras[i]) for i in range(len(s))]


def _check_experience(experience: Any) -> Sequence[Any]:
    if not isinstance(experience, tuple | list) or len(experience) < 6:
        raise ValueError(
            "experience: expected a tuple (s, a, r, non_terminal, s_next, info), got "
            f"{type(experience).__name__}"
            + (f" of length {len(experience)}" if isinstance(experience, tuple | list) else "")
        )
    return experience


# ---------------------------------------------------------------------------- argument checks
def check_capacity(name: str, value: Any, *, allow_none: bool) -> int | None:
    """``None`` (when allowed) or an int ``>= 1``."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(
            f"{name}: expected an int >= 1{' or None' if allow_none else ''}, got {value!r}"
        )
    return int(value)


def check_seed(seed: Any) -> int | None:
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0
    ):
        raise ConfigError(f"seed: expected a non-negative int or None, got {seed!r}")
    return None if seed is None else int(seed)


def check_count(name: str, value: Any) -> int:
    """A positive int argument (``num_samples``, ``num_steps``, ``portion_length``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name}: {value} should be greater than 0!")
    return int(value)


def as_indices(indices: Any) -> Array:
    """A 1-D int64 array of the given indices; an empty one is nnabla-rl's ``ValueError``."""
    arr = np.asarray(indices)
    if arr.size == 0:
        raise ValueError("Indices are empty")
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(
            f"indices: expected a 1-D sequence of ints, got dtype {arr.dtype} shape {arr.shape}"
        )
    return arr.astype(np.int64, copy=False)


def distinct_draw(total: int, k: int, rng: np.random.Generator) -> Array:
    """``k`` distinct positions of ``[0, total)``, uniformly (the core's no-replacement draw).

    One ``rng.choice(total, k, replace=False)``: the draw nnabla-rl makes with its global
    generator.
    """
    lo, hi = np.zeros(1, np.int64), np.array([total], np.int64)
    _, t = draw_mixed(lo, hi, k, rng, recent_ratio=0.0, recent_steps=1, replacement=False)
    return t


# ---------------------------------------------------------------------------- the buffer
class ReplayBuffer:
    """nnabla-rl's replay buffer: experiences by position, uniform sampling without replacement.

    Holds the newest ``capacity`` experiences (all of them when ``capacity`` is None). Index 0
    is the oldest stored experience and ``len(buffer) - 1`` the newest. :meth:`sample` draws
    ``num_samples`` *distinct* indices uniformly from ``[0, len - num_steps + 1)``; with
    ``num_steps > 1`` it returns, for each ``j < num_steps``, the experiences at ``index + j``
    (consecutive stored experiences, which may belong to different episodes, as in nnabla-rl).
    ``info["weights"]`` is ``np.ones((num_samples, 1))``.

    Invariants: the core stores every experience but the newest *held* one (see the module
    docstring), and its episodes end exactly where the appended experiences' episodes end; the
    side ring of ``info`` objects is aligned with the core's ids (slot ``id % core capacity``).

    Cost: :meth:`append` is O(size of one experience) (amortised, with the doublings of an
    unbounded buffer); :meth:`sample` is one vectorised core gather plus building the tuples,
    O(num_samples * num_steps), independent of the buffer's size.

    Args:
        capacity: Most experiences kept (an int ``>= 1``), or None for no limit.
        seed: Seed of this buffer's random generator (nnabla-rl has a global one instead).

    Raises:
        ConfigError: A bad ``capacity`` or ``seed`` (a ``ValueError``).

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
        >>> buffer = ReplayBuffer(capacity=100, seed=0)
        >>> for t in range(5):
        ...     s, s_next = np.full(3, t, np.float32), np.full(3, t + 1, np.float32)
        ...     buffer.append((s, np.array([t % 2]), 1.0, float(t < 4), s_next, {}))
        >>> experiences, info = buffer.sample(num_samples=2)
        >>> len(experiences), info["weights"].shape, len(buffer), buffer[0][3]
        (2, (2, 1), 5, 1.0)
    """

    def __init__(self, capacity: int | None = None, *, seed: int | None = None) -> None:
        self._capacity = check_capacity("capacity", capacity, allow_none=True)
        self._frame_stack = 1  # frames per state the core rebuilds (Atari: stacked_frames)
        self._seed = check_seed(seed)
        self._rng = np.random.default_rng(self._seed)
        self._generation = 0  # cores built so far (each gets its own derived seed)
        self._core: CoreBuffer | None = None
        self._codec: _Codec | None = None
        self._extras: list[tuple[Any, ...] | None] = []  # slot id % core capacity
        self._next_id = 0  # the id the core gives the next stored step
        self._held: _Row | None = None  # newest experience, not yet in the core
        self._tail: _Row | None = None  # the core's newest step while its successor is held

    # ------------------------------------------------------------------ sizes
    @property
    def capacity(self) -> int | None:
        """Capacity (max length) of this replay buffer otherwise None."""
        return self._capacity

    def __len__(self) -> int:
        return self._core_visible() + (self._held is not None)

    def _core_visible(self) -> int:
        """How many of the core's newest steps are visible experiences."""
        n = 0 if self._core is None else len(self._core)
        if self._capacity is not None:
            n = min(n, self._capacity - (self._held is not None))
        return n

    def _first_id(self) -> int:
        """Core id of index 0 (the held experience's id is the one the core will give it)."""
        return self._next_id - self._core_visible()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, len={len(self)})"

    # ------------------------------------------------------------------ core construction
    def _make_codec(self, experience: Sequence[Any]) -> _Codec:
        return _Codec.infer(experience)

    def _core_capacity(self) -> int:
        """Steps the core keeps: ``capacity`` plus the frames the oldest stacks reach back to."""
        k = self._frame_stack
        if self._capacity is None:
            return max(_INITIAL_CAPACITY, k + 1)
        return max(self._capacity + k - 1, k + 1)

    def _build_core(self, capacity: int, fields: dict[str, Field], seed: int | None) -> CoreBuffer:
        """The core buffer (subclasses choose another class or add transforms)."""
        return CoreBuffer(
            capacity,
            fields,
            n_step=1,
            gamma=1.0,
            frame_stack=self._frame_stack,
            stack_pad="first",  # what a FrameStack wrapper shows at an episode's start
            seed=seed,
        )

    def _new_core(self, capacity: int) -> CoreBuffer:
        assert self._codec is not None
        seed = None
        if self._seed is not None:
            ss = np.random.SeedSequence([self._seed, self._generation])
            seed = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
        self._generation += 1
        return self._build_core(capacity, self._codec.fields(), seed)

    def _encode(self, experience: Any) -> _Row:
        """Validate one experience; the first one also fixes the schema and builds the core."""
        first = self._codec is None or self._core is None
        try:
            if first:
                self._codec = self._make_codec(_check_experience(experience))
                self._core = self._new_core(self._core_capacity())
                self._extras = [None] * self._core.capacity
            assert self._codec is not None and self._core is not None
            return self._codec.encode(self._core.schema, experience)
        except Exception:
            if first:  # a rejected first experience leaves the buffer as it was
                if self._core is not None:
                    self._core.close()
                self._codec, self._core, self._extras, self._generation = None, None, [], 0
            raise

    # ------------------------------------------------------------------ writing
    def append(self, experience: Experience) -> None:
        """Add new experience to the replay buffer.

        Args:
            experience: ``(s, a, r, non_terminal, s_next, info)``; ``s``/``s_next`` (and ``a``)
                are arrays or tuples of arrays, ``non_terminal`` is 1.0 or 0.0. Elements after
                ``info`` are kept too.

        Raises:
            ValueError: Not such a tuple, or ``non_terminal`` neither 1 nor 0.
            ShapeError: An element of another shape (or structure) than in the first experience.
            DTypeError: A value that cannot be cast safely to the first experience's dtype.

        Notes:
            If the replay buffer size is full, the oldest (head of the buffer) experience will
            be dropped off and the given experience will be added to the tail of the buffer.
        """
        row = self._encode(experience)
        held = self._held
        prev = self._release_held(held is not None and self._continues(held, row))
        self._place(row, prev)

    def append_all(self, experiences: Sequence[Experience]) -> None:
        """Add list of experiences to the replay buffer (each as :meth:`append`)."""
        for experience in experiences:
            self.append(experience)

    def _continues(self, held: _Row, row: _Row) -> bool:
        """Whether ``row`` is the step after ``held`` in one episode."""
        return _same(row.obs, held.next_obs)

    def _release_held(self, continues: bool) -> _Row | None:
        """Store the held experience; return it if its episode goes on (now the core's tail)."""
        held = self._held
        if held is None:
            return None
        self._held = None
        self._tail = None
        if continues:
            self._write(held, None)
            return held
        self._write(held, "truncated")
        return None

    def _place(self, row: _Row, prev: _Row | None) -> None:
        """Store ``row`` if its episode ends with it, else hold it (``prev``: the core's tail)."""
        if row.terminal:
            self._write(row, "terminated")
        elif row.timelimit:
            self._write(row, "truncated")
        else:
            self._held = row
            self._tail = prev

    def _write(self, row: _Row, end: str | None) -> None:
        """Add one step to the core (``end``: None, ``"terminated"`` or ``"truncated"``)."""
        assert self._codec is not None and self._core is not None
        if self._capacity is None and len(self._core) == self._core.capacity:
            self._grow()
        core = self._core
        values = self._codec.step_values(row)
        values["terminated"] = end == "terminated"
        values["truncated"] = end == "truncated"
        if end is not None:
            values.update(self._codec.final_values(row))
        core.add(**values)
        self._extras[self._next_id % core.capacity] = row.extras
        self._next_id += 1
        self._on_written(end is not None)

    def _on_written(self, ended: bool) -> None:
        """Hook after each stored step (the trajectory buffer counts trajectories)."""

    def _grow(self) -> None:
        """Rebuild the core with twice the room and re-add every stored step, in order."""
        old = self._core
        assert old is not None and self._codec is not None
        new = self._new_core(2 * old.capacity)
        n = len(old)
        first = self._next_id - n
        if n:
            data = old.gather_all()  # (1, n, ...) raw steps, finals as next_<obs> at ends
            names = list(old.schema.fields) + ["next_" + o for o in self._codec.obs_names]
            new.extend(**{name: data[name][0] for name in names})
        extras: list[tuple[Any, ...] | None] = [None] * new.capacity
        for j in range(n):
            extras[j] = self._extras[(first + j) % old.capacity]
        old.close()
        self._core, self._extras, self._next_id = new, extras, n

    # ------------------------------------------------------------------ reading
    def __getitem__(self, item: int) -> Experience:
        i = self._normalize(operator.index(item))
        return self._experiences(np.array([self._first_id() + i], np.int64))[0]

    def _normalize(self, i: int) -> int:
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"index {i} is out of range for a buffer of {n} experiences")
        return j

    def _check_range(self, idx: Array, num_steps: int) -> Array:
        """Indices made non-negative; each ``index + num_steps - 1`` must be stored."""
        n = len(self)
        idx = np.where(idx < 0, idx + n, idx)
        bad = (idx < 0) | (idx + num_steps > n)
        if bad.any():
            raise IndexError(
                f"indices {idx[bad][:5].tolist()} (with num_steps={num_steps}) are out of range "
                f"for a buffer of {n} experiences"
            )
        return idx

    def _transitions(self, ids: Array) -> Batch:
        """The core's transitions at stored, sampleable ``ids`` (HER relabels them)."""
        assert self._core is not None
        return self._core.get_transitions(ids)

    def _extras_of(self, ids: Array) -> list[tuple[Any, ...]]:
        assert self._core is not None
        cap = self._core.capacity
        out = [self._extras[i % cap] for i in ids.tolist()]
        return [() if e is None else e for e in out]

    def _decode_batch(self, batch: Mapping[str, Array]) -> list[Experience]:
        assert self._codec is not None
        return self._codec.decode(batch, self._extras_of(np.asarray(batch["ids"])))

    def _experiences(self, ids: Array) -> list[Experience]:
        """Experiences at core ids (the held one has id ``_next_id``), in order."""
        codec = self._codec
        assert codec is not None
        cached = ids >= self._next_id
        if self._tail is not None:
            cached |= ids == self._next_id - 1
        out: list[Experience] = [()] * ids.shape[0]
        stored = np.flatnonzero(~cached)
        if stored.size:
            decoded = self._decode_batch(self._transitions(ids[stored]))
            for j, e in zip(stored.tolist(), decoded, strict=True):
                out[j] = e
        for j in np.flatnonzero(cached).tolist():
            row = self._held if ids[j] >= self._next_id else self._tail
            assert row is not None
            out[j] = codec.decode(codec.row_batch(row), [row.extras])[0]
        return [self._decorate(e) for e in out]

    def _decorate(self, experience: Experience) -> Experience:
        """Hook applied to every experience handed out (DecorableReplayBuffer)."""
        return experience

    # ------------------------------------------------------------------ sampling
    def sample(
        self, num_samples: int = 1, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Randomly sample num_samples experiences from the replay buffer.

        Args:
            num_samples: Number of samples to sample from the replay buffer. Defaults to 1.
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            ``(experiences, info)``: a list of ``num_samples`` experiences, or with
            ``num_steps > 1`` a tuple of ``num_steps`` such lists (entry ``j`` holds the
            experiences ``j`` steps after the drawn ones); ``info["weights"]`` is
            ``np.ones((num_samples, 1))``.

        Raises:
            ValueError: num_samples exceeds the maximum possible index or num_steps is 0 or
                negative.
        """
        num_steps = check_count("num_steps", num_steps)
        num_samples = check_count("num_samples", num_samples)
        max_index = len(self) - num_steps + 1
        if num_samples > max_index:
            raise ValueError(
                f"num_samples: {num_samples} is greater than the size of buffer: {max_index}"
            )
        indices = distinct_draw(max_index, num_samples, self._rng)
        return self.sample_indices(indices, num_steps=num_steps)

    def sample_indices(
        self, indices: Indices, num_steps: int = 1
    ) -> tuple[list[Experience] | tuple[list[Experience], ...], dict[str, Any]]:
        """Sample experiences for given indices from the replay buffer.

        Args:
            indices: Positions of the experiences (0 is the oldest stored one; negative
                positions count from the newest).
            num_steps: Number of timesteps to sample. Should be greater than 0. Defaults to 1.

        Returns:
            As :meth:`sample`, for the given indices.

        Raises:
            ValueError: If indices are empty or num_steps is 0 or negative.
            IndexError: An ``index + num_steps - 1`` beyond the stored experiences.
        """
        idx = as_indices(indices)
        num_steps = check_count("num_steps", num_steps)
        experiences = self._steps_at(self._check_range(idx, num_steps), num_steps)
        return experiences, {"weights": np.ones((idx.shape[0], 1))}

    def _steps_at(
        self, idx: Array, num_steps: int
    ) -> list[Experience] | tuple[list[Experience], ...]:
        """Experiences at (valid, non-negative) indices, ``num_steps`` consecutive ones each."""
        ids = self._first_id() + idx
        if num_steps == 1:
            return self._experiences(ids)
        flat = self._experiences((ids[None, :] + np.arange(num_steps)[:, None]).reshape(-1))
        B = idx.shape[0]
        return tuple(flat[j * B : (j + 1) * B] for j in range(num_steps))

    def update_priorities(self, errors: Any) -> None:
        """Does nothing: only prioritized buffers keep priorities (as in nnabla-rl)."""
