"""``rlreplay inspect``: what a checkpoint holds, read without loading its arrays.

:func:`inspect_checkpoint` reads the header and maps the arrays read-only
(:class:`~rlreplay.io.ckpt_view.CheckpointView`), then walks the stored steps env by env in
bounded chunks: fill per env, episodes (complete ones: count, length and return quantiles;
running, cut and abandoned ones counted), per-field min/max/mean over stored steps, priorities
of the sampleable transitions (min, max, entropy of the sampling law, share of the top 1%) and
the data checksum. :func:`render` prints it as rich tables; :func:`write_plots` draws PNGs.

Abandoned episodes (:meth:`rlreplay.ReplayBuffer.abandon_episode`) end at a step whose final
record is :data:`~rlreplay.episodes.kernels.ABANDONED`; their last ``n_step`` steps (the
*holes*, :mod:`rlreplay.episodes.cuts`) lie inside an env's ``[lo, hi)`` but are never
sampleable and have no priority mass. The episode walk collects the abandon points, and the
holes are built from them and the config's ``n_step`` as the loaded buffer builds them, so
``sampleable`` and the priorities leave them out.

The array layout read here is the one :meth:`rlreplay.ReplayBuffer.save` writes:
``index/env`` (per-env counters, columns named in :mod:`rlreplay.episodes.index`),
``index/slot_meta`` (per-slot episode start and final record), ``columns/steps/<field>`` and
``priorities/prio`` (per slot). In format 1 files every slot is there, step ``t`` of env ``e``
in slot ``e * C + t % C``; format 2 files hold the stored steps only, env by env, oldest first
(:class:`_Layout`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlreplay.episodes.cuts import Holes, build_holes
from rlreplay.episodes.index import ABANDONED, COUNT, EP_START, FINAL_FID, HEAD, HI, LO
from rlreplay.io.ckpt_view import CheckpointView, Integrity, slices_of_rows

__all__ = [
    "EnvFill",
    "EpisodeStats",
    "FieldStats",
    "PriorityStats",
    "Report",
    "inspect_checkpoint",
    "render",
    "write_plots",
]

Array = np.ndarray[Any, Any]
_ROWS = 1 << 18  # steps per chunk of the episode walk
QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class EnvFill:
    """One env's ring: steps ever added, stored, sampleable (holes of abandoned episodes
    excluded), and its capacity."""

    env: int
    added: int
    stored: int
    sampleable: int
    capacity: int


@dataclass(frozen=True)
class EpisodeStats:
    """Episodes among the stored steps.

    Attributes:
        lengths: Steps of every complete episode (all steps stored, ended with a final
            observation), env by env.
        returns: Undiscounted sum of rewards of each (all components of a vector reward).
        running: Episodes still running (one per env at most).
        cut: Episodes ended with a final observation whose first steps were overwritten.
        abandoned: Abandoned episodes (ended with no final observation; their first steps
            stored or not).

    Every episode with a stored step is counted in exactly one of these.
    """

    lengths: Array
    returns: Array
    running: int
    cut: int
    abandoned: int

    @property
    def complete(self) -> int:
        """Number of complete episodes."""
        return int(self.lengths.size)


@dataclass(frozen=True)
class FieldStats:
    """Min, max and mean of one stored column over the stored steps (``nan`` when empty)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    min: float
    max: float
    mean: float


@dataclass(frozen=True)
class PriorityStats:
    """Priorities of the sampleable transitions and the law a draw follows.

    Attributes:
        priorities: The priority of each sampleable transition.
        min: Smallest priority; ``max``: largest.
        entropy: Entropy (nats) of the sampling law ``P``; ``entropy_ratio`` divides it by
            ``log N`` (1: uniform).
        top_share: Probability mass of the top 1% (at least one) transitions.
    """

    priorities: Array
    min: float
    max: float
    entropy: float
    entropy_ratio: float
    top_share: float


@dataclass(frozen=True)
class Report:
    """Everything :func:`inspect_checkpoint` found (see the module docstring)."""

    path: Path
    cls: str
    config: dict[str, Any]
    file_bytes: int
    envs: list[EnvFill]
    episodes: EpisodeStats
    fields: list[FieldStats]
    priorities: PriorityStats | None
    integrity: Integrity
    arrays: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Layout:
    """Where the file's per-slot arrays hold step ``t`` of env ``e``: in slot ``e * C + t % C``
    (format 1: every slot), or in row ``offset[e] + t - head[e]`` (format 2: the stored steps
    only, env by env, oldest first; ``offset`` is ``None`` for format 1)."""

    C: int
    head: Array
    offset: Array | None

    @classmethod
    def of(cls, version: int, env: Array, C: int) -> _Layout:
        head = env[:, HEAD].copy()
        if version < 2:
            return cls(C, head, None)
        stored = env[:, COUNT] - head
        return cls(C, head, np.cumsum(stored) - stored)

    def ranges(self, e: int, first: int, end: int) -> list[tuple[int, int]]:
        """Row ranges holding stored steps ``first .. end-1`` of env ``e``, in time order."""
        if self.offset is None:
            return _ring_ranges(e, self.C, first, end)
        if end <= first:
            return []
        a = int(self.offset[e] + first - self.head[e])
        return [(a, a + end - first)]

    def rows(self, e: int, t: Array) -> Array:
        """Rows holding stored steps ``t`` of env ``e``."""
        if self.offset is None:
            out: Array = e * self.C + t % self.C
            return out
        out = self.offset[e] + t - self.head[e]
        return out


