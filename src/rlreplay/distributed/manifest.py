"""A service checkpoint's manifest: which shard files make one checkpoint, written last.

A checkpoint directory holds one core checkpoint per shard, ``shard-K-GGGGGG.rlr`` for save
generation ``G``, and ``manifest.json``. :meth:`ReplayService.save` has every shard write its
file of the new generation (each the core's atomic save), then writes the manifest through a
temporary file and a rename, and only then removes the files of older generations. A save that
dies half-way therefore leaves the previous manifest and every file it names intact; the
manifest is the commit point.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlreplay import CheckpointError, ConfigError, Field, RateLimiter
from rlreplay.distributed.shard import write_json_atomic
from rlreplay.distributed.writer import call
from rlreplay.spec import Schema

__all__ = [
    "MANIFEST",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "checked_config",
    "load_shards",
    "next_generation",
    "read_manifest",
    "remove_old_files",
    "service_arguments",
    "shard_file",
    "write_manifest",
]

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "rlreplay.ReplayService"
MANIFEST_VERSION = 1
_SHARD_FILE = re.compile(r"^shard-(\d+)-(\d{6,})\.rlr$")
_KEYS = ("format", "version", "generation", "num_shards", "capacity", "config", "service", "shards")
_SHARD_KEYS = ("file", "added", "stored", "sampleable", "bytes")


def shard_file(shard: int, generation: int) -> str:
    """The file name of shard ``shard``'s checkpoint in save generation ``generation``."""
    return f"shard-{shard}-{generation:06d}.rlr"


def next_generation(directory: Path) -> int:
    """One more than the newest generation any shard file in ``directory`` has (1 if none)."""
    newest = 0
    for path in directory.iterdir():
        m = _SHARD_FILE.match(path.name)
        if m:
            newest = max(newest, int(m.group(2)))
    return newest + 1


def write_manifest(directory: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest.json`` atomically (temporary file, fsync, rename)."""
    write_json_atomic(directory / MANIFEST, {"format": MANIFEST_FORMAT, **manifest})


def remove_old_files(directory: Path, keep: set[str]) -> None:
    """Delete shard files of other generations than the manifest's (``keep``)."""
    for path in directory.iterdir():
        if _SHARD_FILE.match(path.name) and path.name not in keep:
            path.unlink(missing_ok=True)


def _fail(directory: Path, why: str) -> CheckpointError:
    return CheckpointError(f"service checkpoint {str(directory)!r}: {why}")


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check ``manifest.json`` and the presence and sizes of the files it names.

    Returns:
        The manifest, with ``paths``: the absolute shard file paths in shard order.

    Raises:
        CheckpointError: No manifest, unreadable JSON, another format or version, missing
            keys, or a shard file that is missing or of another size than when it was saved.
    """
    d = Path(directory)
    path = d / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _fail(d, f"cannot read {MANIFEST} ({exc.strerror or exc})") from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise _fail(d, f"{MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise _fail(d, f"{MANIFEST}: expected a JSON object, got {type(manifest).__name__}")
    missing = [k for k in _KEYS if k not in manifest]
    if missing:
        raise _fail(d, f"{MANIFEST}: expected keys {list(_KEYS)}, missing {missing}")
    if manifest["format"] != MANIFEST_FORMAT:
        raise _fail(d, f"format: expected {MANIFEST_FORMAT!r}, got {manifest['format']!r}")
    if manifest["version"] != MANIFEST_VERSION:
        raise _fail(
            d, f"version: expected {MANIFEST_VERSION} (this rlreplay), got {manifest['version']!r}"
        )
    shards = manifest["shards"]
    num_shards = manifest["num_shards"]
    if not isinstance(num_shards, int) or num_shards < 1:
        raise _fail(d, f"num_shards: expected a positive int, got {num_shards!r}")
    if not isinstance(shards, list) or len(shards) != num_shards:
        got = len(shards) if isinstance(shards, list) else type(shards).__name__
        raise _fail(d, f"shards: expected {num_shards} entries, got {got}")
    paths = []
    for k, entry in enumerate(shards):
        if not isinstance(entry, dict) or any(key not in entry for key in _SHARD_KEYS):
            raise _fail(d, f"shards[{k}]: expected keys {list(_SHARD_KEYS)}, got {entry!r}")
        name = str(entry["file"])
        if Path(name).name != name or not _SHARD_FILE.match(name):
            raise _fail(d, f"shards[{k}].file: expected a shard file name, got {name!r}")
        file = d / name
        try:
            size = file.stat().st_size
        except OSError:
            raise _fail(d, f"shard {k}'s file {name!r} is missing") from None
        if size != entry["bytes"]:
            raise _fail(
                d, f"shard {k}'s file {name!r}: expected {entry['bytes']} bytes, got {size}"
            )
        paths.append(str(file.resolve()))
    manifest["paths"] = paths
    return manifest


def checked_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` if JSON can hold it.

    Raises:
        ConfigError: ``buffer_options`` JSON cannot hold (functions, ...).
    """
    try:
        json.dumps(config)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"buffer_options: a service checkpoint stores them as JSON; got {exc}"
        ) from None
    return config


def service_arguments(
    manifest: Mapping[str, Any], directory: str | os.PathLike[str]
) -> tuple[int, int, dict[str, Field], dict[str, Any]]:
    """``(num_shards, capacity, fields, keyword arguments)`` to build the saved service.

    Raises:
        CheckpointError: The saved configuration cannot be read back.
    """
    cfg = dict(manifest["config"])
    try:
        fields = Schema.from_json(cfg.pop("fields")).fields
        spec = cfg.pop("rate_limiter")
        limiter = None if spec is None else RateLimiter.from_json(spec)
        options = dict(cfg.pop("buffer_options"))
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(
            Path(directory), f"its configuration cannot be read ({type(exc).__name__}: {exc})"
        ) from None
    kwargs = dict(cfg, rate_limiter=limiter, **options)
    return int(manifest["num_shards"]), int(manifest["capacity"]), dict(fields), kwargs


def load_shards(
    ray: Any, shards: list[Any], limiter: Any, manifest: Mapping[str, Any], timeout: float | None
) -> None:
    """Load every shard's file of ``manifest`` (all at once), check their sizes against it,
    then give the limiter actor (if any) the shards' sizes and the saved counters.

    Raises:
        CheckpointError: A corrupt or foreign shard file, or one that holds other counts than
            the manifest says.
    """
    refs = [
        s.load.remote(path, int(entry["added"]))
        for s, path, entry in zip(shards, manifest["paths"], manifest["shards"], strict=True)
    ]
    loaded = call(ray, refs, timeout, "restore")
    for k, (got, entry) in enumerate(zip(loaded, manifest["shards"], strict=True)):
        _, stored, sampleable = got
        if (stored, sampleable) != (entry["stored"], entry["sampleable"]):
            raise CheckpointError(
                f"shard {k}: the manifest says {entry['stored']} stored and "
                f"{entry['sampleable']} sampleable, its file holds {stored} and {sampleable}"
            )
    if limiter is not None:
        reports = [
            limiter.report_size.remote(k, version, sampleable)
            for k, (version, _, sampleable) in enumerate(loaded)
        ]
        call(ray, reports, timeout, "restore")
        if manifest["rate_limiter"] is not None:
            call(ray, limiter.load_state_dict.remote(manifest["rate_limiter"]), timeout, "restore")
