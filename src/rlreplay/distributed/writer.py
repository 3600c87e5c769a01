"""Writers of a :class:`~rlreplay.distributed.ReplayService`: batch steps, send them in chunks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from rlreplay import FieldError, ReplayClosed, ReplayTimeout, ShapeError
from rlreplay.spec import as_array, shown, timeout_seconds

__all__ = ["Writer", "call", "retried"]

Array = np.ndarray[Any, Any]
T = TypeVar("T")


class Restarting(ReplayClosed):
    """A shard died and Ray is restarting it: calls in flight may or may not have run."""


def call(ray: Any, refs: Any, timeout: float | None, what: str) -> Any:
    """``ray.get`` with rlreplay's errors: a timeout raises ReplayTimeout, a dead actor
    ReplayClosed; an actor's own error (ReplayTimeout, InvalidIdError, ...) is raised as the
    instance of its class that Ray makes (it also is a ``RayTaskError``)."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise ReplayTimeout(
            f"{what}: no answer from the shards within timeout={timeout} s"
        ) from None
    except ray.exceptions.ActorUnavailableError as exc:
        raise Restarting(
            f"{what}: a shard died and is being restarted (it reloads its last checkpoint); "
            f"the call may or may not have run: call again ({exc})"
        ) from None
    except ray.exceptions.RayActorError as exc:
        raise ReplayClosed(f"{what}: a shard or the rate limiter is gone ({exc})") from None


