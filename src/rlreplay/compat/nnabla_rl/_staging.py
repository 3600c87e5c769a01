"""Staged appends: the usual experiences go to the core in one ``extend`` per batch.

One :meth:`rlreplay.ReplayBuffer.add` per experience costs the nnabla-rl front-end more than
nnabla-rl's whole ``append`` (a list insert). For the usual experience (one array ``s`` and
``s_next``, one action, a reward, of the first experience's kinds, dtypes and shapes) the
front-end instead checks it and *copies* its values once into staging (deliberate difference 1
holds: an environment that rewrites its observation array in place after the append cannot
reach the stored copy), and :func:`write_staged` hands the staged rows to the core in one
``extend`` when the rows are full, or before anything reads the core. Reads of experiences
do not: the buffer hands back the tuple :meth:`Staging.push` made for each (read-only arrays
over the copies, see :class:`Staging`), so a training loop's reads write nothing. ``append``
then costs the checks, the copies and a little bookkeeping; the prioritized buffers write
their structures out at the next read (``_prioritized_base``).

Episode boundaries are those of the one-by-one path (see
:mod:`rlreplay.compat.nnabla_rl.replay_buffer`), found for the whole batch at once: a step
ends its episode at ``non_terminal == 0`` (terminated) or a true
``info["TimeLimit.truncated"]`` (truncated), and a step whose ``s`` differs byte for byte
from the previous, unended step's ``s_next`` starts a new one (the previous one cut with the
core's ``end_episode``, its ``s_next`` as the final observation).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.compat.nnabla_rl._codec import (
    TIMELIMIT_KEY,
    Codec,
    Row,
    is_terminal,
    is_timelimit,
)
from rlreplay.compat.nnabla_rl._host import ColumnarHost
from rlreplay.compat.nnabla_rl._stored import StoredTuple

if TYPE_CHECKING:
    from rlreplay import ReplayBuffer as CoreBuffer

__all__ = ["Staging", "frozen_maker", "staging_for", "write_staged"]

Array = np.ndarray[Any, Any]
_TUPLES = (tuple, StoredTuple)
#: Most bytes of observations (``s`` and ``s_next``) one batch of staging rows holds: a few
#: MiB, so that the rows are still in the cache when the batch goes to the core (84x84 uint8
#: frames: 297 rows; measured 5.1 us per append against 6.1 us with 16 MiB).
STAGING_BYTES = 1 << 22
#: Runs of fewer staged steps than this go to the core one ``add`` each, longer ones in one
#: ``extend``: the core's ``add`` of plain values costs ~3.7 us a step, its ``extend``
#: ~45 us a call whatever its length up to a few dozen steps (4-float observations; a
#: training loop of a few appends per sample writes runs of a few steps).
EXTEND_ROWS = 12
#: Observations of at least this many bytes are gathered by copying each staged row into
#: memory the staging keeps from batch to batch (one ``memcpy`` a row, into pages already
#: touched) rather than joined into new memory each batch: a join of a batch of 84x84 uint8
#: frames (2 MiB) is served by fresh pages, whose first touch made the gather cost about 3 us
#: a row against 0.5 us (measured in the nnabla-rl benchmark's atari84 loop). Smaller rows
#: join faster.
SCRATCH_ROW_BYTES = 1024


class Staging:
    """Up to ``rows`` checked, copied experiences awaiting one core ``extend``, and the
    tuples the buffer hands out for them.

    Each array is copied once, at :meth:`push`, as its bytes (``tobytes``, the cheapest copy
    NumPy makes of a few numbers). The bytes serve twice: :meth:`gather` builds the batch
    the core receives from them, and ``push`` returns the experience the buffer hands back
    (``buffer[i]``, ``sample``): a :class:`StoredTuple` whose arrays are *read-only* arrays
    over those bytes (``np.frombuffer``, no second copy). nnabla-rl hands back the object it
    keeps, the same one at every read; so does the buffer with this tuple, while neither an
    environment that rewrites its arrays in place nor code that writes into a sampled array
    can change what is stored (deliberate difference 1). A state ``s`` with the bytes of the
    previous experience's ``s_next`` (a running episode) shares that array, so each
    observation is held once. Numbers and ``non_terminal``, ``info`` and anything after
    them are kept as the objects appended (as the one-by-one path keeps them).

    ``push`` is, for the usual layout (array ``s`` and ``a``, a float reward), a function
    made for this staging's dtypes and shapes (:meth:`_usual_push`); it hands every other
    experience to :meth:`push_any`, which checks every kind the codec admits.
    """

    #: Stage an experience: the tuple to hand out for it, or None if it is not a usual one
    #: (nothing staged; the caller takes the one-by-one path).
    push: Callable[[Any], StoredTuple | None]

    def __init__(self, codec: Codec, rows: int) -> None:
        self.obs_part = codec.state.parts[0]
        self.action_part = codec.action.parts[0]
        self.reward_part = codec.reward
        self.obs_name = codec.obs_names[0]
        self.action_name = self.action_part.name
        self.rows = rows
        f_obs, f_act = self.obs_part.field, self.action_part.field
        # the usual kinds, checked inline by push
        self.obs_dtype, self.obs_shape = f_obs.dtype, f_obs.shape
        self.action_is_array = self.action_part.kind == "array"
        self.action_dtype, self.action_shape = f_act.dtype, f_act.shape
        self.reward_is_float = codec.reward.kind == "python" and codec.reward.pytype is float
        self.reward_is_array = codec.reward.kind == "array"
        # read-only arrays over copied bytes, one maker per element
        self.frozen_obs = frozen_maker(f_obs.dtype, f_obs.shape)
        self.frozen_action = frozen_maker(f_act.dtype, f_act.shape)
        self.frozen_reward = frozen_maker(codec.reward.field.dtype, codec.reward.field.shape)
        # per staged step: (s, s_next, action, reward, terminated, truncated, side); s and
        # s_next are their bytes; an action or reward is its bytes if it is an array, else
        # the number. One list for the staging's life (push keeps a reference): gather
        # empties it in place.
        self.steps: list[tuple[Any, ...]] = []
        # [bytes, array] of the newest staged s_next: the next s, if it has these bytes
        self.last: list[Any] = [None, None]
        self.sides: tuple[tuple[Any, ...], ...] = ()  # those of the last gather
        # the batch of the last gather
        self.obs: Array = np.empty((0, *f_obs.shape), f_obs.dtype)
        self.next_obs: Array = self.obs
        self.action: Array = np.empty((0, *f_act.shape), f_act.dtype)
        self.reward: Array = np.empty(0, codec.reward.field.dtype)
        # each step's terminated and truncated flags (Python bools)
        self.terms: tuple[bool, ...] = ()
        self.truncs: tuple[bool, ...] = ()
        self.cuts: list[int] = []  # steps that start an episode the previous did not end
        self.last_ended = False  # whether the newest gathered step ends its episode
        # bytes of one observation, and the memory gather copies large ones into (the
        # obs rows, and the next_obs rows where they are not the obs rows shifted)
        self.obs_bytes = f_obs.dtype.itemsize * math.prod(f_obs.shape)
        self.scratch: list[bytearray | None] = [None, None]
        usual = self.action_is_array and self.reward_is_float
        self.push = self._usual_push() if usual else self.push_any

    def _usual_push(self) -> Callable[[Any], StoredTuple | None]:
        """:meth:`push_any` for a tuple of six ``(array, array, float, float, array,
        dict)`` of this staging's dtypes and shapes, with every constant bound once.

        The same checks and copies as :meth:`push_any` (this runs once per append, so
        each check is one attribute and one identity test where it can be): an exact
        dtype object (``is``) saves a comparison, and any other experience (an equal
        dtype object, a NumPy or int ``non_terminal``, another ``info``, a longer tuple)
        goes to :meth:`push_any`, which stages it or not as it always did.
        """
        nd, dt, shape = np.ndarray, self.obs_dtype, self.obs_shape
        a_dt, a_shape = self.action_dtype, self.action_shape
        append, push_any, key = self.steps.append, self.push_any, TIMELIMIT_KEY
        last, stored, frombuffer, ndarray = self.last, StoredTuple, np.frombuffer, np.ndarray
        # 1-D values need no reshape after np.frombuffer (the usual vector observation)
        obs_flat, action_flat = len(shape) == 1, len(a_shape) == 1
        if dt.itemsize * math.prod(shape) == 0 or a_dt.itemsize * math.prod(a_shape) == 0:
            return self.push_any  # empty arrays: frombuffer has no buffer to view

        def push(experience: Any) -> StoredTuple | None:
            if type(experience) is tuple and len(experience) == 6:
                s, a, r, non_terminal, s_next, info = experience
                if (
                    type(s) is nd
                    and type(s_next) is nd
                    and type(a) is nd
                    and type(r) is float
                    and type(non_terminal) is float
                    and type(info) is dict
                    and s.dtype is dt
                    and s_next.dtype is dt
                    and a.dtype is a_dt
                    and s.shape == shape
                    and s_next.shape == shape
                    and a.shape == a_shape
                ):
                    # tobytes: the copies (deliberate difference 1); the arrays handed out
                    # are read-only views of them (frombuffer of bytes)
                    s_b, next_b, a_b = s.tobytes(), s_next.tobytes(), a.tobytes()
                    prev_b = last[0]
                    if s_b == prev_b:  # s is the previous s_next: one array for both
                        s_b, s_out = prev_b, last[1]
                    elif obs_flat:
                        s_out = frombuffer(s_b, dt)
                    else:  # (one array over the bytes: cheaper than frombuffer + reshape)
                        s_out = ndarray(shape, dt, s_b)
                    next_out = frombuffer(next_b, dt) if obs_flat else ndarray(shape, dt, next_b)
                    a_out = frombuffer(a_b, a_dt)
                    if not action_flat:
                        a_out = a_out.reshape(a_shape)
                    last[0], last[1] = next_b, next_out
                    truncated = key in info and is_timelimit(info)
                    append(
                        (s_b, next_b, a_b, r, non_terminal == 0, truncated, (non_terminal, info))
                    )
                    return stored((s_out, a_out, r, non_terminal, next_out, info))
            return push_any(experience)

        return push

    def push_any(self, experience: Any) -> StoredTuple | None:
        """Stage a usual experience; the tuple to hand out for it, or None if it is not one
        (nothing staged; the caller takes the one-by-one path).

        The checks are :meth:`Part.fits` and the codec's, written out for the usual kinds.
        """
        if type(experience) not in _TUPLES:
            return None
        size = len(experience)
        if size == 6:  # the usual experience: one unpacking
            s, a, r, non_terminal, s_next, info = experience
        elif size > 6:
            s, a, r, non_terminal, s_next, info = experience[:6]
        else:
            return None
        dt, shape = self.obs_dtype, self.obs_shape
        if not (
            type(s) is np.ndarray
            and type(s_next) is np.ndarray
            and (s.dtype is dt or s.dtype == dt)
            and (s_next.dtype is dt or s_next.dtype == dt)
            and s.shape == shape
            and s_next.shape == shape
        ):
            return None
        a_out = a  # numbers are immutable: handed out as appended
        if self.action_is_array:
            if not (
                type(a) is np.ndarray
                and (a.dtype is self.action_dtype or a.dtype == self.action_dtype)
                and a.shape == self.action_shape
            ):
                return None
            a = a.tobytes()  # a copy
            a_out = self.frozen_action(a)
        elif not self.action_part.fits(a):
            return None
        r_out = r
        if self.reward_is_float:
            if type(r) is not float:
                return None
        elif not self.reward_part.fits(r):
            return None
        elif self.reward_is_array:
            r = r.tobytes()
            r_out = self.frozen_reward(r)
        if type(non_terminal) is float:
            terminal = non_terminal == 0
        elif type(non_terminal) in (int, bool) or (
            isinstance(non_terminal, np.generic) and non_terminal.dtype.kind in "biuf"
        ):
            terminal = is_terminal(non_terminal)
        else:
            return None
        if type(info) is dict:
            truncated = TIMELIMIT_KEY in info and is_timelimit(info)
        else:
            truncated = is_timelimit(info)
        rest = (info,) if size == 6 else tuple(experience[5:])
        # the copies (deliberate difference 1)
        s_b, next_b = s.tobytes(), s_next.tobytes()
        last = self.last
        prev_b = last[0]
        if s_b == prev_b:
            s_b, s_out = prev_b, last[1]
        else:
            s_out = self.frozen_obs(s_b)
        next_out = self.frozen_obs(next_b)
        last[0], last[1] = next_b, next_out
        self.steps.append((s_b, next_b, a, r, terminal, truncated, (non_terminal, *rest)))
        return StoredTuple((s_out, a_out, r_out, non_terminal, next_out, *rest))

    @property
    def n(self) -> int:
        """Steps staged."""
        return len(self.steps)

    def gather(self) -> None:
        """The staged steps as batch arrays (``obs``, ``next_obs``, ...), oldest first."""
        n = len(self.steps)
        obs_b, next_b, actions, rewards, terms, truncs, sides = zip(*self.steps, strict=True)
        self.steps.clear()

        def stacked(chunks: tuple[Any, ...], dtype: np.dtype[Any], shape: Any) -> Array:
            return np.frombuffer(b"".join(chunks), dtype).reshape(n, *shape)

        def observations(chunks: tuple[Any, ...], slot: int) -> Array:
            """The observations of ``chunks`` (bytes each) as one ``(len, *shape)`` array."""
            joined: bytes | bytearray
            if self.obs_bytes < SCRATCH_ROW_BYTES:
                joined = b"".join(chunks)
            else:
                joined = self._copied(chunks, slot)
            return np.frombuffer(
                joined, self.obs_dtype, len(chunks) * math.prod(self.obs_shape)
            ).reshape(len(chunks), *self.obs_shape)

        # step j continues step j - 1 unless j - 1 ended or s_j differs from s_next_{j-1}
        # byte for byte; push shares the bytes object where they are equal, so identity
        # settles almost every pair (one C loop) and only the others are compared
        apart = np.flatnonzero(np.fromiter(map(operator.is_not, obs_b[1:], next_b[:-1]), bool))
        differ = [j + 1 for j in apart.tolist() if obs_b[j + 1] != next_b[j]]
        if apart.size:
            self.obs = observations(obs_b, 0)
            self.next_obs = observations(next_b, 1)
        else:  # every s_next is the next s: one copy, two views of it
            rows = observations((*obs_b, next_b[-1]), 0)
            self.obs, self.next_obs = rows[:n], rows[1:]
        if self.action_is_array:
            self.action = stacked(actions, self.action_dtype, self.action_shape)
        else:
            self.action = np.array(actions, self.action_dtype).reshape(n, *self.action_shape)
        f_r = self.reward_part.field
        if self.reward_is_array:
            self.reward = stacked(rewards, f_r.dtype, f_r.shape)
        else:
            self.reward = np.array(rewards, f_r.dtype).reshape(n, *f_r.shape)
        self.sides = sides
        self.terms, self.truncs = terms, truncs
        self.cuts = [j for j in differ if not (terms[j - 1] or truncs[j - 1])]
        self.last_ended = bool(terms[-1] or truncs[-1])

    def _copied(self, chunks: tuple[bytes, ...], slot: int) -> bytearray:
        """``chunks`` (``obs_bytes`` each) copied one after another into scratch ``slot``.

        The scratch memory is kept for the next batches: what :meth:`gather` makes of it is
        read (and copied) by :func:`write_staged` before the next gather overwrites it.
        """
        width = self.obs_bytes
        need = len(chunks) * width
        scratch = self.scratch[slot]
        if scratch is None or len(scratch) < need:
            # Both slots at once, every page written now: the next_obs slot serves only the
            # batches with an episode start, and its pages' first touch (about 1 ms for 2 MiB)
            # would otherwise fall on one of those later batches.
            size = max(need, (self.rows + 1) * width)
            for s in range(len(self.scratch)):
                kept = self.scratch[s]
                if kept is None or len(kept) < size:
                    made = bytearray(size)
                    np.frombuffer(made, np.uint8).fill(0)  # (a large bytearray is calloc'd)
                    self.scratch[s] = made
            scratch = self.scratch[slot]
            assert scratch is not None
        view = memoryview(scratch)
        end = 0
        for chunk in chunks:
            start, end = end, end + width
            view[start:end] = chunk
        return scratch

    def row(self, j: int) -> Row:
        """Gathered step ``j`` as the :class:`Row` the one-by-one path would have cached."""
        return Row(
            (self.obs[j].copy(),),
            (self.next_obs[j].copy(),),
            (self.action_part.decode(self.action[j : j + 1])[0],),
            self.reward_part.decode(self.reward[j : j + 1])[0],
            self.terms[j],
            self.truncs[j],
            self.sides[j],
        )


def frozen_maker(dtype: np.dtype[Any], shape: tuple[int, ...]) -> Callable[[bytes], Array]:
    """A function from the bytes of one value to a read-only array of ``dtype``, ``shape``.

    The array is a view of the bytes (``np.frombuffer``: read-only, as the bytes object is
    immutable), so the bytes are the only copy. An empty value has no buffer to view: a new
    empty array each time, made read-only.
    """
    if dtype.itemsize * math.prod(shape) == 0:

        def empty(_: bytes) -> Array:
            out: Array = np.empty(shape, dtype)
            out.flags.writeable = False
            return out

        return empty
    frombuffer, ndarray = np.frombuffer, np.ndarray
    if len(shape) == 1:
        return lambda b: frombuffer(b, dtype)
    return lambda b: ndarray(shape, dtype, b)  # read-only: a view of immutable bytes


def staging_for(buffer: ColumnarHost, base: type) -> Staging | None:
    """Staging rows for a bounded, columnar buffer whose appends are ``base``'s own.

    None (every append one by one) for an unbounded buffer (it grows its core), a
    columnar-only one (Atari, hindsight: they cast or transform), a frame stack, an
    experience other than one array ``s``, or a class that overrides a write hook.
    """
    codec, core = buffer._codec, buffer._core
    assert codec is not None and core is not None
    hooks = ("_on_written", "_on_cut", "_continues", "_write", "_cut", "_append_row")
    if (
        buffer.capacity is None
        or buffer._columnar_only()
        or buffer._frame_stack != 1
        or not codec._single
        or codec.state.parts[0].kind != "array"
        or any(getattr(type(buffer), h) is not getattr(base, h) for h in hooks)
    ):
        return None
    obs = codec.state.parts[0].field
    per_row = 2 * obs.dtype.itemsize * math.prod(obs.shape)  # s and s_next
    # at least 16 rows (observations of several MiB): one core call per append costs more
    return Staging(codec, min(1024, core.capacity, max(16, STAGING_BYTES // max(per_row, 1))))


def same_rows(a: Array, b: Array) -> Array:
    """Whether row ``i`` of ``a`` equals row ``i`` of ``b`` byte for byte (bool per row).

    The rows are compared as the widest unsigned integers their width divides (8 bytes
    for most observations): the same bytes, an eighth of the element comparisons.
    """
    n, width = a.shape[0], a.dtype.itemsize * math.prod(a.shape[1:])
    if width == 0:  # empty observations are all alike
        return np.ones(n, bool)
    word = next(w for w in (np.uint64, np.uint32, np.uint16, np.uint8) if width % w().itemsize == 0)
    ra = np.ascontiguousarray(a).view(np.uint8).reshape(n, width).view(word)
    rb = np.ascontiguousarray(b).view(np.uint8).reshape(n, width).view(word)
    out: Array = (ra == rb).all(axis=1)
    return out


def write_staged(buffer: ColumnarHost, st: Staging) -> None:
    """Store the staged steps in ``buffer``'s core, cutting episodes where ``s`` changed.

    The buffer's ids, side ring and ``_next_id`` were advanced at staging; this writes the
    steps, keeps the core size the adapter caches and the newest unended step's row.
    """
    n = st.n
    if n == 0:
        return
    st.gather()  # nothing staged from here on: the buffer's size may be asked while writing
    core = buffer._core
    assert core is not None
    # the side ring of the staged ids (the newest n): (non_terminal, info, ...) as appended,
    # in at most two slices of the ring (n <= the ring's length)
    extras = buffer._extras
    ring = len(extras)
    head = (buffer._next_id - n) % ring
    split = min(n, ring - head)
    extras[head : head + split] = st.sides[:split]
    extras[: n - split] = st.sides[split:]
    newest = buffer._newest
    if newest is not None and newest.next_obs[0].tobytes() != st.obs[0].tobytes():
        buffer._cut()
    stored = buffer._core_size()
    for a, b in itertools.pairwise([0, *st.cuts, n]):
        if a > 0:  # a cut: the previous step's episode ends with its s_next
            core.end_episode(0, **{"next_" + st.obs_name: st.next_obs[a - 1]})
            buffer._core_changed()
            stored = buffer._core_size()
        if b - a < EXTEND_ROWS:
            _add_each(core, st, a, b)
        else:
            values: dict[str, Any] = {
                st.obs_name: st.obs[a:b],
                st.action_name: st.action[a:b],
                "reward": st.reward[a:b],
                "terminated": np.array(st.terms[a:b], bool),
                "truncated": np.array(st.truncs[a:b], bool),
                "next_" + st.obs_name: st.next_obs[a:b],  # the finals of the steps that end
            }
            core.extend(**values)
        stored = min(stored + (b - a), core.capacity)
        buffer._core_len = stored
    buffer._newest = None if st.last_ended else st.row(n - 1)
    st.sides = ()


def _add_each(core: CoreBuffer, st: Staging, a: int, b: int) -> None:
    """Gathered steps ``a .. b - 1`` (one episode's run) in one core ``add`` each.

    The same steps :func:`write_staged`'s ``extend`` stores: ``next_<obs>`` given only to
    the steps that end their episode (the core ignores it on the others).
    """
    add, obs_name, action_name = core.add, st.obs_name, st.action_name
    next_name = "next_" + obs_name
    obs, action, reward, next_obs = st.obs, st.action, st.reward, st.next_obs
    terms, truncs = st.terms, st.truncs
    if obs_name == "obs" and action_name == "action":  # the usual names: no dict per step
        for j in range(a, b):
            if terms[j] or truncs[j]:
                add(obs=obs[j], action=action[j], reward=reward[j], terminated=terms[j],
                    truncated=truncs[j], next_obs=next_obs[j])  # fmt: skip
            else:
                add(obs=obs[j], action=action[j], reward=reward[j], terminated=False,
                    truncated=False)  # fmt: skip
        return
    for j in range(a, b):
        values = {
            obs_name: obs[j],
            action_name: action[j],
            "reward": reward[j],
            "terminated": terms[j],
            "truncated": truncs[j],
        }
        if terms[j] or truncs[j]:
            values[next_name] = next_obs[j]
        add(**values)
