"""A sharded replay service on Ray whose samples follow exactly one buffer's law."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np

from rlreplay import (
    Batch,
    CheckpointError,
    ConfigError,
    Field,
    PriorityError,
    RateLimiter,
    ReplayClosed,
    ReplayError,
    ShapeError,
)
from rlreplay.distributed.draws import draw_in_one_trip, draw_in_two_trips
from rlreplay.distributed.limiter import LimiterHost
from rlreplay.distributed.manifest import (
    MANIFEST,
    MANIFEST_VERSION,
    checked_config,
    load_shards,
    next_generation,
    read_manifest,
    remove_old_files,
    service_arguments,
    shard_file,
    write_manifest,
)
from rlreplay.distributed.shard import Shard
from rlreplay.distributed.split import encode_env_ids, pack_updates, route_ids
from rlreplay.distributed.updates import UpdateQueue
from rlreplay.distributed.writer import Writer, call, retried
from rlreplay.spec import Schema, as_array, check_rows, positive_int, shown, timeout_seconds

__all__ = ["ReplayService"]

Array = np.ndarray[Any, Any]


def _ray() -> Any:
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("rlreplay.distributed needs Ray: pip install 'rlreplay[ray]'") from None
    return ray


class ReplayService:
    """Replay sharded over Ray actors, sampled as if it were one buffer.

    Shard ``k`` is a Ray actor holding a core buffer of ``capacity // num_shards`` transitions
    for the envs ``e`` with ``e % num_shards == k`` (an env's episodes never straddle shards).
    :meth:`sample` draws ``B`` transitions with exactly the law of one buffer holding every
    shard's data: the shards' shares are ``Multinomial(B, M_k / M)`` with ``M_k`` a shard's
    sampleable count (uniform) or priority mass ``sum p ** alpha`` (prioritized), each shard
    draws its share by its own law, and importance weights use the global probability and
    the global smallest one (see :mod:`rlreplay.distributed.split`). Draws within a shard
    are independent (``stratified=False``), so a batch is i.i.d. as a single buffer's with
    ``stratified=False``. A request is fetched in one round trip (every shard draws it all
    and returns its masses at the draw; the split keeps each shard's first rows) while the
    surplus rows stay under :attr:`one_trip_bytes`, else in two (masses, then each shard's
    share; writes landing in between shift the split by their share of the mass); see
    :mod:`rlreplay.distributed.draws`.

    Args:
        num_shards: Number of shard actors.
        capacity: Transitions over all shards.
        fields: As for :class:`rlreplay.ReplayBuffer`.
        prioritized: Proportional prioritized replay (rank-based ranks are global and cannot
            be split across shards).
        alpha: Priority exponent (prioritized).
        beta: Importance exponent at the first sample; ``beta_final``/``beta_steps`` anneal it
            over the service's samples.
        beta_final: Exponent after ``beta_steps`` samples.
        beta_steps: Samples over which beta moves (0: constant).
        n_step: Window length.
        gamma: Discount.
        rate_limiter: A :class:`rlreplay.RateLimiter` (its parameters; the service keeps its
            own counters in a limiter actor) applied to every writer's inserts and every
            sample, or ``None``.
        seed: Seeds the service's generator and, through it, every shard's.
        num_envs: Env ids writers may use (``0 .. num_envs - 1``); default ``num_shards``.
        ray_init: Arguments for ``ray.init`` if Ray is not running yet (ignored otherwise).
        actor_options: Extra ``.options(...)`` for the shard actors (default ``num_cpus=0,
            max_restarts=3, enable_task_events=False``: Ray restarts a dead shard up to 3
            times, and the shard reloads the last :meth:`save`'s checkpoint; shard calls are
            not listed by Ray's state API or timeline unless ``enable_task_events=True``).
        recovery_dir: Where shards keep what they reload after a restart (a few bytes per
            shard; default: a temporary directory removed by :meth:`close`). On a multi-node
            cluster give a directory every node sees, as for :meth:`save`.
        **buffer_options: Other core buffer arguments (``frame_stack``, ``eps``, ...).

    Every blocking call takes ``timeout`` (seconds; ``None`` or ``inf``: wait for ever; NaN,
    a negative number or a non-number: :class:`rlreplay.ConfigError` before anything is sent)
    and raises :class:`rlreplay.ReplayTimeout` when it runs out; calls after :meth:`close` raise
    :class:`rlreplay.ReplayClosed`.

    Example:
        >>> import numpy as np, rlreplay as rr
        >>> from rlreplay.distributed import ReplayService
        >>> svc = ReplayService(2, 1000, {"obs": rr.Field((2,), np.float32)}, seed=0)
        >>> w = svc.writer([0, 1])
        >>> for t in range(10):
        ...     w.add(obs=np.zeros((2, 2), np.float32), reward=[1.0, 1.0],
        ...           terminated=[t == 9] * 2, truncated=[False] * 2,
        ...           next_obs=np.zeros((2, 2), np.float32))
        >>> w.close()
        >>> svc.sample(8).obs.shape
        (8, 2)
        >>> svc.close()
    """

    def __init__(
        self,
        num_shards: int,
        capacity: int,
        fields: Mapping[str, Field | tuple[Any, Any]],
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        n_step: int = 1,
        gamma: float = 0.99,
        rate_limiter: RateLimiter | None = None,
        seed: int | None = None,
        *,
        beta_final: float | None = None,
        beta_steps: int = 0,
        num_envs: int | None = None,
        ray_init: Mapping[str, Any] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        recovery_dir: str | os.PathLike[str] | None = None,
        **buffer_options: Any,
    ) -> None:
        _check_numbers(alpha, beta, beta_final, beta_steps, gamma, n_step)
        ray = _ray()
        # What a checkpoint's manifest records to build the same service again.
        self._config: dict[str, Any] = dict(
            prioritized=bool(prioritized), alpha=float(alpha), beta=float(beta),
            n_step=int(n_step), gamma=float(gamma), beta_final=beta_final,
            beta_steps=int(beta_steps), num_envs=num_envs,
            rate_limiter=None if rate_limiter is None else rate_limiter.to_json(),
            buffer_options=dict(buffer_options),
        )  # fmt: skip
        self.num_shards = S = positive_int("num_shards", num_shards)
        self.capacity = positive_int("capacity", capacity)
        self.num_envs = positive_int("num_envs", S if num_envs is None else num_envs)
        if self.num_envs < S:
            raise ConfigError(
                f"num_envs: each of the {S} shards needs an env, got num_envs={self.num_envs}"
            )
        if buffer_options.get("variant", "proportional") != "proportional":
            raise ConfigError(
                "variant: rank-based ranks are global; a sharded service samples proportionally"
            )
        if rate_limiter is not None and not isinstance(rate_limiter, RateLimiter):
            raise ConfigError(f"rate_limiter: expected an rr.RateLimiter, got {rate_limiter!r}")
        self.prioritized = bool(prioritized)
        self.alpha = float(alpha)
        self.beta0 = float(beta)
        self.beta_final = self.beta0 if beta_final is None else float(beta_final)
        self.beta_steps = int(beta_steps)
        self.schema = Schema.build(fields)
        options: dict[str, Any] = dict(buffer_options, n_step=n_step, gamma=gamma)
        if self.prioritized:
            # The service computes weights and anneals beta itself; shards draw independently
            # so that a batch is i.i.d. like one buffer's.
            options.update(alpha=alpha, beta=0.0, stratified=False)
        if not ray.is_initialized():
            ray.init(**dict(ray_init or {}))
        seeds = np.random.SeedSequence(seed).spawn(S + 1)
        self._rng = np.random.default_rng(seeds[S])
        self._rng_lock = threading.Lock()
        self._own_home = recovery_dir is None
        if recovery_dir is None:
            recovery_dir = tempfile.mkdtemp(prefix="rlreplay-service-")
        self.recovery_dir = os.path.abspath(recovery_dir)
        os.makedirs(self.recovery_dir, exist_ok=True)
        self._limiter: Any = None
        self._limiter_config = None if rate_limiter is None else rate_limiter.config()
        if rate_limiter is not None:
            host = ray.remote(LimiterHost).options(num_cpus=0, max_concurrency=256)
            self._limiter = host.remote(rate_limiter, S)
        # No task events: Ray's per-call bookkeeping for its state API and timeline costs
        # about a tenth of the shard calls' throughput here (actor_options can turn it on).
        defaults = {"num_cpus": 0, "max_restarts": 3, "enable_task_events": False}
        remote_shard = ray.remote(Shard).options(**{**defaults, **dict(actor_options or {})})
        self._shards = [
            remote_shard.remote(
                self.capacity // S,
                dict(fields),
                len(range(k, self.num_envs, S)),
                self.prioritized,
                int(seeds[k].generate_state(1)[0]),
                options,
                self.recovery_dir,
                k,
                self._limiter,
            )
            for k in range(S)
        ]
        # Bytes of one sampled row (ids, weights, ... included), for one_trip_bytes.
        stack = int(buffer_options.get("frame_stack", 1))
        fs = self.schema.fields.values()
        obs = sum(f.nbytes for f in fs if f.observation)
        self._row_bytes = sum(f.nbytes for f in fs if not f.observation) + obs * 2 * stack + 40
        #: Largest surplus (bytes drawn and sent beyond the batch) for one-round-trip sampling:
        #: every shard draws the whole request, so ``S - 1`` shards' worth is extra. Above it,
        #: samples read the masses first, then draw only each shard's share (two round trips).
        self.one_trip_bytes = 1 << 20
        self._samples = 0  # service-wide sample calls, for beta
        self._updates = UpdateQueue(self._shards)  # update_priorities(..., wait=False)
        self._closed = False
        # Fail here, not at the first write, if a shard cannot be built (bad fields, ...).
        try:
            call(ray, [s.sizes.remote() for s in self._shards], None, "ReplayService()")
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ writing
    def writer(self, env_ids: Sequence[int] | int, *, flush_every: int = 64) -> Writer:
        """A writer for the envs ``env_ids`` (picklable: hand it to Ray tasks or actors).

        Args:
            env_ids: Service env ids in ``[0, num_envs)`` this writer writes.
            flush_every: Steps buffered before they are sent (``flush()`` sends earlier).
        """
        self._check_open()
        envs = np.atleast_1d(as_array("env_ids", env_ids))
        if envs.ndim != 1 or envs.dtype.kind not in "iu" or envs.shape[0] == 0:
            raise ShapeError(
                f"env_ids: expected a non-empty 1-D sequence of ints, got {shown(env_ids)}"
            )
        flush_every = positive_int("flush_every", flush_every)
        if envs.min() < 0 or envs.max() >= self.num_envs or np.unique(envs).shape[0] < len(envs):
            raise ShapeError(
                f"env_ids: expected unique ints in [0, {self.num_envs}), got {envs.tolist()}"
            )
        return Writer(
            shards=list(self._shards),
            env_ids=[int(e) for e in envs],
            num_shards=self.num_shards,
            next_names=tuple("next_" + n for n in self.schema.observation_names),
            flush_every=flush_every,
            limiter=self._limiter,
            limiter_config=self._limiter_config,
            scalar=isinstance(env_ids, int | np.integer),
        )

    # ------------------------------------------------------------------ sampling
    @property
    def beta(self) -> float:
        """The importance exponent the next :meth:`sample` uses."""
        if self.beta_steps == 0:
            return self.beta0
        frac = min(1.0, self._samples / self.beta_steps)
        return self.beta0 + (self.beta_final - self.beta0) * frac

    def sample(self, batch_size: int, *, timeout: float | None = None) -> Batch:
        """Draw ``batch_size`` transitions from all shards with one buffer's law.

        Returns:
            A :class:`rlreplay.Batch` like a core buffer's, with service ``ids`` and
            ``env_ids``; prioritized batches carry global ``probabilities`` and ``weights``.

        Raises:
            EmptyBufferError: Nothing is sampleable in any shard.
            ReplayTimeout: The rate limiter or a shard did not answer within ``timeout``.
            ConfigError: ``batch_size`` not a positive int, above the size budget or more than
                the rate limiter could ever grant, or a bad ``timeout`` (``None`` or ``inf``:
                for ever); nothing is drawn then.

        A sample that raises (a timeout included) is rolled back unless another sample of
        this service ran meanwhile: its generator and ``beta`` step are as before, and the
        rate limiter does not count it. A shard that answers after the timeout has drawn for
        nothing (its draw is dropped).
        """
        batch_size = positive_int("batch_size", batch_size)
        timeout = timeout_seconds(timeout)
        self._check_request(batch_size, 1)
        bits = self._rng.bit_generator
        with self._rng_lock:
            self._check_open()
            beta = self.beta
            before = bits.state  # (a dict: ~1 µs against a round trip's milliseconds)
            self._samples += 1
            seed = int(self._rng.integers(2**63))
            after = bits.state
        try:
            return self._sample(batch_size, [(beta, np.random.default_rng(seed))], timeout)[0]
        except BaseException:
            with self._rng_lock:
                if bits.state == after:  # no other sample since: as if this one never ran
                    bits.state = before
                    self._samples -= 1
            raise

    def _check_request(self, batch_size: int, batches: int) -> None:
        """Refuse, before the generator moves, a request the size budget or the rate limiter
        would refuse (the limiter's own check, made again here, runs in its actor)."""
        n = batch_size * batches
        check_rows("batch_size", batch_size, n, self._row_bytes * self.num_shards, "sample")
        cfg = self._limiter_config
        if cfg is not None:
            width = cfg["max_diff"] - cfg["min_diff"] - cfg["samples_per_insert"]
            if n > width:
                raise ConfigError(
                    f"batch_size: a request of {n} samples needs max_diff - min_diff - "
                    f"samples_per_insert >= {n}, the rate limiter has {width:g}; sample at "
                    f"most {math.floor(width)} at once or widen error_buffer"
                )

    def _sample(
        self,
        batch_size: int,
        draws: Sequence[tuple[float, np.random.Generator]],
        timeout: float | None,
    ) -> list[Batch]:
        """One batch per ``(beta, generator)`` of ``draws``, all from one reading of the
        shards' masses (see :mod:`rlreplay.distributed.draws` for the two ways)."""
        ray = _ray()
        n = batch_size * len(draws)
        if self._limiter is not None:
            call(ray, self._limiter.await_sample.remote(n, timeout), None, "sample")
        one_trip = self._row_bytes * n * (self.num_shards - 1) <= self.one_trip_bytes
        fetch = draw_in_one_trip if one_trip else draw_in_two_trips
        try:
            # The queued priority updates ride on the draw calls, applied before the draw.
            return fetch(
                ray, self._shards, batch_size, draws, timeout, self.prioritized, self._updates
            )
        except BaseException:
            if self._limiter is not None:  # the batch never reached the caller: no sample
                with contextlib.suppress(ReplayError):
                    call(ray, self._limiter.cancel_sample.remote(n), None, "sample")
            raise

    def iterate(
        self,
        batch_size: int,
        *,
        prefetch: int = 2,
        per_call: int = 1,
        timeout: float | None = None,
    ) -> Iterator[Batch]:
        """Endless batches, ``prefetch`` requests of ``per_call`` batches each kept in flight
        so the learner never waits on a round trip.

        Priorities updated after a batch was requested do not affect it; the ``per_call``
        batches of one request are drawn from one reading of the shards (independent draws,
        each with one buffer's law at that reading): fewer round trips per batch, as if the
        learner updated priorities ``per_call`` batches later.

        Raises:
            ReplayClosed: The service was closed (ends the iteration).
            ConfigError: A count that is not a positive int, ``prefetch * per_call`` batches
                above the size budget, or a bad ``timeout``: raised by this call, before any
                request is made.
        """
        batch_size = positive_int("batch_size", batch_size)
        prefetch = positive_int("prefetch", prefetch)
        per_call = positive_int("per_call", per_call)
        timeout = timeout_seconds(timeout)
        self._check_request(batch_size, per_call)
        check_rows("prefetch", prefetch, prefetch * per_call * batch_size, self._row_bytes,
                   "iterate")  # fmt: skip
        return self._batches(batch_size, prefetch, per_call, timeout)

    def _batches(
        self, batch_size: int, prefetch: int, per_call: int, timeout: float | None
    ) -> Iterator[Batch]:
        """:meth:`iterate`'s generator (its arguments checked)."""
        pool = ThreadPoolExecutor(max_workers=prefetch, thread_name_prefix="rlreplay-prefetch")
        pending: list[Future[list[Batch]]] = []
        try:
            while True:
                while len(pending) < prefetch:
                    draws = []
                    with self._rng_lock:
                        self._check_open()
                        for _ in range(per_call):
                            beta, self._samples = self.beta, self._samples + 1
                            draws.append((beta, np.random.default_rng(self._rng.integers(2**63))))
                    pending.append(pool.submit(self._sample, batch_size, draws, timeout))
                yield from pending.pop(0).result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ priorities
    @overload
    def update_priorities(
        self, ids: Any, priorities: Any, *, timeout: float | None = ..., wait: Literal[True] = ...
    ) -> int: ...

    @overload
    def update_priorities(
        self, ids: Any, priorities: Any, *, timeout: float | None = ..., wait: Literal[False]
    ) -> None: ...

    def update_priorities(
        self, ids: Any, priorities: Any, *, timeout: float | None = None, wait: bool = True
    ) -> int | None:
        """Route ``(ids, priorities)`` to their shards; ids overwritten since are ignored.

        With ``wait=False`` the updates are queued in this process and the call returns at
        once: the queue rides on this service's next draw call to each shard (all queued
        updates of the shard, later ones winning), which applies them before it draws, so the
        next :meth:`sample` (or batch that :meth:`iterate` requests after the call) sees them
        and they cost no round trip of their own. Before a waited update, :meth:`stats`,
        :meth:`save`, or once 65,536 ids are queued, the queue is sent as one call per shard
        instead (Ray runs one caller's calls to an actor in order). Their errors are raised
        by a later ``update_priorities`` (or :meth:`stats`); at most 64 sends stay
        unanswered, then the call waits for the oldest.

        Returns:
            How many ids were ignored as overwritten (summed over shards); ``None`` with
            ``wait=False``.

        Raises:
            InvalidIdError: An id never issued.
            ShapeError: ``priorities`` and ``ids`` differ in shape.
            PriorityError: As the core's.
        """
        self._check_open()
        timeout = timeout_seconds(timeout)
        if not isinstance(wait, bool | np.bool_):
            raise ConfigError(f"wait: expected True or False, got {shown(wait)}")
        p = as_array("priorities", priorities)
        id_shape = as_array("ids", ids).shape
        if p.shape != id_shape:
            raise ShapeError(
                f"priorities: expected one per id, shape {id_shape}, got shape {p.shape}"
            )
        if p.dtype.kind not in "iuf":  # the core's check, before the cast to float64
            raise PriorityError(f"priorities: expected real numbers, got dtype {p.dtype}")
        shard, local = route_ids(ids, self.num_shards)
        p = p.reshape(-1)
        self._updates.harvest(_ray(), timeout)
        if not wait:  # a copy: the caller may reuse its array before the queue is sent
            self._updates.put(shard, local, p.astype(np.float64))
            return None
        self._updates.send()  # earlier queued updates first
        packed = {}
        for k in range(self.num_shards):
            mine = shard == k
            if mine.any():
                packed[k] = (pack_updates(local[mine], p[mine]),)
        return int(sum(self._ask("update_priorities", timeout, packed)))

    # ------------------------------------------------------------------ inspection
    def get_transitions(self, ids: Any, *, timeout: float | None = None) -> Batch:
        """The transitions with service ids ``ids`` (each sampleable now), in order."""
        self._check_open()
        timeout = timeout_seconds(timeout)
        shard, local = route_ids(ids, self.num_shards)
        ids = np.asarray(ids)
        check_rows("ids", ids.shape, ids.size, self._row_bytes, "get_transitions")
        ks = [k for k in range(self.num_shards) if (shard == k).any()]
        got = self._ask("get_transitions", timeout, {k: (local[shard == k],) for k in ks})
        flat = ids.reshape(-1)
        out: dict[str, Array] = {}
        for k, part in zip(ks, got, strict=True):
            rows = np.flatnonzero(shard == k)
            values = dict(part, ids=flat[rows])
            values["env_ids"] = encode_env_ids(part["env_ids"], k, self.num_shards)
            for name, v in values.items():
                v = np.asarray(v)
                if name not in out:
                    out[name] = np.zeros((flat.shape[0], *v.shape[1:]), v.dtype)
                out[name][rows] = v
        return Batch(out)

    def _ask(
        self, method: str, timeout: float | None, args: Mapping[int, tuple[Any, ...]] | None = None
    ) -> list[Any]:
        """``method(*args[k])`` on each shard ``k`` of ``args`` (default: every shard, no
        arguments), answers in order; sent again while a shard is being restarted, so only for
        calls that may run twice."""
        ray = _ray()
        todo = {k: () for k in range(self.num_shards)} if args is None else args

        def attempt(left: float | None) -> list[Any]:
            refs = [getattr(self._shards[k], method).remote(*a) for k, a in todo.items()]
            return list(call(ray, refs, left, method))

        return retried(attempt, timeout, method)

    def stats(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Counts per shard and over all, and the rate limiter's counters.

        Per shard: ``stored``, ``sampleable``, ``restarts`` (times Ray restarted the actor),
        ``lost`` (steps it had stored that its restarts dropped: those written after the
        checkpoint it reloaded, or all of them if there was none), ``since_checkpoint`` (steps
        a death now would lose), ``abandoned`` (reloaded steps left never sampleable: the
        running episodes a restart abandoned, see :mod:`rlreplay.distributed.shard`) and
        ``checkpoint`` (the file it would reload, or ``None``). ``restarts``, ``lost``,
        ``abandoned``, ``stored`` and ``sampleable`` are also summed over shards.
        """
        self._check_open()
        timeout = timeout_seconds(timeout)
        ray = _ray()
        self._updates.send()
        self._updates.harvest(_ray(), timeout)
        shards = self._ask("status", timeout)
        limiter = None
        if self._limiter is not None:
            limiter = call(ray, self._limiter.stats.remote(), timeout, "stats")
        return {
            "shards": shards,
            "restarts": sum(r["restarts"] for r in shards),
            "lost": sum(r["lost"] for r in shards),
            "abandoned": sum(r["abandoned"] for r in shards),
            "stored": sum(r["stored"] for r in shards),
            "sampleable": sum(r["sampleable"] for r in shards),
            "samples": self._samples,
            "rate_limiter": limiter,
        }

    def __len__(self) -> int:
        """Transitions stored over all shards."""
        return int(self.stats()["stored"])

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: str | os.PathLike[str], *, timeout: float | None = None) -> Path:
        """Write a checkpoint of every shard, then its manifest, into ``directory``.

        Each shard writes its buffer with the core's atomic ``save`` (all shards at once) to a
        file of a new generation; ``manifest.json`` (shard count, capacity, configuration, the
        service's generator and sample count, the rate limiter's counters, each shard's file,
        size and step counter, a format version) is written last, atomically, and only then are
        older generations' files removed: a save that fails or dies leaves the previous
        checkpoint whole. A shard restarted by Ray later reloads its file of this save.

        Each shard's file is one instant of that shard; writes in flight land in a shard
        before or after its save, never half (an env, hence an episode, lives in one shard).

        Args:
            directory: Created if missing; every shard actor must see it (one machine, or a
                shared file system).
            timeout: Seconds for the shards' saves (``ReplayTimeout``: no manifest written).

        Returns:
            The manifest's path.

        Raises:
            ConfigError: ``buffer_options`` that JSON cannot hold (functions, ...).
            ReplayTimeout: The shards did not finish within ``timeout``.
        """
        self._check_open()
        timeout = timeout_seconds(timeout)
        self._updates.send()
        ray = _ray()
        config = checked_config({"fields": self.schema.to_json(), **self._config})
        d = Path(directory).resolve()
        d.mkdir(parents=True, exist_ok=True)
        generation = next_generation(d)
        names = [shard_file(k, generation) for k in range(self.num_shards)]
        with self._rng_lock:
            service = {"samples": self._samples, "rng": self._rng.bit_generator.state}
        limiter = None
        if self._limiter is not None:
            limiter = call(ray, self._limiter.state_dict.remote(), timeout, "save")
        infos = self._ask("save", timeout, {k: (str(d / n),) for k, n in enumerate(names)})
        manifest = {
            "version": MANIFEST_VERSION,
            "generation": generation,
            "num_shards": self.num_shards,
            "capacity": self.capacity,
            "config": config,
            "service": service,
            "rate_limiter": limiter,
            "shards": [dict(info, file=n) for n, info in zip(names, infos, strict=True)],
        }
        write_manifest(d, manifest)
        remove_old_files(d, set(names))
        return d / MANIFEST

    @classmethod
    def restore(
        cls,
        directory: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        ray_init: Mapping[str, Any] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        recovery_dir: str | os.PathLike[str] | None = None,
    ) -> ReplayService:
        """A service with the contents, priorities, configuration, generator and rate limiter
        counters of the checkpoint in ``directory`` (see :meth:`save`).

        Raises:
            CheckpointError: A missing, corrupt or foreign manifest or shard file.
            ReplayTimeout: The shards did not load within ``timeout``.
        """
        timeout = timeout_seconds(timeout)
        m = read_manifest(directory)
        num_shards, capacity, fields, kwargs = service_arguments(m, directory)
        try:
            svc = cls(
                num_shards, capacity, fields, ray_init=ray_init, actor_options=actor_options,
                recovery_dir=recovery_dir, **kwargs,
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"service checkpoint {str(directory)!r}: its configuration does not build a "
                f"service ({type(exc).__name__}: {exc})"
            ) from None
        try:
            load_shards(_ray(), svc._shards, svc._limiter, m, timeout)
            svc._samples = int(m["service"]["samples"])
            svc._rng.bit_generator.state = m["service"]["rng"]
        except BaseException:
            svc.close()
            raise
        return svc

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Wake waiting writers and samplers (ReplayClosed) and stop the shard actors."""
        if self._closed:
            return
        self._closed = True
        ray = _ray()
        if self._limiter is not None:
            # Wakes its waiters with ReplayClosed; a dead limiter has none.
            with contextlib.suppress(ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                ray.get(self._limiter.close.remote(), timeout=10.0)
            ray.kill(self._limiter)
        for s in self._shards:
            ray.kill(s)
        if self._own_home:
            shutil.rmtree(self.recovery_dir, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ReplayClosed("ReplayService is closed")

    def __enter__(self) -> ReplayService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_numbers(
    alpha: Any, beta: Any, beta_final: Any, beta_steps: Any, gamma: Any, n_step: Any
) -> None:
    """The service's own numeric arguments, checked before Ray or any actor is touched (the
    shards check them again, as every core buffer does)."""
    for name, value in (("alpha", alpha), ("beta", beta), ("beta_final", beta_final)):
        if name == "beta_final" and value is None:
            continue
        if isinstance(value, bool | np.timedelta64) or not isinstance(
            value, int | float | np.integer | np.floating
        ):
            raise ConfigError(f"{name}: expected a finite number >= 0, got {shown(value)}")
        if not (0 <= value < math.inf):
            raise ConfigError(f"{name}: expected a finite number >= 0, got {shown(value)}")
    if (
        isinstance(gamma, bool | np.timedelta64)
        or not isinstance(gamma, int | float | np.integer | np.floating)
        or not 0 <= gamma <= 1
    ):
        raise ConfigError(f"gamma: expected a number in [0, 1], got {shown(gamma)}")
    if (
        isinstance(beta_steps, bool)
        or not isinstance(beta_steps, int | np.integer)
        or beta_steps < 0
    ):
        raise ConfigError(f"beta_steps: expected an int >= 0, got {shown(beta_steps)}")
    positive_int("n_step", n_step)
