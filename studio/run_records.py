"""Run records kept in a file when the database could not save a run (``unrecorded_run.json``),
and the checks that let ``studio import-run`` restore exactly such a run and nothing else.

The pool writes the record (``studio.workers.dispatch.save_unrecorded``) and signs it with a
key of this installation (HMAC-SHA256, the key in the user data folder, readable by its owner
only). Importing checks, before the database is touched:

- the signature: the record was written by this studio installation, not by hand;
- the record's run id, and that its events belong to it (a run_started first; the folder it
  names is the folder the file sits in);
- for a run recorded as succeeded: its run_finished event, and every finished step's folder
  with its outputs and the artifacts it lists, each matching its sha256.

Each failure is a ``RecordError`` whose message says what does not match.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMAT = "accel-studio-unrecorded-run/1"
FILE_NAME = "unrecorded_run.json"
KEY_FILE = "run-records.key"
SIGNATURE = "signature"
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


class RecordError(ValueError):
    """A run record that cannot be imported; the message says why."""


def _key_path() -> Path:
    from studio.paths import data_dir

    return data_dir() / KEY_FILE


def record_key(*, create: bool = True) -> bytes | None:
    """This installation's signing key (made on first use, owner-only); None when it cannot
    be read or made."""
    path = _key_path()
    with contextlib.suppress(OSError):
        return bytes.fromhex(path.read_text().strip())
    if not create:
        return None
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it meanwhile
        return record_key(create=False)
    except OSError:
        return None
    with os.fdopen(fd, "w") as f:
        f.write(key.hex())
    return key


def _digest(record: Mapping[str, Any], key: bytes) -> str:
    body = {k: v for k, v in record.items() if k != SIGNATURE}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def sign(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with this installation's signature (unsigned when there is no key)."""
    key = record_key()
    if key is not None:
        record[SIGNATURE] = _digest(record, key)
    return record


def _check_signature(record: Mapping[str, Any]) -> None:
    key = record_key(create=False)
    given = record.get(SIGNATURE)
    if (
        key is None
        or not isinstance(given, str)
        or not hmac.compare_digest(given, _digest(record, key))
    ):
        raise RecordError(
            "this run record was not written by this studio installation (its signature is "
            "missing or does not match), so it is not imported: a record is only proof of a "
            "run when the studio that ran it wrote it"
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_events(record: Mapping[str, Any], path: Path) -> list[Mapping[str, Any]]:
    events = [
        e
        for e in record.get("events") or []
        if isinstance(e, Mapping) and e.get("event") not in ("progress", "log")
    ]
    if not events or events[0].get("event") != "run_started":
        raise RecordError("the record's events do not start with the run's start")
    run_dir = Path(str(events[0].get("run_dir") or ""))
    if path.name == FILE_NAME and run_dir.resolve() != path.parent.resolve():
        raise RecordError(
            f"the record names the run folder {run_dir}, but it lies in {path.parent}"
        )
    return events


def _check_steps(events: list[Mapping[str, Any]]) -> None:
    run_dir = Path(str(events[0].get("run_dir") or ""))
    finished = [e for e in events if e.get("event") == "run_finished"]
    if not finished or finished[-1].get("status") != "succeeded":
        raise RecordError("the record says succeeded but holds no finished run")
    if not float(finished[-1].get("duration_s") or 0) > 0:
        raise RecordError("the record says succeeded but its run took no time")
    for e in events:
        if e.get("event") != "step_finished" or e.get("status") not in ("succeeded", "gate_failed"):
            continue
        step_dir = run_dir / f"step_{int(e['index']):02d}_{e.get('pass_name')}"
        if not (step_dir / "outputs.pt").is_file():
            raise RecordError(f"step {int(e['index']) + 1}'s outputs are missing ({step_dir})")
        for art in e.get("artifacts") or []:
            p = Path(str(art.get("path", "")))
            p = (p if p.is_absolute() else run_dir / p).resolve()
            if not p.is_relative_to(run_dir.resolve()):
                raise RecordError(f"artifact {p} lies outside the run folder {run_dir}")
            want = str(art.get("sha256") or "")
            if not p.is_file() or (want and _sha256(p) != want):
                raise RecordError(f"artifact {p} is missing or differs from the one recorded")


def check_unrecorded(record: Mapping[str, Any], path: Path) -> str:
    """Raise RecordError unless ``record`` (read from ``path``) is a run record this studio
    wrote for a run whose files are still there as recorded. Returns the run id."""
    if record.get("format") != FORMAT:
        raise RecordError(f"not an unrecorded-run file (format {FORMAT})")
    _check_signature(record)
    run_id = str((record.get("run") or {}).get("run_id") or "")
    if not _RUN_ID.match(run_id):
        raise RecordError(f"the record's run id {run_id!r} is not a run id")
    events = _check_events(record, path)
    if record.get("status") == "succeeded":
        _check_steps(events)
    return run_id
