"""The one JSON sanitizer."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from accel.jsonable import jsonable


class Color(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: float
    y: tuple[int, int]


class Cfg(BaseModel):
    n: int = 2


def test_plain_forms():
    value = {
        1: (Color.RED, Path("/a/b")),
        "p": Point(1.5, (2, 3)),
        "cfg": Cfg(),
        "np": np.float32(0.5),
        "arr": np.arange(3),
        "obj": object,
    }
    out = jsonable(value)
    assert out["1"] == ["red", "/a/b"]
    assert out["p"] == {"x": 1.5, "y": [2, 3]}
    assert out["cfg"] == {"n": 2} and out["np"] == 0.5 and out["arr"] == [0, 1, 2]
    assert out["obj"] == str(object)
    json.dumps(out)


def test_nonfinite_modes():
    v = {"a": [math.nan, math.inf, -math.inf, 1.0]}
    assert math.isnan(jsonable(v)["a"][0])
    assert jsonable(v, "null")["a"] == [None, None, None, 1.0]
    assert jsonable(v, "string")["a"] == ["NaN", "Infinity", "-Infinity", 1.0]


def test_big_arrays_and_deep_nesting_stay_small():
    assert isinstance(jsonable(np.zeros(100_000)), str)
    deep: list = []
    cur = deep
    for _ in range(500):
        cur.append([])
        cur = cur[0]
    json.dumps(jsonable(deep))