def retried(attempt: Callable[[float | None], T], timeout: float | None, what: str) -> T:
    """Run ``attempt(time left)`` again while a shard is being restarted (calls that may run
    twice: reads, draws, priority updates), up to ``timeout`` seconds in all.

    Raises:
        ReplayTimeout: The shard was not back within ``timeout``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.02
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return attempt(left)
        except Restarting:
            if deadline is not None and time.monotonic() + pause > deadline:
                raise ReplayTimeout(
                    f"{what}: a restarting shard was not back within timeout={timeout} s"
                ) from None
            time.sleep(pause)  # the restart imports and reloads: poll, gently
            pause = min(0.5, 2 * pause)


class Writer:
    """Writes steps of its envs to their shards, ``flush_every`` steps at a time.

    ``add`` keeps steps locally; once ``flush_every`` are buffered (or on :meth:`flush` /
    :meth:`close`) they go to their shards, one call per shard, each env's steps in order as
    one ``extend``. Errors of a shard (a bad value, a closed service) surface at the flush.
    With a rate limiter the writer asks it for each chunk it sends (chunks small enough that a
    learner's batch and the chunk fit the limiter's band together) and reports what landed.

    A writer pickles with its unsent steps, so it can be built on the driver and handed to a
    Ray task or actor; two writers must not write the same env at the same time (their steps
    would interleave into one episode).
    """

    def __init__(
        self,
        *,
        shards: Sequence[Any],
        env_ids: Sequence[int],
        num_shards: int,
        next_names: tuple[str, ...],
        flush_every: int,
        limiter: Any,
        limiter_config: Mapping[str, Any] | None,
        scalar: bool,
    ) -> None:
        self.env_ids = list(env_ids)
        self.flush_every = flush_every
        self._shards = list(shards)
        self._num_shards = num_shards
        self._next_names = next_names
        self._limiter = limiter
        self._limiter_config = None if limiter_config is None else dict(limiter_config)
        self._scalar = scalar or len(self.env_ids) == 1
        self._steps: list[tuple[int, dict[str, Any]]] = []  # (env, values) in order
        self._keys: frozenset[str] | None = None
        self._signature: tuple[str, ...] = ()  # key order of the last step that passed
        self._closed = False
        self.sent = 0

    @property
    def pending(self) -> int:
        """Steps buffered and not sent yet."""
        return len(self._steps)

    def add(self, *, env_ids: Sequence[int] | None = None, timeout: float | None = None,
            **values: Any) -> None:  # fmt: skip
        """Buffer one step of each of ``env_ids`` (default: the writer's envs).

        Values have a leading axis ``len(env_ids)``, except for a writer of one env called
        without ``env_ids``, which takes one step's values as they are (like a core buffer with
        one env). ``next_<obs>`` is needed at episode ends only, as in the core.

        Args:
            env_ids: A subset of the writer's envs.
            timeout: For the flush this add may trigger (``None`` or ``inf``: for ever; NaN
                or a negative number: :class:`rlreplay.ConfigError`, checked on every call).
            **values: One value per field.

        Raises:
            FieldError: A step's fields differ from the first step's (``next_*`` aside).
            ShapeError: Unknown env ids or a wrong leading axis.
            ReplayClosed: The writer was closed.
        """
        if self._closed:
            raise ReplayClosed("Writer is closed")
        if timeout is not None:
            timeout = timeout_seconds(timeout)  # checked on every call, as the core's
        given = values  # kwargs: a fresh dict this writer may keep
        if any(v is None for v in values.values()):
            given = {k: v for k, v in values.items() if v is not None}
        signature = tuple(given)
        if signature != self._signature:  # the fields' check, once per change of keys
            keys = frozenset(k for k in given if k not in self._next_names)
            if self._keys is None:
                self._keys = keys
            elif keys != self._keys:
                raise FieldError(
                    f"add: fields {sorted(keys)} differ from this writer's first step's "
                    f"{sorted(self._keys)}"
                )
            self._signature = signature
        if env_ids is None and self._scalar:
            self._steps.append((self.env_ids[0], given))
        else:
            envs = self.env_ids if env_ids is None else self._envs(env_ids)
            unknown = sorted(set(envs) - set(self.env_ids))
            if unknown:
                raise ShapeError(f"env_ids: {unknown} are not this writer's {self.env_ids}")
            arrays = {k: as_array(k, v) for k, v in given.items()}
            for k, v in arrays.items():
                if v.ndim == 0 or v.shape[0] != len(envs):
                    raise ShapeError(
                        f"{k}: expected a leading axis of {len(envs)} (one row per env), "
                        f"got shape {v.shape}"
                    )
            for i, env in enumerate(envs):
                self._steps.append((env, {k: v[i] for k, v in arrays.items()}))
        if len(self._steps) >= self.flush_every:
            self.flush(timeout=timeout)

    def _envs(self, env_ids: Any) -> list[int]:
        arr = as_array("env_ids", env_ids)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise ShapeError(f"env_ids: expected a 1-D sequence of ints, got {shown(env_ids)}")
        return [int(e) for e in arr]

    def flush(self, *, timeout: float | None = None) -> int:
        """Send every buffered step; returns how many were sent.

        Steps go to each shard in one call. If some shards fail, the steps of those that
        stored theirs are dropped from the buffer (a retry never stores them twice) and the
        others stay buffered: after a shard died and Ray restarted it, ``flush()`` again sends
        them to the restarted shard.

        Raises:
            ReplayTimeout: The rate limiter or a shard did not let the steps in within
                ``timeout`` (the steps of shards that did not answer stay buffered; they may
                still land, so a retry can store them twice).
            ReplayClosed: The service was closed, or a shard died during the call (retry once
                Ray has restarted it; a shard that is not restarted keeps raising).
        """
        import ray

        timeout = timeout_seconds(timeout)
        sent = 0
        while self._steps:
            piece = self._steps[: self._grant_size()]
            n = len(piece)
            if self._limiter is not None:
                call(ray, self._limiter.await_insert.remote(n, timeout), None, "flush")
            by_shard = self._group(piece)
            ks = sorted(by_shard)
            refs = [self._shards[k].extend.remote(by_shard[k]) for k in ks]
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
            done: dict[int, tuple[int, int, int]] = {}
            error: BaseException | None = None
            for k, ref in zip(ks, refs, strict=True):
                try:  # answered ones at once; a late one raises ReplayTimeout
                    done[k] = call(ray, ref, 0, "flush")
                except Exception as exc:
                    error = error or exc
            if self._limiter is not None:
                # Waited for: a sample may count on these steps.
                commits = [
                    self._limiter.commit_insert.remote(stored, k, version, size)
                    for k, (version, size, stored) in done.items()
                ]
                lost = n - sum(stored for _, _, stored in done.values())
                if lost:
                    commits.append(self._limiter.cancel_insert.remote(lost))
                call(ray, commits, timeout, "flush")
            kept = [step for step in piece if step[0] % self._num_shards not in done]
            self._steps[:n] = kept
            sent += n - len(kept)
            if error is not None:
                self.sent += sent
                if isinstance(error, ReplayTimeout):
                    raise ReplayTimeout(
                        f"flush: no answer from the shards within timeout={timeout} s"
                    ) from None
                raise error
        self.sent += sent
        return sent

    def _grant_size(self) -> int:
        """Steps per limiter request: all of them without a limiter; else at most half the
        band's worth, so a learner's batch of up to half the band still fits beside it."""
        cfg = self._limiter_config
        if cfg is None:
            return len(self._steps)
        band = float(cfg["max_diff"]) - float(cfg["min_diff"])
        spi = float(cfg["samples_per_insert"])
        cap = band / (2.0 * spi) if math.isfinite(band) else float(len(self._steps))
        return max(1, min(len(self._steps), int(cap)))

    def _group(self, piece: list[tuple[int, dict[str, Any]]]) -> dict[int, list[Any]]:
        """Per shard, ``(local env, values stacked over the env's steps)`` runs."""
        per_env: dict[int, list[dict[str, Any]]] = {}
        for env, values in piece:
            per_env.setdefault(env, []).append(values)
        out: dict[int, list[Any]] = {}
        for env, steps in per_env.items():
            # One np.asarray per field over the steps' values (stacks arrays, packs scalars):
            # an np.stack of per-step arrays costs ~10x more for scalar fields.
            stacked: dict[str, Array] = {}
            for name in steps[0]:
                if name not in self._next_names:
                    stacked[name] = np.asarray([s[name] for s in steps])
            for name in self._next_names:  # given at episode ends only: zeros elsewhere
                given = [s.get(name) for s in steps]
                like = next((np.asarray(g) for g in given if g is not None), None)
                if like is not None:
                    zero = np.zeros_like(like)
                    stacked[name] = np.asarray([zero if g is None else g for g in given])
            k, local = env % self._num_shards, env // self._num_shards
            out.setdefault(k, []).append((local, stacked))
        return out

    def close(self, *, timeout: float | None = None) -> None:
        """Flush, then refuse further steps. Closing twice is harmless."""
        timeout = timeout_seconds(timeout)
        if not self._closed:
            self.flush(timeout=timeout)
            self._closed = True

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
