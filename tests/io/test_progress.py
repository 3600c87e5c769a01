"""Progress bars on save and load (tqdm, lazy): when they show, what they count, without tqdm."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import rlreplay as rr
from rlreplay.checkpoint.file import CheckpointReader
from rlreplay.io import progress as pg
from tests.io.conftest import FIELDS, Buffer, PBuffer, fill


class Recorder:
    """Stands in for tqdm: records every bar made, its total and what it counted."""

    bars: ClassVar[list[Recorder]] = []

    def __init__(self, *, total: int, desc: str, **kwargs: Any) -> None:
        self.total, self.desc, self.n, self.closed = total, desc, 0, False
        Recorder.bars.append(self)

    def update(self, n: int) -> None:
        assert not self.closed
        self.n += n

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[Recorder]:
    Recorder.bars.clear()
    monkeypatch.setattr(pg, "_tqdm", lambda progress: Recorder)
    return Recorder.bars


def terminal(monkeypatch: pytest.MonkeyPatch, tty: bool) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)


@pytest.mark.parametrize("cls", [Buffer, PBuffer])
def test_bars_count_every_byte_of_the_data(cls: type, tmp_path: Path, bars: list[Recorder]) -> None:
    buf = cls(100, FIELDS, n_step=2, seed=0)
    fill(buf, 40, seed=3)
    path = tmp_path / "b.ckpt"
    buf.save(path, progress=True)
    again = rr.load(path, progress=True)
    size = CheckpointReader(path).data_size
    assert [(b.desc, b.total, b.n, b.closed) for b in bars] == [
        ("save b.ckpt", size, size, True),
        ("load b.ckpt", size, size, True),
    ]
    np.testing.assert_array_equal(again.sample(4).obs, buf.sample(4).obs)


def test_default_shows_only_large_checkpoints_on_a_terminal(
    tmp_path: Path, bars: list[Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    buf = Buffer(100, FIELDS, seed=0)
    fill(buf, 20, seed=0)
    path = tmp_path / "b.ckpt"
    buf.save(path, progress=False)
    size = CheckpointReader(path).data_size
    for tty, large, progress, shown in [
        (True, size + 1, None, False),  # small
        (True, 1, None, True),  # large, on a terminal
        (False, 1, None, False),  # large, stderr redirected
        (True, 1, False, False),  # asked not to
        (False, size + 1, True, True),  # asked to
    ]:
        terminal(monkeypatch, tty)
        monkeypatch.setattr(pg, "LARGE_BYTES", large)
        bars.clear()
        buf.save(path, progress=progress)
        rr.load(path, progress=progress)
        assert len(bars) == (2 if shown else 0), (tty, large, progress)


def test_a_real_bar_goes_to_stderr(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("tqdm")
    buf = Buffer(100, FIELDS, seed=0)
    fill(buf, 20, seed=0)
    buf.save(tmp_path / "b.ckpt", progress=True)
    rr.load(tmp_path / "b.ckpt", progress=True)
    err = capsys.readouterr().err
    assert "save b.ckpt" in err and "load b.ckpt" in err


def test_without_tqdm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # any import of tqdm now raises ImportError
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    terminal(monkeypatch, True)
    monkeypatch.setattr(pg, "LARGE_BYTES", 1)
    buf = Buffer(100, FIELDS, seed=0)
    fill(buf, 20, seed=0)
    path = tmp_path / "b.ckpt"
    buf.save(path)  # the default: no bar, no error
    assert rr.load(path).sample(2).obs.shape == (2, 3)
    with pytest.raises(ImportError, match="progress=True needs tqdm"):
        buf.save(tmp_path / "other.ckpt", progress=True)
    assert list(tmp_path.iterdir()) == [path]  # nothing written, no temporary left
    with pytest.raises(ImportError, match="progress=True needs tqdm"):
        rr.load(path, progress=True)


def test_tqdm_is_not_imported_by_saving_and_loading() -> None:
    code = (
        "import sys, numpy as np, rlreplay as rr, tempfile, os\n"
        "buf = rr.ReplayBuffer(64, {'obs': rr.Field((2,), np.float32)})\n"
        "buf.add(obs=[0, 1], reward=1.0, terminated=True, truncated=False, next_obs=[1, 2])\n"
        "p = os.path.join(tempfile.mkdtemp(), 'b.ckpt')\n"
        "buf.save(p); rr.load(p)\n"
        "assert 'tqdm' not in sys.modules, 'tqdm imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