def _ring_ranges(e: int, C: int, first: int, end: int) -> list[tuple[int, int]]:
    """Slot ranges holding steps ``first .. end-1`` of env ``e``, in time order (<= 2)."""
    n = end - first
    if n <= 0:
        return []
    start = first % C
    if start + n <= C:
        return [(e * C + start, e * C + start + n)]
    return [(e * C + start, e * C + C), (e * C, e * C + start + n - C)]


def _time_chunks(layout: _Layout, e: int, first: int, end: int) -> Iterator[tuple[int, int, int]]:
    """``(row_lo, row_hi, t_lo)`` pieces of steps ``first .. end-1``, in time order."""
    t = first
    for lo, hi in layout.ranges(e, first, end):
        for a in range(lo, hi, _ROWS):
            b = min(hi, a + _ROWS)
            yield a, b, t
            t += b - a


def _episodes(
    view: CheckpointView, env: Array, layout: _Layout
) -> tuple[EpisodeStats, list[list[int]]]:
    """The episode statistics, and per env the stored steps ending abandoned episodes."""
    meta = view.array("index/slot_meta")
    reward = view.array("columns/steps/reward")
    lengths: list[Array] = []
    returns: list[Array] = []
    cuts: list[list[int]] = []
    running = cut = abandoned = 0
    for e in range(env.shape[0]):
        head, count = int(env[e, HEAD]), int(env[e, COUNT])
        cur_start, cur_sum = -1, 0.0
        last_fid = 0
        cuts.append([])
        for a, b, t0 in _time_chunks(layout, e, head, count):
            s = np.asarray(meta[a:b, EP_START])
            f = np.asarray(meta[a:b, FINAL_FID])
            r = np.asarray(reward[a:b], np.float64).reshape(b - a, -1).sum(axis=1)
            bounds = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
            sums = np.add.reduceat(r, bounds)
            if s[0] == cur_start:  # the first run continues the previous chunk's episode
                sums[0] += cur_sum
            ends = np.flatnonzero(f >= 0)  # ends with a final record
            run = np.searchsorted(bounds, ends, side="right") - 1
            t_end = t0 + ends
            whole = s[ends] >= head
            lengths.append((t_end - s[ends] + 1)[whole])
            returns.append(sums[run][whole])
            cut += int((~whole).sum())
            gone = np.flatnonzero(f == ABANDONED)
            abandoned += int(gone.size)
            cuts[e].extend((t0 + gone).tolist())
            cur_start, cur_sum, last_fid = int(s[-1]), float(sums[-1]), int(f[-1])
        running += int(count > head and last_fid == -1)  # the newest step ends nothing
    stats = EpisodeStats(
        np.concatenate(lengths) if lengths else np.zeros(0, np.int64),
        np.concatenate(returns) if returns else np.zeros(0),
        running,
        cut,
        abandoned,
    )
    return stats, cuts


def _sampleable_ranges(env: Array, holes: Holes, e: int) -> list[tuple[int, int]]:
    """Env ``e``'s sampleable steps as ``[t0, t1)`` ranges in time order: ``[lo, hi)`` less
    the holes of abandoned episodes (inside it, ascending, disjoint)."""
    t, hi = int(env[e, LO]), int(env[e, HI])
    out: list[tuple[int, int]] = []
    if e in holes.per_env:
        h0, _, cum = holes.per_env[e]
        for start, size in zip(h0.tolist(), np.diff(cum).tolist(), strict=True):
            if start > t:
                out.append((t, start))
            t = start + size
    if hi > t:
        out.append((t, hi))
    return out


def _field_stats(view: CheckpointView, name: str, env: Array, layout: _Layout) -> FieldStats:
    column = view.array(name)
    lo, hi, total, n = math.inf, -math.inf, 0.0, 0
    if column.dtype.kind in "biuf":
        for e in range(env.shape[0]):
            for rows in layout.ranges(e, int(env[e, HEAD]), int(env[e, COUNT])):
                for piece in slices_of_rows(column, rows):
                    if piece.size:
                        lo = min(lo, float(piece.min()))
                        hi = max(hi, float(piece.max()))
                        total += float(piece.sum(dtype=np.float64))
                        n += piece.size
    nan = math.nan
    short = name.split("/", 2)[-1]
    return FieldStats(short, tuple(column.shape[1:]), str(column.dtype),
                      lo if n else nan, hi if n else nan, total / n if n else nan)  # fmt: skip


