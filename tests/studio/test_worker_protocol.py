"""The JSON-lines worker protocol: typed messages, versions, NaN, bad lines."""

from __future__ import annotations

import io
import json
import threading

import pytest

from studio.workers.protocol import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    Cancel,
    Done,
    EventMessage,
    JobSpec,
    MessageWriter,
    ProtocolError,
    decode,
)


def test_every_message_round_trips_with_envelope():
    msgs = [
        JobSpec(
            job_id="j",
            kind="run_recipe",
            params={"recipe": {"a": 1}},
            plugins=["m"],
            device="cuda:0",
        ),
        Cancel(job_id="j", seq=3, reason="user"),
        EventMessage(job_id="j", seq=4, event={"event": "progress", "index": 0, "fraction": 0.5}),
        Done(job_id="j", seq=5, status="failed", error="x", error_type="E", traceback="tb"),
    ]
    for m in msgs:
        line = m.to_line()
        assert line.endswith("\n") and "\n" not in line[:-1]
        d = json.loads(line)
        assert {"type", "job_id", "seq", "protocol_version"} <= set(d)
        assert d["protocol_version"] == PROTOCOL_VERSION
        assert decode(line) == m
    assert set(MESSAGE_TYPES) == {"job", "cancel", "hello", "event", "log", "done"}


def test_nan_is_sent_as_valid_json():
    line = EventMessage(
        job_id="j", event={"metrics": {"a": float("nan"), "b": float("inf")}}
    ).to_line()
    assert "NaN" in line
    d = json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert d["event"]["metrics"] == {"a": "NaN", "b": "Infinity"}


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "no 'type'"),
        ('{"type": "event", "job_id": "j", "seq": 0, "protocol_version": 99}', "version 99"),
        (
            '{"type": "teleport", "job_id": "j", "seq": 0, "protocol_version": 1}',
            "unknown message type",
        ),
    ],
)
def test_bad_lines_raise_protocol_error(line, match):
    with pytest.raises(ProtocolError, match=match):
        decode(line)


def test_writer_numbers_messages_across_threads():
    buf = io.StringIO()
    w = MessageWriter(buf, job_id="j")

    def send_many():
        for _ in range(200):
            w.send(EventMessage, event={"event": "log"})

    threads = [threading.Thread(target=send_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [decode(line).seq for line in buf.getvalue().splitlines()]
    assert sorted(seqs) == list(range(800))  # every line whole, every seq once
