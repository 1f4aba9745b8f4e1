"""The JSON-lines protocol between the pool (parent) and a worker process.

One message per line, UTF-8 JSON, each with ``type``, ``job_id``, ``seq`` (per
sender, from 0) and ``protocol_version``. Only JSON and file paths cross the
boundary: never tensors, models or pickles.

Parent -> worker (stdin):  ``job`` (a JobSpec), then optionally ``cancel``.
Worker -> parent (stdout): ``hello``, then ``event`` (runner events, as
``accel.events`` ``to_dict()``), ``log``, and last ``done`` (status, result or error).
Anything else the worker prints goes to stderr, which the pool keeps as a log tail.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

PROTOCOL_VERSION = 1


class ProtocolError(ValueError):
    """A line that is not a message of this protocol (or of another version)."""


@dataclass(frozen=True)
class Message:
    type: ClassVar[str] = "message"
    job_id: str
    seq: int = 0
    protocol_version: int = PROTOCOL_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["type"] = self.type
        return d

    def to_line(self) -> str:
        return json.dumps(_finite(self.to_dict()), separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class JobSpec(Message):
    """What a worker must do: ``kind`` names a declared job (``accel.job_registry``)."""

    type: ClassVar[str] = "job"
    kind: str = "run_recipe"
    params: dict[str, Any] = field(default_factory=dict)
    # Modules (dotted names or .py file paths) imported before the job runs: extra passes
    # or jobs, e.g. the fault-injection passes of the tests.
    plugins: list[str] = field(default_factory=list)
    # Device as the worker sees it ("cpu", "cuda:0"): the pool sets CUDA_VISIBLE_DEVICES.
    device: str = "cpu"
    log_level: str = "INFO"


@dataclass(frozen=True)
class Cancel(Message):
    type: ClassVar[str] = "cancel"
    reason: str = ""


@dataclass(frozen=True)
class Hello(Message):
    type: ClassVar[str] = "hello"
    pid: int = 0
    python: str = ""


@dataclass(frozen=True)
class EventMessage(Message):
    """One runner / job event (``accel.events`` dict form, or any JSON dict)."""

    type: ClassVar[str] = "event"
    event: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogMessage(Message):
    type: ClassVar[str] = "log"
    level: str = "info"
    logger: str = ""
    message: str = ""


@dataclass(frozen=True)
class Done(Message):
    """The job ended: ``status`` is succeeded, failed or cancelled."""

    type: ClassVar[str] = "done"
    status: str = "succeeded"
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    error_type: str = ""
    traceback: str = ""


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.type: cls for cls in (JobSpec, Cancel, Hello, EventMessage, LogMessage, Done)
}


def _finite(obj: Any) -> Any:
    # json.dumps would write NaN, which is not JSON; send it as a string the store knows.
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def decode(line: str | bytes) -> Message:
    """Parse one line into its message; raises ProtocolError on anything else."""
    try:
        d = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {line[:200]!r}") from exc
    if not isinstance(d, dict) or "type" not in d:
        raise ProtocolError(f"not a message (no 'type'): {str(line)[:200]!r}")
    version = d.get("protocol_version")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {version!r} is not {PROTOCOL_VERSION}: the worker and the "
            "studio come from different installs"
        )
    cls = MESSAGE_TYPES.get(d["type"])
    if cls is None:
        raise ProtocolError(f"unknown message type {d['type']!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


class MessageWriter:
    """Writes messages of one job to a stream, numbering them; thread-safe."""

    def __init__(self, stream: IO[str], job_id: str = "") -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._seq = 0
        self.job_id = job_id

    def send(self, cls: type[Message], **fields: Any) -> Message:
        with self._lock:
            msg = cls(job_id=self.job_id, seq=self._seq, **fields)
            self._seq += 1
            self._stream.write(msg.to_line())
            self._stream.flush()
            return msg