def _masses(p: Array, alpha: float, variant: str) -> Array:
    """The sampling masses of live priorities ``p`` (see :mod:`rlreplay.sampling.priorities`).

    Rank-based masses use exact ranks (the buffer's may lag by fewer than ``sort_interval``
    changes).
    """
    m = np.zeros(p.shape, np.float64)
    pos = p > 0
    if variant == "rank_based":
        desc = -np.sort(-p[pos])
        rank = np.searchsorted(-desc, -p[pos], side="left") + 1  # 1 + #{priorities > p}
        m[pos] = rank.astype(np.float64) ** -alpha
    else:
        m[pos] = p[pos] ** alpha
    return m


def _priorities(
    view: CheckpointView, config: dict[str, Any], env: Array, layout: _Layout, holes: Holes
) -> Any:
    if "priorities/prio" not in view:
        return None
    prio = view.array("priorities/prio")
    parts = [
        np.asarray(prio[a:b])
        for e in range(env.shape[0])
        for t0, t1 in _sampleable_ranges(env, holes, e)
        for a, b in layout.ranges(e, t0, t1)
    ]
    p = np.concatenate(parts) if parts else np.zeros(0)
    if not p.size:
        return PriorityStats(p, math.nan, math.nan, math.nan, math.nan, math.nan)
    m = _masses(p, float(config.get("alpha", 1.0)), str(config.get("variant", "proportional")))
    total = m.sum()
    prob = m / total if total > 0 else np.full(p.size, 1.0 / p.size)
    nz = prob[prob > 0]
    entropy = float(-(nz * np.log(nz)).sum())
    k = max(1, p.size // 100)
    top = float(np.sort(prob)[-k:].sum())
    ratio = entropy / math.log(p.size) if p.size > 1 else 1.0
    return PriorityStats(p, float(p.min()), float(p.max()), entropy, ratio, top)


def inspect_checkpoint(path: str | os.PathLike[str], *, verify: bool = True) -> Report:
    """Read a checkpoint's header and statistics without loading its arrays.

    Args:
        path: A file written by :meth:`rlreplay.ReplayBuffer.save`.
        verify: Also hash the data region (one streaming pass over the file).

    Raises:
        CheckpointError: Not a readable checkpoint (missing, bad magic or version, corrupted
            header) or not one of a replay buffer.
    """
    from rlreplay.errors import CheckpointError

    view = CheckpointView(path)
    config = dict(view.meta.get("config", {}))
    needed = ("index/env", "index/slot_meta", "columns/steps/reward")
    if any(n not in view for n in needed) or "capacity" not in config:
        raise CheckpointError(f"checkpoint {str(view.path)!r}: not a replay buffer's checkpoint")
    env = np.array(view.array("index/env"))  # (num_envs, 7): small
    E = env.shape[0]
    C = int(config["capacity"]) // max(E, 1)
    layout = _Layout.of(view.reader.version, env, C)
    episodes, cuts = _episodes(view, env, layout)
    n_step = int(config.get("n_step", 1))
    slot_meta = view.array("index/slot_meta")
    holes = build_holes(cuts, slot_meta, env[:, LO].copy(), C, n_step, layout.rows)
    envs = [
        EnvFill(e, int(env[e, COUNT]), int(env[e, COUNT] - env[e, HEAD]),
                int(env[e, HI] - env[e, LO] - holes.sizes[e]), C)
        for e in range(E)
    ]  # fmt: skip
    columns = [n for n in view.names if n.startswith(("columns/steps/", "columns/derived/"))]
    return Report(
        path=view.path,
        cls=str(view.meta.get("class")),
        config=config,
        file_bytes=view.reader.size,
        envs=envs,
        episodes=episodes,
        fields=[_field_stats(view, n, env, layout) for n in columns],
        priorities=_priorities(view, config, env, layout, holes),
        integrity=view.verify() if verify else Integrity(True, 0, "not checked"),
        arrays={n: (view.array(n).dtype.str, view.array(n).shape) for n in view.names},
    )


def _q(values: Array) -> list[str]:
    if not values.size:
        return ["-"] * (len(QUANTILES) + 1)
    qs = np.quantile(values.astype(np.float64), QUANTILES)
    return [f"{v:.4g}" for v in (*qs, values.mean())]


def render(report: Report, console: Any = None, max_envs: int = 16) -> None:
    """Print ``report`` as rich tables (to ``console``, default a new :class:`rich.Console`)."""
    from rich.console import Console
    from rich.table import Table

    out = console if console is not None else Console()
    c = report.config
    t = Table(title=f"{report.cls} - {report.path.name}", show_header=False)
    t.add_row("file", f"{report.path} ({report.file_bytes:,} bytes)")
    for key in ("capacity", "num_envs", "n_step", "gamma", "frame_stack", "stack_pad", "seed",
                "alpha", "beta", "variant", "record_episodic_return"):  # fmt: skip
        if key in c:
            t.add_row(key, str(c[key]))
    t.add_row("stored", f"{sum(f.stored for f in report.envs):,} steps")
    t.add_row("sampleable", f"{sum(f.sampleable for f in report.envs):,} transitions")
    out.print(t)

    t = Table(title="Fill per env")
    for col in ("env", "added", "stored", "sampleable", "capacity", "fill"):
        t.add_column(col, justify="right")
    for f in report.envs[:max_envs]:
        t.add_row(str(f.env), f"{f.added:,}", f"{f.stored:,}", f"{f.sampleable:,}",
                  f"{f.capacity:,}", f"{f.stored / f.capacity:.1%}")  # fmt: skip
    if len(report.envs) > max_envs:
        t.add_row("...", "", f"({len(report.envs) - max_envs} more envs)", "", "", "")
    out.print(t)

    ep = report.episodes
    t = Table(
        title=f"Episodes: {ep.complete} complete, {ep.running} running, {ep.cut} cut, "
        f"{ep.abandoned} abandoned"
    )
    t.add_column("")
    for col in ("min", "q25", "median", "q75", "max", "mean"):
        t.add_column(col, justify="right")
    t.add_row("length", *_q(ep.lengths))
    t.add_row("return", *_q(ep.returns))
    out.print(t)

    t = Table(title="Fields (stored steps)")
    for col in ("field", "shape", "dtype", "min", "max", "mean"):
        t.add_column(col, justify="right" if col in ("min", "max", "mean") else "left")
    for s in report.fields:
        t.add_row(s.name, str(s.shape), s.dtype, f"{s.min:.4g}", f"{s.max:.4g}", f"{s.mean:.4g}")
    out.print(t)

    p = report.priorities
    if p is not None:
        t = Table(title=f"Priorities ({p.priorities.size:,} sampleable)", show_header=False)
        t.add_row("min / max", f"{p.min:.4g} / {p.max:.4g}")
        t.add_row("entropy", f"{p.entropy:.4g} nats ({p.entropy_ratio:.1%} of uniform)")
        t.add_row("top 1% share", f"{p.top_share:.2%}")
        out.print(t)

    ok = report.integrity
    status = "[green]OK[/green]" if ok.ok else "[red]FAILED[/red]"
    out.print(f"Integrity: {status}: {ok.message} ({ok.data_bytes:,} data bytes)")


def _histogram(ax: Any, values: Array, bins: int | None = None) -> None:
    """A histogram of ``values`` whose ticks are values that can occur.

    Counts are whole numbers, so the count axis gets integer ticks. Whole-number values
    (episode lengths) get one bin per value while they span at most 50, centred on it, and
    integer ticks. A single distinct value gets one tick, at that value: matplotlib would
    otherwise spread fractional ticks over the bin it draws around it.
    """
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if not values.size:
        return
    lo, hi = float(values.min()), float(values.max())
    whole = values.dtype.kind in "iub" or bool(np.all(values == np.round(values)))
    if whole and hi - lo <= 50:
        ax.hist(values, bins=np.arange(lo, hi + 2) - 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        ax.hist(values, bins=bins or min(50, max(1, values.size)))
    if lo == hi:
        ax.set_xticks([lo])


def write_plots(report: Report, directory: str | os.PathLike[str]) -> list[Path]:
    """Write PNGs of episode lengths and returns, priorities and fill per env.

    Returns:
        The paths written (the priority plot only for prioritized buffers).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    ep = report.episodes
    for values, name, label in ((ep.lengths, "episode_lengths.png", "episode length (steps)"),
                                (ep.returns, "episode_returns.png", "episode return")):  # fmt: skip
        fig, ax = plt.subplots(figsize=(6, 4))
        _histogram(ax, values)
        ax.set(xlabel=label, ylabel="episodes", title=f"{values.size} complete episodes")
        save(fig, name)
    if report.priorities is not None:
        p = report.priorities.priorities
        fig, ax = plt.subplots(figsize=(6, 4))
        _histogram(ax, p, bins=50)
        ax.set(xlabel="priority", ylabel="transitions", title="priority distribution")
        ax.set_yscale("log")
        save(fig, "priorities.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    envs = [f.env for f in report.envs]
    ax.bar(envs, [f.stored / f.capacity for f in report.envs])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # envs are whole numbers
    ax.set(xlabel="env", ylabel="stored / capacity", ylim=(0, 1), title="fill per env")
    save(fig, "fill_per_env.png")
    return written
