"""Input specifications: names, shapes with symbolic dims, dtypes, value ranges.

Compact form, one tensor per ``;``-separated part, then optional dim definitions::

    x:float32[batch,3,224,224]
    input_ids:int64[batch,seq]{0..30522}; batch=1..32:1; seq=1..512:128

``{low..high}`` is the value range of integer inputs (token ids; high exclusive);
``name=min..max:default`` (or ``name=default``) defines a symbolic dim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import InputSpecError

if TYPE_CHECKING:
    import torch

DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}
# Defaults for well-known symbolic dims; anything else defaults to 1..64, default 1.
_KNOWN_DIMS = {
    "batch": (1, 1, 64),
    "seq": (32, 1, 512),
    "sequence": (32, 1, 512),
    "height": (224, 8, 2048),
    "width": (224, 8, 2048),
}
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-/]*"


def normalize_dtype(name: str) -> str:
    """Canonical dtype name (``float32``...), or raise InputSpecError."""
    key = str(name).strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in DTYPES:
        raise InputSpecError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    return key


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return getattr(torch, normalize_dtype(name))


def is_floating(dtype: str) -> bool:
    return normalize_dtype(dtype) in ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class Dim:
    """A symbolic dimension with its range (inclusive) and default value."""

    default: int
    min: int = 1
    max: int = 64

    def __post_init__(self) -> None:
        if not (self.min <= self.default <= self.max):
            raise InputSpecError(
                f"dim default {self.default} is outside its range {self.min}..{self.max}"
            )


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: float | None = None
    high: float | None = None

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        rng = ""
        if self.low is not None and self.high is not None:
            rng = "{" + f"{_num(self.low)}..{_num(self.high)}" + "}"
        return f"{self.name}:{self.dtype}[{dims}]{rng}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


@dataclass(frozen=True)
class InputSpec:
    """The inputs a model takes, in call order."""

    inputs: tuple[TensorSpec, ...]
    dims: Mapping[str, Dim] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.inputs:
            raise InputSpecError(
                "an input spec needs at least one tensor, e.g. 'x:float32[batch,16]'"
            )
        names = [t.name for t in self.inputs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise InputSpecError(f"input names must be unique; repeated: {', '.join(sorted(dup))}")
        dims = dict(self.dims)
        for t in self.inputs:
            for d in t.shape:
                if isinstance(d, str) and d not in dims:
                    default, lo, hi = _KNOWN_DIMS.get(d, (1, 1, 64))
                    dims[d] = Dim(default, lo, hi)
                elif isinstance(d, int) and d < 0:
                    raise InputSpecError(f"{t.name}: negative dimension {d}")
        object.__setattr__(self, "dims", dims)

    # -- parsing -------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> InputSpec:
        """Parse the compact form; errors point at the bad part."""
        if not isinstance(text, str) or not text.strip():
            raise InputSpecError("empty input spec; expected e.g. 'x:float32[batch,3,224,224]'")
        tensors: list[TensorSpec] = []
        dims: dict[str, Dim] = {}
        pos = 0
        for part in text.split(";"):
            start = pos + len(part) - len(part.lstrip())
            pos += len(part) + 1
            part = part.strip()
            if not part:
                continue
            m_dim = re.fullmatch(
                rf"({_NAME})\s*=\s*(\d+)(?:\s*\.\.\s*(\d+))?(?:\s*:\s*(\d+))?", part
            )
            if m_dim:
                name, a, b, c = m_dim.groups()
                if b is None:  # name=default
                    default = int(a)
                    base = _KNOWN_DIMS.get(name, (1, 1, 64))
                    dims[name] = Dim(default, min(base[1], default), max(base[2], default))
                else:
                    lo, hi = int(a), int(b)
                    default = int(c) if c is not None else lo
                    try:
                        dims[name] = Dim(default, lo, hi)
                    except InputSpecError as exc:
                        raise InputSpecError(_point(text, start, f"dim {name!r}: {exc}")) from None
                continue
            m = re.fullmatch(
                rf"({_NAME})\s*:\s*([A-Za-z0-9_()]+)\s*\[([^\]]*)\]\s*(?:\{{\s*(-?[\d.]+)\s*\.\.\s*(-?[\d.]+)\s*\}})?",
                part,
            )
            if not m:
                raise InputSpecError(
                    _point(
                        text,
                        start,
                        f"cannot read {part!r}: expected NAME:DTYPE[DIMS] such as "
                        "'x:float32[batch,3,224,224]' or a dim definition 'batch=1..32:8'",
                    )
                )
            name, dtype, shape_s, low, high = m.groups()
            try:
                dtype = normalize_dtype(dtype)
            except InputSpecError as exc:
                raise InputSpecError(_point(text, start + part.index(":") + 1, str(exc))) from None
            shape: list[int | str] = []
            for d in (s.strip() for s in shape_s.split(",")) if shape_s.strip() else []:
                if re.fullmatch(r"\d+", d):
                    shape.append(int(d))
                elif re.fullmatch(_NAME, d):
                    shape.append(d)
                else:
                    raise InputSpecError(
                        _point(
                            text,
                            start + part.index("["),
                            f"{name}: bad dimension {d!r}; use a positive integer or a name like 'batch'",
                        )
                    )
            lo = float(low) if low is not None else None
            hi = float(high) if high is not None else None
            if lo is not None and hi is not None and hi <= lo:
                raise InputSpecError(
                    _point(text, start, f"{name}: empty value range {low}..{high}")
                )
            tensors.append(TensorSpec(name, tuple(shape), dtype, lo, hi))
        if not tensors:
            raise InputSpecError("no tensors in input spec; expected e.g. 'x:float32[batch,16]'")
        return cls(tuple(tensors), dims)

    @classmethod
    def coerce(cls, value: InputSpec | str | Mapping[str, Any] | None) -> InputSpec | None:
        if value is None or isinstance(value, InputSpec):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise InputSpecError(f"cannot read an input spec from {type(value).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": [
                {
                    "name": t.name,
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "low": t.low,
                    "high": t.high,
                }
                for t in self.inputs
            ],
            "dims": {
                k: {"default": d.default, "min": d.min, "max": d.max} for k, d in self.dims.items()
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InputSpec:
        try:
            inputs = tuple(
                TensorSpec(
                    str(t["name"]),
                    tuple(
                        int(s) if isinstance(s, int) or str(s).isdigit() else str(s)
                        for s in t["shape"]
                    ),
                    normalize_dtype(t.get("dtype", "float32")),
                    t.get("low"),
                    t.get("high"),
                )
                for t in d["inputs"]
            )
            dims = {
                k: Dim(int(v["default"]), int(v.get("min", 1)), int(v.get("max", 64)))
                for k, v in d.get("dims", {}).items()
            }
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InputSpecError):
                raise
            raise InputSpecError(
                f"malformed input spec mapping ({exc}); expected {{inputs: [{{name, shape, dtype}}], dims: {{...}}}}"
            ) from None
        return cls(inputs, dims)

    def __str__(self) -> str:
        parts = [str(t) for t in self.inputs]
        for name, d in self.dims.items():
            parts.append(f"{name}={d.min}..{d.max}:{d.default}")
        return "; ".join(parts)

    # -- queries -------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [t.name for t in self.inputs]

    def dynamic_dims(self) -> list[str]:
        return list(self.dims)

    def concrete_shape(
        self, t: TensorSpec, dims: Mapping[str, int] | None = None
    ) -> tuple[int, ...]:
        dims = dict(dims or {})
        out = []
        for d in t.shape:
            if isinstance(d, str):
                v = dims.get(d, self.dims[d].default)
                out.append(int(v))
            else:
                out.append(d)
        return tuple(out)

    def with_dims(self, **defaults: int) -> InputSpec:
        """A copy whose symbolic dims default to the given values."""
        dims = dict(self.dims)
        for k, v in defaults.items():
            if k not in dims:
                raise InputSpecError(
                    f"no symbolic dim {k!r}; the spec has {', '.join(dims) or 'none'}"
                )
            d = dims[k]
            dims[k] = Dim(int(v), min(d.min, int(v)), max(d.max, int(v)))
        return InputSpec(self.inputs, dims)

    # -- data ----------------------------------------------------------------------------
    def sample(
        self, seed: int = 0, dims: Mapping[str, int] | None = None
    ) -> dict[str, torch.Tensor]:
        """Deterministic sample inputs (same seed, same tensors)."""
        import torch

        gen = torch.Generator().manual_seed(seed)
        out: dict[str, torch.Tensor] = {}
        for t in self.inputs:
            shape = self.concrete_shape(t, dims)
            dt = torch_dtype(t.dtype)
            if t.dtype == "bool":
                x = torch.randint(0, 2, shape, generator=gen).bool()
            elif is_floating(t.dtype):
                if t.low is not None and t.high is not None:
                    x = torch.rand(shape, generator=gen) * (t.high - t.low) + t.low
                else:
                    x = torch.randn(shape, generator=gen)
                x = x.to(dt)
            else:
                lo = int(t.low) if t.low is not None else 0
                hi = int(t.high) if t.high is not None else 100
                x = torch.randint(lo, hi, shape, generator=gen, dtype=dt)
            out[t.name] = x
        return out

    def validate(self, inputs: Mapping[str, Any]) -> None:
        """Check real inputs against the spec; raise InputSpecError saying what was expected."""
        missing = [n for n in self.names if n not in inputs]
        if missing:
            raise InputSpecError(
                f"missing inputs {missing}; the model expects {self.names} ({self})"
            )
        for t in self.inputs:
            x = inputs[t.name]
            shape = tuple(x.shape)
            dtype = normalize_dtype(str(x.dtype).replace("torch.", ""))
            if len(shape) != len(t.shape):
                raise InputSpecError(f"{t.name}: got rank {len(shape)} {list(shape)}, expected {t}")
            for got, want in zip(shape, t.shape):
                if isinstance(want, int) and got != want:
                    raise InputSpecError(f"{t.name}: got shape {list(shape)}, expected {t}")
                if isinstance(want, str):
                    d = self.dims[want]
                    if not (d.min <= got <= d.max):
                        raise InputSpecError(
                            f"{t.name}: dim {want}={got} outside its range {d.min}..{d.max}"
                        )
            if dtype != t.dtype:
                raise InputSpecError(f"{t.name}: got dtype {dtype}, expected {t.dtype}")

    def load_inputs(self, path: str | Path) -> dict[str, torch.Tensor]:
        """Load real inputs from ``.npz`` or a tensor-only ``.pt`` file and validate them."""
        from accel.models.tensor_files import load_tensor_file

        data = load_tensor_file(path)
        if len(self.inputs) == 1 and self.names[0] not in data and len(data) >= 1:
            # A single-input model: accept the first array whatever its name.
            first = next(iter(data))
            data = {self.names[0]: data[first]}
        self.validate(data)
        return {n: data[n] for n in self.names}


def _point(text: str, pos: int, message: str) -> str:
    return f"{message}\n  {text}\n  {' ' * max(pos, 0)}^"
