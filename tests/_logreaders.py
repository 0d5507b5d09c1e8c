"""Readers for the binary logs tracking writes, for tests.

* W&B offline runs (``run-<id>.wandb``): W&B's transaction log is LevelDB's log format
  (32 KiB blocks of records with a 7-byte header) behind a 7-byte ``:W&B`` header;
  each record is a ``wandb.proto.wandb_internal_pb2.Record`` (W&B's own schema). wandb
  0.31 ships no Python reader (its ``datastore`` module is gone; the Go core reads it).
* TensorBoard event files: TFRecord framing (8-byte length, 4-byte CRC, data, 4-byte
  CRC) around ``tensorboardX.proto.event_pb2.Event`` messages.
"""

from __future__ import annotations

import json
import struct
import time
from collections import defaultdict
from pathlib import Path

_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: str | Path):
    """Yield the ``Record`` protobufs of one ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # block trailer too short for a header: padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if pos + 7 + length > len(data):  # a record still being written
            return
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == _FULL:
            payload = chunk
        elif kind == _FIRST:
            pending = chunk
            continue
        elif kind == _MIDDLE:
            pending += chunk
            continue
        elif kind == _LAST:
            payload, pending = pending + chunk, b""
        else:  # zero padding
            continue
        record = pb.Record()
        record.ParseFromString(payload)
        yield record


def read_wandb_run(run_folder: str | Path, timeout: float = 30.0) -> dict:
    """One offline run folder as ``{"id", "group", "project", "name", "config", "history"
    (one dict per logged step), "summary", "artifacts" ([{"name", "aliases"}]),
    "records" (record kinds in order)}``.

    W&B's service writes the log asynchronously, so a run finished a moment ago may not
    have its ``exit`` record on disk yet: wait for it up to ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        run = _read_wandb_run(run_folder)
        if "exit" in run["records"] or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def _read_wandb_run(run_folder: str | Path) -> dict:
    (log,) = Path(run_folder).glob("run-*.wandb")
    out: dict = {"history": [], "summary": {}, "artifacts": [], "config": {}, "records": []}
    for r in wandb_records(log):
        kind = r.WhichOneof("record_type")
        out["records"].append(kind)
        if kind == "run":
            out.update(id=r.run.run_id, group=r.run.run_group, project=r.run.project,
                       name=r.run.display_name)
            out["config"].update({u.key: json.loads(u.value_json) for u in r.run.config.update})
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in r.history.item})
        elif kind == "summary":
            out["summary"].update({u.key: json.loads(u.value_json)
                                   for u in r.summary.update if u.key})
        elif kind == "artifact":
            out["artifacts"].append({"name": r.artifact.name, "type": r.artifact.type,
                                     "aliases": list(r.artifact.aliases)})
    return out


def wandb_runs(wandb_dir: str | Path) -> dict[str, list[dict]]:
    """Every offline run folder under ``wandb_dir``, grouped by run id (a resumed run
    has one folder per resumption), oldest first."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for folder in sorted(Path(wandb_dir).glob("offline-run-*")):
        run = read_wandb_run(folder)
        assert "id" in run, f"{folder}: no run record in {run['records']}"
        runs[run["id"]].append(run)
    return dict(runs)


def tfevents_scalars(path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of a TensorBoard event file."""
    from tensorboardX.proto import event_pb2

    data = Path(path).read_bytes()
    pos, out = 0, defaultdict(list)
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        payload = data[pos + 12:pos + 12 + length]
        pos += 12 + length + 4
        event = event_pb2.Event.FromString(payload)
        for v in event.summary.value:
            out[v.tag].append((event.step, v.simple_value))
    return dict(out)
