"""Minari datasets in and out (extra ``rlreplay[minari]``): Minari's own reader and writer.

Out (:func:`to_minari`): every stored *complete* episode becomes one Minari episode with
``N + 1`` observations (its ``N`` stored ones and the true final one), ``N`` actions,
rewards, ``terminations`` and ``truncations`` (kept apart, as stored). Running episodes,
episodes whose first steps were overwritten and abandoned episodes
(:meth:`~rlreplay.ReplayBuffer.abandon_episode`: no final observation, neither terminated nor
truncated) are left out and counted in the returned :class:`MinariExport`; no final
observation is ever made up. Observation fields
become the observation space (one field: its ``Box``, which loads back as ``obs`` whatever
its name; several: a ``Dict`` keyed by field name), ``action`` the action space; other fields
travel as per-step ``infos`` (Minari's convention: ``infos[k][0]`` belongs to the reset,
``infos[k][t + 1]`` to step ``t``). Frames are written without JPEG encoding, so uint8 images
are kept bit for bit.

In (:func:`from_minari`): a local dataset (nothing is ever downloaded) is read episode by
episode into a new buffer whose fields come from the dataset's spaces (and its per-step infos).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay.buffer.exports import MinariExport
from rlreplay.errors import ConfigError, EmptyBufferError, FieldError
from rlreplay.io._steps import episode_runs, stored_steps
from rlreplay.io.progress import progress_bar
from rlreplay.spec.schema import Field

if TYPE_CHECKING:
    from rlreplay.buffer.replay import ReplayBuffer

__all__ = ["MinariExport", "from_minari", "space_of_field", "to_minari"]

Array = np.ndarray[Any, Any]
INSTALL_HINT = "pip install 'rlreplay[minari]'"


def _minari() -> Any:
    try:
        import minari
    except ImportError as exc:  # pragma: no cover - exercised without minari installed
        raise ImportError(f"Minari datasets need minari: {INSTALL_HINT}") from exc
    return minari


def space_of_field(f: Field) -> Any:
    """A gymnasium ``Box`` holding exactly the values of field ``f`` (bounds of its dtype)."""
    from gymnasium import spaces

    dtype = f.dtype
    if dtype.kind == "b":
        return spaces.Box(0, 1, f.shape, np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return spaces.Box(info.min, info.max, f.shape, dtype)
    if dtype.kind == "f":
        return spaces.Box(-np.inf, np.inf, f.shape, dtype)
    raise FieldError(f"Minari: no gymnasium space holds a field of dtype {dtype}")


def _spaces(
    buf: ReplayBuffer, observation_space: Any, action_space: Any, action_field: str
) -> tuple[Any, Any]:
    from gymnasium import spaces

    obs_names = buf.schema.observation_names
    if observation_space is None:
        if len(obs_names) == 1:
            observation_space = space_of_field(buf.schema.fields[obs_names[0]])
        else:
            observation_space = spaces.Dict(
                {n: space_of_field(buf.schema.fields[n]) for n in obs_names}
            )
    if action_space is None:
        action_space = space_of_field(buf.schema.fields[action_field])
    return observation_space, action_space


def _episode_buffers(
    buf: ReplayBuffer, runs: list[tuple[int, int]], action_field: str, extras: tuple[str, ...]
) -> Iterator[Any]:
    """One Minari ``EpisodeBuffer`` per complete episode, built when the writer asks for it."""
    from minari.data_collector import EpisodeBuffer

    obs_names = buf.schema.observation_names
    single = len(obs_names) == 1
    for k, (first, _length) in enumerate(runs):
        ep = buf.get_episode(first)
        observations = {n: np.concatenate([ep[n], ep["next_" + n][-1:]]) for n in obs_names}
        infos = {n: np.concatenate([np.zeros_like(ep[n][:1]), ep[n]]) for n in extras}
        yield EpisodeBuffer(
            id=k,
            observations=observations[obs_names[0]] if single else observations,
            actions=ep[action_field],
            rewards=ep["reward"],
            terminations=ep["terminated"],
            truncations=ep["truncated"],
            infos=infos,
        )


def to_minari(
    buf: ReplayBuffer,
    dataset_id: str,
    *,
    observation_space: Any = None,
    action_space: Any = None,
    action_field: str = "action",
    data_format: str = "arrow",
    progress: bool | None = None,
    **metadata: Any,
) -> MinariExport:
    """Write ``buf``'s stored complete episodes as the local Minari dataset ``dataset_id``.

    Complete: every step stored and ended with a final observation (terminated or truncated);
    running, partly overwritten and abandoned episodes are skipped and counted.

    Holds the buffer's lock while it writes (other threads wait), so the episodes are a
    consistent snapshot.

    Args:
        buf: The buffer.
        dataset_id: Minari id (``namespace/name-v0``); written under ``MINARI_DATASETS_PATH``.
        observation_space: The dataset's observation space (default: from the fields).
        action_space: The dataset's action space (default: from ``action_field``).
        action_field: The field holding actions.
        data_format: Minari storage format (``"arrow"``; ``"hdf5"`` needs h5py).
        progress: Progress bar (default: when stderr is a terminal).
        **metadata: Passed to :func:`minari.create_dataset_from_buffers` (``author``,
            ``algorithm_name``, ``env``, ``description``, ...).

    Returns:
        A :class:`MinariExport` (the dataset and the counts written and skipped).

    Raises:
        FieldError: No ``action_field``, or a non-scalar reward (Minari stores one per step).
        EmptyBufferError: No complete episode is stored (the message counts the running,
            overwritten and abandoned ones).
    """
    minari = _minari()
    if action_field not in buf.schema.fields:
        raise FieldError(
            f"to_minari: no action field {action_field!r}; fields: {list(buf.schema.fields)} "
            "(name it with action_field=...)"
        )
    if buf.schema.fields["reward"].shape != ():
        raise FieldError(
            f"to_minari: Minari stores one scalar reward per step; reward has shape "
            f"{buf.schema.fields['reward'].shape}"
        )
    builtin = {"reward", "terminated", "truncated", action_field}
    extras = tuple(
        n for n in buf.schema.names if n not in builtin and not buf.schema.fields[n].observation
    )
    with buf.atomic():
        runs = episode_runs(stored_steps(buf))
        if not runs.complete:
            raise EmptyBufferError(
                f"to_minari: no complete episode is stored ({runs.incomplete} running, "
                f"{runs.overwritten} with overwritten steps, {runs.abandoned} abandoned with no "
                "final observation)"
            )
        obs_space, act_space = _spaces(buf, observation_space, action_space, action_field)
        episodes = progress_bar(
            _episode_buffers(buf, runs.complete, action_field, extras),
            len(runs.complete), "to_minari", progress,
        )  # fmt: skip
        with warnings.catch_warnings():
            # Minari's reminders to add metadata it cannot check are no problem of the data.
            for text in ("`[a-z_]+` is set to None", "env_spec is None"):
                warnings.filterwarnings("ignore", text, UserWarning)
            dataset = minari.create_dataset_from_buffers(
                dataset_id,
                episodes,
                observation_space=obs_space,
                action_space=act_space,
                data_format=data_format,
                jpeg_encoding=False,
                **metadata,
            )
    steps = sum(n for _, n in runs.complete)
    return MinariExport(
        dataset, len(runs.complete), steps, runs.incomplete, runs.overwritten, runs.abandoned
    )


def _load(dataset_or_id: Any) -> Any:
    if not isinstance(dataset_or_id, str | os.PathLike):
        return dataset_or_id
    minari = _minari()
    # download=False: only a dataset already on this machine is read.
    return minari.load_dataset(os.fspath(dataset_or_id), download=False)


def _info_fields(dataset: Any) -> dict[str, Field]:
    """Fields for the per-step infos of the dataset's first episode (arrays of one per step)."""
    for episode in dataset.iterate_episodes([int(dataset.episode_indices[0])]):
        infos = episode.infos or {}
        out = {}
        for name, values in infos.items():
            arr = np.asarray(values)
            if isinstance(values, Mapping) or arr.dtype.kind not in "biuf" or arr.ndim < 1:
                continue  # nested or non-numeric infos are not fields
            out[name] = Field(arr.shape[1:], arr.dtype)
        return out
    return {}


