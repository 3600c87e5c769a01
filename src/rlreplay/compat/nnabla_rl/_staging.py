"""Staged appends: the usual experiences reach the core only when something reads it.

One :meth:`rlreplay.ReplayBuffer.add` per experience costs the nnabla-rl front-end more than
nnabla-rl's whole ``append`` (a list insert). For the usual experience (one array ``s`` and
``s_next``, one action, a reward, of the first experience's kinds, dtypes and shapes) the
front-end instead checks it and *copies* its values once (deliberate difference 1 holds: an
environment that rewrites its observation array in place after the append cannot reach the
stored copy), and keeps the tuple it hands back for it (read-only arrays over the copies, see
:class:`Staging`) in the buffer's ring of handed tuples. Reads of experiences take those
tuples, so a training loop of appends and samples never touches the core: ``append`` costs
the checks, the copies and a little bookkeeping, and the core does not hold a second copy of
each observation.

The staged experiences reach the core when something reads it (anything that asks the
core's size, an experience that is not a usual one, a copy or pickle of the buffer):
:func:`write_staged` writes them in one core ``extend`` per batch of up to
:attr:`Staging.rows`, oldest first. More staged experiences than the ring holds (a long run
of appends that never reads the core) no longer all exist; the core then starts anew with
the ones the ring holds (which include every kept one), numbered from an offset
(``_core_offset``: the buffer's id of the new core's id 0), so the core holds what writing
every experience would have left in it.

Episode boundaries are those of the one-by-one path (see
:mod:`rlreplay.compat.nnabla_rl.replay_buffer`), found for each batch at once: a step ends
its episode at ``non_terminal == 0`` (terminated) or a true ``info["TimeLimit.truncated"]``
(truncated, read at ``append``), and a step whose ``s`` differs byte for byte from the
previous, unended step's ``s_next`` starts a new one (the previous one cut with the core's
``end_episode``, its ``s_next`` as the final observation).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

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

__all__ = ["StagingHost", "Staging", "frozen_maker", "staging_for", "write_staged"]

Array = np.ndarray[Any, Any]
_TUPLES = (tuple, StoredTuple)
#: Most bytes of observations (``s`` and ``s_next``) one batch of a core write holds: a few
#: MiB (84x84 uint8 frames: 297 rows).
STAGING_BYTES = 1 << 22
#: Runs of fewer staged steps than this go to the core one ``add`` each, longer ones in one
#: ``extend``: the core's ``add`` of plain values costs ~3.7 us a step, its ``extend``
#: ~45 us a call whatever its length up to a few dozen steps (4-float observations).
EXTEND_ROWS = 12
#: Most distinct actions (of at most :data:`ACTION_BYTES` bytes) whose read-only arrays a
#: staging keeps, to hand the same array out for every experience with those bytes.
ACTIONS_KEPT = 1024
ACTION_BYTES = 64


class StagingHost(ColumnarHost, Protocol):
    """What staging reads and changes of a buffer beyond its columnar store."""

    _handed: list[StoredTuple | None] | None  # the tuple handed out at slot id % len
    _core_offset: int  # the buffer's id of the core's id 0


class Staging:
    """The bookkeeping of staged experiences: the usual ones, checked and copied at
    :meth:`push`, handed out from the buffer's ring, not yet in the core.

    Each array is copied once, at :meth:`push`, as its bytes (``tobytes``, the cheapest copy
    NumPy makes). The tuple handed back (``buffer[i]``, ``sample``) is a
    :class:`StoredTuple` whose arrays are *read-only* arrays over those bytes
    (``np.frombuffer``, no second copy), stored at slot ``id % len`` of the buffer's
    ``_handed`` ring. nnabla-rl hands back the object it keeps, the same one at every read;
    so does the buffer with this tuple, while neither an environment that rewrites its arrays
    in place nor code that writes into a sampled array can change what is stored (deliberate
    difference 1). A state ``s`` with the bytes of the previous experience's ``s_next`` (a
    running episode) shares that array, and an array action shares the array of an earlier
    action with the same bytes, so each is held once. Numbers and ``non_terminal``, ``info``
    and anything after them are kept as the objects appended (as the one-by-one path keeps
    them). :func:`write_staged` builds the core's batches from those tuples.

    Invariant: the buffer's ids from ``synced`` on are staged (the ring holds the newest of
    them, or all of them), and the core holds every older experience the ring holds;
    ``timelimits`` holds the staged ids whose ``info["TimeLimit.truncated"]`` was true at
    their ``append``.

    ``push`` is, for the usual layout (array ``s`` and ``a``, a float reward), a function
    made for this staging's dtypes and shapes (:meth:`_usual_push`); it hands every other
    experience to :meth:`push_any`, which checks every kind the codec admits.
    """

    #: ``push(buffer, experience)``: stage an experience of ``buffer`` (the one whose ring
    #: this staging fills; passed in, so that the staging holds no reference to it): True if
    #: staged (its id taken, its tuple in the ring), False if it is not a usual one (nothing
    #: changed; the caller takes the one-by-one path).
    push: Callable[[StagingHost, Any], bool]

    def __init__(self, codec: Codec, rows: int, buffer: StagingHost) -> None:
        self.obs_part = codec.state.parts[0]
        self.action_part = codec.action.parts[0]
        self.reward_part = codec.reward
        self.obs_name = codec.obs_names[0]
        self.action_name = self.action_part.name
        self.rows = rows  # experiences per core write
        assert buffer._handed is not None
        self.ring: list[StoredTuple | None] = buffer._handed
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
        self.synced = buffer._next_id  # ids from here on are staged (the newest ones)
        self.timelimits: set[int] = set()  # staged ids with a true TimeLimit.truncated
        # [bytes, array] of the newest staged s_next: the next s, if it has these bytes
        self.last: list[Any] = [None, None]
        # read-only action arrays by their bytes (small actions: a few distinct values)
        self.actions: dict[bytes, Array] = {}
        # the batch of the last gather
        self.sides: list[tuple[Any, ...]] = []
        self.obs: Array = np.empty((0, *f_obs.shape), f_obs.dtype)
        self.next_obs: Array = self.obs
        self.action: Array = np.empty((0, *f_act.shape), f_act.dtype)
        self.reward: Array = np.empty(0, codec.reward.field.dtype)
        # each step's terminated and truncated flags (Python bools)
        self.terms: list[bool] = []
        self.truncs: list[bool] = []
        self.cuts: list[int] = []  # steps that start an episode the previous did not end
        self.last_ended = False  # whether the newest gathered step ends its episode
        usual = self.action_is_array and self.reward_is_float
        self.push = self._usual_push() if usual else self.push_any

    def _usual_push(self) -> Callable[[StagingHost, Any], bool]:
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
        push_any, key, timelimit = self.push_any, TIMELIMIT_KEY, self._timelimit
        last, stored = self.last, StoredTuple
        ring, actions = self.ring, self.actions
        slots = len(ring)
        frozen_action, frombuffer = self.frozen_action, np.frombuffer
        flat = len(shape) == 1  # (frombuffer makes a 1-D array faster than ndarray)
        if dt.itemsize * math.prod(shape) == 0 or a_dt.itemsize * math.prod(a_shape) == 0:
            return self.push_any  # empty arrays: frombuffer has no buffer to view
        kept_actions = ACTIONS_KEPT if a_dt.itemsize * math.prod(a_shape) <= ACTION_BYTES else 0

        def push(buffer: StagingHost, experience: Any) -> bool:
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
                    # are read-only views of them
                    s_b, next_b = s.tobytes(), s_next.tobytes()
                    # s with the bytes of the previous s_next: one array for both
                    if flat:
                        s_out = last[1] if s_b == last[0] else frombuffer(s_b, dt)
                        next_out = frombuffer(next_b, dt)
                    else:
                        s_out = last[1] if s_b == last[0] else nd(shape, dt, s_b)
                        next_out = nd(shape, dt, next_b)
                    last[0], last[1] = next_b, next_out
                    a_b = a.tobytes()
                    a_out = actions.get(a_b)
                    if a_out is None:
                        a_out = frozen_action(a_b)
                        if len(actions) < kept_actions:
                            actions[a_b] = a_out
                    i = buffer._next_id
                    ring[i % slots] = stored((s_out, a_out, r, non_terminal, next_out, info))
                    buffer._next_id = i + 1
                    if key in info and is_timelimit(info):
                        timelimit(i)
                    return True
            return push_any(buffer, experience)

        return push

    def _timelimit(self, i: int) -> None:
        """Note that staged id ``i`` (the newest) ends its episode truncated (kept for the
        ring's ids)."""
        marks = self.timelimits
        marks.add(i)
        if len(marks) > len(self.ring):  # ids no longer in the ring
            oldest = i + 1 - len(self.ring)
            for j in [j for j in marks if j < oldest]:
                marks.discard(j)

    def push_any(self, buffer: StagingHost, experience: Any) -> bool:
        """Stage a usual experience (True), or leave anything else unstaged (False: nothing
        changed; the caller takes the one-by-one path).

        The checks are :meth:`Part.fits` and the codec's, written out for the usual kinds.
        """
        if type(experience) not in _TUPLES:
            return False
        size = len(experience)
        if size == 6:  # the usual experience: one unpacking
            s, a, r, non_terminal, s_next, info = experience
        elif size > 6:
            s, a, r, non_terminal, s_next, info = experience[:6]
        else:
            return False
        dt, shape = self.obs_dtype, self.obs_shape
        if not (
            type(s) is np.ndarray
            and type(s_next) is np.ndarray
            and (s.dtype is dt or s.dtype == dt)
            and (s_next.dtype is dt or s_next.dtype == dt)
            and s.shape == shape
            and s_next.shape == shape
        ):
            return False
        a_out = a  # numbers are immutable: handed out as appended
        if self.action_is_array:
            if not (
                type(a) is np.ndarray
                and (a.dtype is self.action_dtype or a.dtype == self.action_dtype)
                and a.shape == self.action_shape
            ):
                return False
            a_out = self.frozen_action(a.tobytes())  # a copy
        elif not self.action_part.fits(a):
            return False
        r_out = r
        if self.reward_is_float:
            if type(r) is not float:
                return False
        elif not self.reward_part.fits(r):
            return False
        elif self.reward_is_array:
            r_out = self.frozen_reward(r.tobytes())
        if not (
            type(non_terminal) in (float, int, bool)
            or (isinstance(non_terminal, np.generic) and non_terminal.dtype.kind in "biuf")
        ):
            return False
        if type(info) is dict:
            truncated = TIMELIMIT_KEY in info and is_timelimit(info)
        else:
            truncated = is_timelimit(info)
        rest = (info,) if size == 6 else tuple(experience[5:])
        # the copies (deliberate difference 1)
        s_b, next_b = s.tobytes(), s_next.tobytes()
        last = self.last
        s_out = last[1] if s_b == last[0] else self.frozen_obs(s_b)
        next_out = self.frozen_obs(next_b)
        last[0], last[1] = next_b, next_out
        ring = self.ring
        i = buffer._next_id
        ring[i % len(ring)] = StoredTuple((s_out, a_out, r_out, non_terminal, next_out, *rest))
        buffer._next_id = i + 1
        if truncated:
            self._timelimit(i)
        return True

    def gather(self, first: int, end: int) -> None:
        """Staged ids ``first .. end - 1`` (all in the ring) as batch arrays (``obs``,
        ``next_obs``, ...), oldest first, from the tuples handed out for them."""
        ring = self.ring
        slots = len(ring)
        tuples: list[Any] = [ring[i % slots] for i in range(first, end)]
        n = len(tuples)
        obs_in = [t[0] for t in tuples]
        next_in = [t[4] for t in tuples]
        # step j continues step j - 1 unless j - 1 ended or s_j differs from s_next_{j-1}
        # byte for byte; push shares the array where they are equal, so identity settles
        # almost every pair (one C loop) and only the others are compared
        apart = np.flatnonzero(np.fromiter(map(operator.is_not, obs_in[1:], next_in[:-1]), bool))
        differ = [j + 1 for j in apart.tolist() if obs_in[j + 1].tobytes() != next_in[j].tobytes()]
        dt = self.obs_dtype
        if apart.size:
            self.obs = np.array(obs_in, dt)
            self.next_obs = np.array(next_in, dt)
        else:  # every s_next is the next s: one copy, two views of it
            rows = np.array([obs_in[0], *next_in], dt)
            self.obs, self.next_obs = rows[:n], rows[1:]
        f_a, f_r = self.action_part.field, self.reward_part.field
        self.action = np.array([t[1] for t in tuples], f_a.dtype).reshape(n, *f_a.shape)
        self.reward = np.array([t[2] for t in tuples], f_r.dtype).reshape(n, *f_r.shape)
        self.sides = [(t[3], *t[5:]) for t in tuples]
        terms = [bool(is_terminal(t[3])) for t in tuples]
        marks = self.timelimits
        truncs = [i in marks for i in range(first, end)] if marks else [False] * n
        self.terms, self.truncs = terms, truncs
        self.cuts = [j for j in differ if not (terms[j - 1] or truncs[j - 1])]
        self.last_ended = bool(terms[-1] or truncs[-1])

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


def staging_for(buffer: StagingHost, base: type) -> Staging | None:
    """Staging for a bounded, columnar buffer whose appends are ``base``'s own (its
    ``_handed`` ring made first).

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
    rows = min(1024, core.capacity, max(16, STAGING_BYTES // max(per_row, 1)))
    return Staging(codec, rows, buffer)


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


def write_staged(buffer: StagingHost, st: Staging) -> None:
    """Store the staged experiences in ``buffer``'s core, oldest first, in batches of
    ``st.rows``, cutting episodes where ``s`` changed.

    The buffer's ids, handed tuples and ``_next_id`` were advanced at staging; this writes
    the steps and their side ring, keeps the core size the adapter caches and the newest
    unended step's row. If more were staged than the ring holds, the oldest are gone: the
    core starts anew with those the ring holds (see the module docstring).
    """
    end = buffer._next_id
    n = end - st.synced
    if n == 0:
        return
    st.synced = end  # nothing staged from here on: the buffer's size may be asked while writing
    slots = len(st.ring)
    if n > slots:
        _restart_core(buffer, end - slots)
        n = slots
    for first in range(end - n, end, st.rows):
        st.gather(first, min(first + st.rows, end))
        _write_gathered(buffer, st, first)
    st.timelimits.clear()
    st.sides = []


def _restart_core(buffer: StagingHost, first: int) -> None:
    """An empty core of the same room in place of ``buffer``'s, its id 0 the buffer's
    ``first`` (every experience the old core held is older than the ring's)."""
    old = buffer._core
    assert old is not None
    new = buffer._new_core(old.capacity)
    old.close()
    buffer._core, buffer._core_offset, buffer._newest = new, first, None
    buffer._core_len = 0


def _write_gathered(buffer: StagingHost, st: Staging, first: int) -> None:
    """Write the gathered steps (ids ``first ..``) after the core's newest step."""
    n = len(st.sides)
    core = buffer._core
    assert core is not None
    # the side ring of the gathered ids: (non_terminal, info, ...) as appended, in at most
    # two slices of the ring (n <= the ring's length)
    extras = buffer._extras
    ring = len(extras)
    head = first % ring
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
