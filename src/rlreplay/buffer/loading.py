"""Loading a checkpoint file: :func:`rlreplay.load`.

The file (:mod:`rlreplay.checkpoint.file`) names the buffer's class and holds its
configuration, the scalars of its state and its arrays. :func:`load` finds the class among
:class:`ReplayBuffer` and its subclasses, builds a buffer of the file's configuration (with the
caller's overrides), streams the arrays straight into its parts' arrays and checks the result
as ``load_state_dict`` does. A refused file leaves no live buffer.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlreplay.buffer.replay import ReplayBuffer
from rlreplay.checkpoint.file import CheckpointReader
from rlreplay.errors import CheckpointError, ConfigError
from rlreplay.limits import RateLimiter
from rlreplay.sampling.registry import sampler_from_config
from rlreplay.spec import arguments
from rlreplay.spec.schema import Schema

__all__ = ["load"]

Array = np.ndarray[Any, Any]


def from_checkpoint(
    cls: type[ReplayBuffer], reader: CheckpointReader, overrides: dict[str, Any]
) -> ReplayBuffer:
    """A new ``cls`` holding the checkpoint ``reader`` reads (``overrides``: constructor
    arguments that are not data)."""
    meta = reader.meta
    config = dict(meta["config"])
    config["fields"] = Schema.from_json(config["fields"]).fields
    reader.require_data_only(config)
    if "rate_limiter" in config:  # its parameters (counters: in the state)
        config["rate_limiter"] = RateLimiter.from_json(config["rate_limiter"])
    if "as_" in overrides:  # another format: the file's device was for the file's format
        overrides.setdefault("device", None)
    if "sampler" in config:  # a sampler given to the constructor: a new one like it
        config["sampler"] = sampler_from_config(config["sampler"])
    config.update(overrides)
    capacity = config.pop("capacity")
    fields = config.pop("fields")
    # Nothing is allocated for counts the file could not hold (24: a slot's index row).
    obs_bytes = sum(f.nbytes for f in fields.values() if f.observation)
    for what, count, item_bytes in (
        ("capacity", capacity, 24 + sum(f.nbytes for f in fields.values())),
        ("finals_capacity", meta["state"]["finals_capacity"], 16 + obs_bytes),
    ):
        if reader.version < 2:  # every slot is in the file
            reader.require_fit(what, count, item_bytes)
        else:  # only stored rows are: the configuration sizes the buffer, as a constructor's
            _require_budget(reader, what, count, item_bytes)
    buf = cls(capacity, fields, **config)
    try:  # a refused file leaves no live buffer: a memmap directory is free again
        buf._state.load_meta(meta["state"])
        # Format 1 holds every array whole; format 2 only the rows that hold data.
        reader.read_into(buf._state.file_destination(reader.version))
        missing = set(buf._state.arrays()) - {e["name"] for e in reader.table}
        if missing:
            raise CheckpointError(f"checkpoint: arrays {sorted(missing)} are missing")
        buf._state.after_load()
        kept = {k: v for k, v in meta["config"].items() if k not in overrides}
        reader.require_same("configuration", kept, {k: buf._config().get(k) for k in kept})
        state = dict(meta["state"])
        if "rate_limiter" in overrides:  # starts afresh unless it has the saved parameters
            state.pop("rate_limiter", None)
        reader.require_same("state", state, buf._state.meta())
        return buf
    except BaseException:
        buf._backend.close()  # (not buf.close(): a rate_limiter= override stays usable)
        raise


def _require_budget(reader: CheckpointReader, what: str, count: Any, item_bytes: int) -> None:
    """Refuse a count of a format-2 header whose items would not fit the size budget (the
    machine's memory, :func:`rlreplay.spec.size_budget`) before anything is allocated."""
    where = f"checkpoint {str(reader.path)!r}"
    if type(count) is not int or count < 0:
        raise CheckpointError(f"{where}: {what} must be an integer >= 0; got {count!r}")
    if count * item_bytes > arguments.SIZE_BUDGET:
        raise CheckpointError(
            f"{where}: {what} {count} would take {count * item_bytes} bytes, more than the size "
            f"budget ({arguments.SIZE_BUDGET} bytes, rlreplay.spec.size_budget())"
        )


def load(
    path: str | os.PathLike[str], /, *, progress: bool | None = None, **overrides: Any
) -> ReplayBuffer:
    """Load a checkpoint written by :meth:`ReplayBuffer.save`.

    Args:
        path: The checkpoint file (positional: ``path=`` is the memmap directory override).
        progress: A tqdm bar (default: over 64 MiB of arrays, when stderr is a terminal).
        **overrides: Constructor arguments that are not data: ``storage``/``path`` to load
            into a memmap buffer (streamed, no copy in RAM), functions such as transforms,
            or the default output (``as_``, ``device``). ``storage="torch"`` (with
            ``device``, ``finals_per_env``, ``seed``) loads into a device buffer instead:
            :func:`rlreplay.torch.load`.

    Raises:
        CheckpointError: Missing, truncated, corrupted or unknown checkpoint.
        ConfigError: ``storage="torch"`` with an override the device buffer does not take.
    """
    if isinstance(overrides.get("storage"), str) and overrides["storage"] == "torch":
        device_kwargs = {k: v for k, v in overrides.items() if k != "storage"}
        unknown = sorted(set(device_kwargs) - {"device", "finals_per_env", "seed"})
        if unknown:
            raise ConfigError(
                f"{unknown[0]}: storage='torch' loads into a device buffer, which takes "
                f"device, finals_per_env and seed; got {unknown}"
            )
        from rlreplay.torch import load as load_on_device

        device_kwargs.setdefault("device", "cpu")
        return load_on_device(path, **device_kwargs)  # type: ignore[return-value]
    reader = CheckpointReader(path, progress=progress)
    with reader.loading():  # any error of a hostile file's contents is a CheckpointError
        name = reader.meta.get("class")
        cls = ReplayBuffer if name == "ReplayBuffer" else ReplayBuffer._registry.get(str(name))
        if cls is None:
            raise CheckpointError(f"checkpoint {str(path)!r}: unknown buffer class {name!r}")
        return from_checkpoint(cls, reader, overrides)