def from_minari(
    cls: type[ReplayBuffer],
    dataset_or_id: Any,
    *,
    capacity: int | None = None,
    infos: bool = True,
    progress: bool | None = None,
    **kwargs: Any,
) -> ReplayBuffer:
    """A new buffer of class ``cls`` holding every episode of a local Minari dataset.

    Fields come from the dataset's spaces (:meth:`rlreplay.ReplayBuffer.from_spaces`: a
    ``Dict`` observation space gives one observation field per key) and, with ``infos``, from
    its per-step numeric infos. Each episode is stored with :meth:`~rlreplay.ReplayBuffer.extend`
    (its final observation as ``next_<obs>``); an episode that ends neither terminated nor
    truncated (a dataset cut short) is stored as truncated, since a stored episode must end.

    Args:
        cls: The buffer class.
        dataset_or_id: A :class:`minari.MinariDataset` or the id of a local one.
        capacity: Buffer capacity (default: the dataset's step count, at least the minimum the
            other arguments need); a smaller one keeps the newest episodes.
        infos: Load per-step numeric infos as fields.
        progress: Progress bar (default: when stderr is a terminal).
        **kwargs: Any other constructor argument (``n_step``, ``frame_stack``, ``gamma``,
            ``seed``, ...; ``num_envs`` must be 1).

    Raises:
        ConfigError: ``num_envs`` other than 1, or infos that clash with the spaces' fields.
        FileNotFoundError: No local dataset of that id.
    """
    if kwargs.get("num_envs", 1) != 1:
        raise ConfigError("from_minari: a dataset is loaded into one env (num_envs=1)")
    dataset = _load(dataset_or_id)
    extra = _info_fields(dataset) if infos else {}
    if capacity is None:
        minimum = kwargs.get("n_step", 1) + kwargs.get("frame_stack", 1)
        capacity = max(int(dataset.total_steps), minimum)
    buf = cls.from_spaces(
        dataset.observation_space, dataset.action_space, capacity=capacity,
        extra_fields=extra, **kwargs,
    )  # fmt: skip
    obs_names = buf.schema.observation_names
    dict_obs = not (len(obs_names) == 1 and obs_names[0] == "obs")
    episodes = progress_bar(
        dataset.iterate_episodes(), int(dataset.total_episodes), "from_minari", progress
    )
    for episode in episodes:
        n = len(episode.rewards)
        if n == 0:
            continue
        obs = episode.observations
        values: dict[str, Any] = {}
        for name in obs_names:
            column = np.asarray(obs[name] if dict_obs else obs)
            values[name], values["next_" + name] = column[:n], column[1 : n + 1]
        truncated = np.asarray(episode.truncations, bool).copy()
        terminated = np.asarray(episode.terminations, bool)
        if not (terminated[-1] or truncated[-1]):
            truncated[-1] = True
        values.update(
            action=np.asarray(episode.actions)[:n],
            reward=np.asarray(episode.rewards),
            terminated=terminated,
            truncated=truncated,
        )
        for name in extra:
            values[name] = np.asarray(episode.infos[name])[1 : n + 1]
        buf.extend(**values)
    return buf
