"""Each trial's latest checkpoint, keyed by the study's trial number.

``<storage>/checkpoints/trial_<n>/epoch_<e>.pt`` holds the self-describing checkpoint
dict of :meth:`automl.train.TrainState.checkpoint` (weights, optimizer, schedule, the
config, the epoch and that epoch's metrics). The trial writes it itself: in-process
trials, rank 0 of a data-parallel group, any node (``<storage>`` is the run directory or
``output.storage_uri``, which every node reaches). Whoever runs trial ``n`` next, Tune
retrying a crashed trial, Ray Train restarting a worker group, or a resumed sweep after
its driver died, continues from :meth:`TrialCheckpoints.latest` with nothing else to
know. Only the newest file of a trial is kept.

Local folders are written to a temporary name and renamed (a kill leaves no torn file);
URIs (``s3://``, ``gs://``, ``file://``) go through ``pyarrow.fs``, whose object stores
publish a file whole when it is closed.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

_EPOCH = re.compile(r"^epoch_(\d+)\.pt$")


class TrialCheckpoints:
    """Latest checkpoint and divergence marker of each trial under ``root``.

    Args:
        root: the sweep's storage: a local folder, or a URI ``pyarrow.fs`` opens.
    """

    def __init__(self, root: str | Path):
        self.root = str(root).rstrip("/")
        self._uri = "://" in self.root

    def _fs(self):
        import pyarrow.fs

        return pyarrow.fs.FileSystem.from_uri(self.root)  # (filesystem, path)

    def folder(self, number: int | str) -> str:
        return f"{self.root}/checkpoints/trial_{number}"

    def _list(self, number) -> list[tuple[int, str]]:
        """``[(epoch, file path)]`` of trial ``number``'s checkpoint files."""
        if not self._uri:
            d = Path(self.folder(number))
            names = [p.name for p in d.iterdir()] if d.is_dir() else []
            return sorted((int(m.group(1)), str(d / n)) for n in names if (m := _EPOCH.match(n)))
        import pyarrow.fs

        fs, base = self._fs()
        sel = pyarrow.fs.FileSelector(f"{base}/checkpoints/trial_{number}", allow_not_found=True)
        return sorted((int(m.group(1)), info.path) for info in fs.get_file_info(sel)
                      if (m := _EPOCH.match(info.base_name)))

    def save(self, number: int | str, checkpoint: dict[str, Any]) -> str:
        """Write ``checkpoint`` (``TrainState.checkpoint`` dict, its ``epoch`` names the
        file) as trial ``number``'s latest and delete its older files. Returns the path."""
        import torch

        old = self._list(number)
        name = f"epoch_{int(checkpoint['epoch']):04d}.pt"
        if not self._uri:
            d = Path(self.folder(number))
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{name}.{os.getpid()}.tmp"
            torch.save(checkpoint, tmp)
            os.replace(tmp, d / name)
            path = str(d / name)
            for _, p in old:
                if p != path:
                    Path(p).unlink(missing_ok=True)
            return path
        fs, base = self._fs()
        path = f"{base}/checkpoints/trial_{number}/{name}"
        fs.create_dir(f"{base}/checkpoints/trial_{number}", recursive=True)
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        with fs.open_output_stream(path) as f:
            f.write(buf.getvalue())
        for _, p in old:
            if p != path:
                fs.delete_file(p)
        return path

    def latest(self, number: int | str, device: str = "cpu") -> dict[str, Any] | None:
        """Trial ``number``'s newest checkpoint dict (loaded with ``weights_only=True``),
        or None when it has none."""
        import torch

        files = self._list(number)
        if not files:
            return None
        path = files[-1][1]
        if not self._uri:
            return torch.load(path, map_location=device, weights_only=True)
        fs, _ = self._fs()
        with fs.open_input_file(path) as f:
            data = f.read()
        return torch.load(io.BytesIO(data), map_location=device, weights_only=True)

    # -- a diverged trial stays diverged ----------------------------------------------------
    def _marker(self) -> str:
        return "diverged.txt"

    def mark_diverged(self, number: int | str, epoch: int, reason: str) -> None:
        """Record that trial ``number`` diverged (a retry fails at once instead of
        training again)."""
        text = f"{epoch}\t{reason}"
        if not self._uri:
            d = Path(self.folder(number))
            d.mkdir(parents=True, exist_ok=True)
            (d / self._marker()).write_text(text)
            return
        fs, base = self._fs()
        fs.create_dir(f"{base}/checkpoints/trial_{number}", recursive=True)
        with fs.open_output_stream(f"{base}/checkpoints/trial_{number}/{self._marker()}") as f:
            f.write(text.encode())

    def diverged(self, number: int | str) -> tuple[int, str] | None:
        """``(epoch, reason)`` when trial ``number`` was marked diverged, else None."""
        if not self._uri:
            p = Path(self.folder(number)) / self._marker()
            if not p.is_file():
                return None
            text = p.read_text()
        else:
            import pyarrow.fs

            fs, base = self._fs()
            path = f"{base}/checkpoints/trial_{number}/{self._marker()}"
            if fs.get_file_info(path).type == pyarrow.fs.FileType.NotFound:
                return None
            with fs.open_input_file(path) as f:
                text = f.read().decode()
        epoch, reason = text.split("\t", 1)
        return int(epoch), reason
