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
        if self.min < 1 or self.max > MAX_DIM_SIZE:
            raise InputSpecError(
                f"dim range {self.min}..{self.max} must stay within 1..{MAX_DIM_SIZE}"
            )
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

    def __post_init__(self) -> None:
        if (self.low is None) != (self.high is None):
            raise InputSpecError(f"{self.name}: give both ends of the value range, or neither")
        if self.low is not None:
            _check_range(self.name, self.dtype, self.low, self.high)

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        rng = ""
        if self.low is not None and self.high is not None:
            rng = "{" + f"{_num(self.low)}..{_num(self.high)}" + "}"
        return f"{self.name}:{self.dtype}[{dims}]{rng}"


# Sample-able value ranges per dtype ({low..high}, high exclusive for integers).
_INT_LIMITS = {
    "uint8": (0, 1 << 8),
    "int8": (-(1 << 7), 1 << 7),
    "int16": (-(1 << 15), 1 << 15),
    "int32": (-(1 << 31), 1 << 31),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
_FLOAT_LIMITS = {"float16": 65504.0, "bfloat16": 3.38e38, "float32": 3.4e38, "float64": 1.7e308}
# Symbolic and fixed dims stay below this (the size estimate bounds the total).
MAX_DIM_SIZE = 1 << 40


def _check_range(name: str, dtype: str, low: Any, high: Any) -> None:
    import math

    try:
        lo, hi = float(low), float(high)
    except (TypeError, ValueError, OverflowError):
        raise InputSpecError(f"{name}: value range {low!r}..{high!r} is not two numbers") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InputSpecError(f"{name}: value range {low}..{high} must be finite")
    if hi <= lo:
        raise InputSpecError(f"{name}: empty value range {_num(lo)}..{_num(hi)}")
    if dtype == "bool":
        raise InputSpecError(f"{name}: bool inputs take no value range (they are 0 or 1)")
    if dtype in _INT_LIMITS:
        if not (lo.is_integer() and hi.is_integer()):
            raise InputSpecError(
                f"{name}: {dtype} values need whole-number bounds, got {_num(lo)}..{_num(hi)}"
            )
        a, b = _INT_LIMITS[dtype]
        if lo < a or hi > b:
            raise InputSpecError(
                f"{name}: range {_num(lo)}..{_num(hi)} does not fit {dtype} ({a}..{b}, high exclusive)"
            )
    elif dtype in _FLOAT_LIMITS and max(abs(lo), abs(hi)) > _FLOAT_LIMITS[dtype]:
        raise InputSpecError(
            f"{name}: range {_num(lo)}..{_num(hi)} exceeds what {dtype} holds "
            f"(±{_FLOAT_LIMITS[dtype]:g})"
        )


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
        """Parse the compact form; errors point at the bad part with a caret.

        A hand-written scanner (split, partition, bounded regexes on short pieces): linear in
        the length of the text whatever it holds."""
        if not isinstance(text, str) or not text.strip():
            raise InputSpecError("empty input spec; expected e.g. 'x:float32[batch,3,224,224]'")
        if len(text) > MAX_SPEC_CHARS:
            raise InputSpecError(f"input spec longer than {MAX_SPEC_CHARS} characters")
        tensors: list[TensorSpec] = []
        dims: dict[str, Dim] = {}
        pos = 0
        for raw in text.split(";"):
            start = pos + len(raw) - len(raw.lstrip())
            pos += len(raw) + 1
            part = raw.strip()
            if not part:
                continue
            try:
                if "[" not in part and "=" in part:
                    name, dim = _parse_dim(part)
                    dims[name] = dim
                else:
                    tensors.append(_parse_tensor(part))
            except _SpecSyntax as exc:
                raise InputSpecError(_point(text, start + exc.offset, str(exc))) from None
            except InputSpecError as exc:
                raise InputSpecError(_point(text, start, str(exc))) from None
        if not tensors:
            raise InputSpecError(
                _point(text, 0, "no tensors in input spec; expected e.g. 'x:float32[batch,16]'")
            )
        try:
            return cls(tuple(tensors), dims)
        except InputSpecError as exc:
            raise InputSpecError(_point(text, 0, str(exc))) from None

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
        unknown = sorted(set(dims) - set(self.dims))
        if unknown:
            raise InputSpecError(
                f"no symbolic dim {', '.join(map(repr, unknown))} in the input spec; "
                f"its dims: {', '.join(self.dims) or 'none (all shapes fixed)'}"
            )
        for k, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DIM_SIZE:
                raise InputSpecError(f"dim {k}={v!r}: use a whole number 1..{MAX_DIM_SIZE}")
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
        """Deterministic sample inputs (same seed, same tensors). Refuses, before allocating
        anything, inputs larger than the memory available (InputSpecError with the figures)."""
        import torch

        self.check_size(dims)
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

    def nbytes(self, dims: Mapping[str, int] | None = None) -> int:
        """Bytes the sampled inputs take at ``dims`` (default: each dim's default)."""
        import math

        total = 0
        for t in self.inputs:
            item = _ITEMSIZE[t.dtype]
            total += math.prod(self.concrete_shape(t, dims)) * item
        return total

    def peak_bytes(self, dims: Mapping[str, int] | None = None) -> int:
        """Bytes :meth:`sample` holds at its peak: the inputs made so far plus the
        temporaries of the one being made (a bool input is drawn as int64; a float16 one as
        float32 first; a ranged float as two float32 tensors)."""
        import math

        made = peak = 0
        for t in self.inputs:
            n = math.prod(self.concrete_shape(t, dims))
            peak = max(peak, made + n * _generation_bytes(t))
            made += n * _ITEMSIZE[t.dtype]
        return max(peak, made)

    def check_size(self, dims: Mapping[str, int] | None = None, limit: int | None = None) -> int:
        """:meth:`peak_bytes` (what sampling the inputs takes, temporaries included), or
        InputSpecError if it exceeds ``limit`` (default: the memory available now, see
        :func:`available_memory`)."""
        need = self.peak_bytes(dims)
        limit = available_memory() if limit is None else limit
        if need > limit:
            shapes = ", ".join(f"{t.name}{list(self.concrete_shape(t, dims))}" for t in self.inputs)
            size = self.nbytes(dims)
            drawn = f" ({_fmt_bytes(need)} while they are drawn)" if need > size else ""
            raise InputSpecError(
                f"the inputs ({shapes}) would take {_fmt_bytes(size)}{drawn}, more than the "
                f"{_fmt_bytes(limit)} of memory available; use smaller dims (e.g. batch)"
            )
        return need

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
    """``message``, the text and a caret under position ``pos`` (long texts: a window)."""
    pos = max(0, min(pos, len(text)))
    lo = max(0, pos - 60)
    window = text[lo : pos + 60]
    prefix = "..." if lo else ""
    suffix = "..." if pos + 60 < len(text) else ""
    return f"{message}\n  {prefix}{window}{suffix}\n  {' ' * (len(prefix) + pos - lo)}^"


MAX_SPEC_CHARS = 10_000
_ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def _generation_bytes(t: TensorSpec) -> int:
    """Bytes per element :meth:`InputSpec.sample` holds while it draws ``t`` (result and
    temporaries), as it draws: bool from int64, floats from float32 (ranged: scaled into
    a second float32 tensor), integers directly in their dtype."""
    item = _ITEMSIZE[t.dtype]
    if t.dtype == "bool":
        return 8 + item
    if is_floating(t.dtype):
        drawn = 8 if t.low is not None and t.high is not None else 4
        return max(drawn, 4 + (item if t.dtype != "float32" else 0))
    return item


# Env var: cap (bytes) on what sampled inputs may take, below the available memory.
INPUT_MEMORY_ENV = "ACCEL_MAX_INPUT_BYTES"


def available_memory() -> int:
    """Bytes inputs may take: the memory available now (psutil), or the process's address
    space limit if lower, or ``$ACCEL_MAX_INPUT_BYTES`` if set and lower."""
    import os

    try:
        import psutil

        avail = int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil: assume a generous machine
        avail = 1 << 40
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            avail = min(avail, soft)
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        pass
    env = os.environ.get(INPUT_MEMORY_ENV, "").strip()
    if env.isdigit():
        avail = min(avail, int(env))
    return avail


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


_NAME_RE = re.compile(_NAME)
_INT_RE = re.compile(r"\d{1,13}")
_NUM_RE = re.compile(r"-?\d{1,40}(?:\.\d{1,40})?(?:[eE][+-]?\d{1,3})?")


class _SpecSyntax(Exception):
    """A malformed piece; ``offset`` is where in the part it starts."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_TENSOR_HINT = (
    "expected NAME:DTYPE[DIMS] such as 'x:float32[batch,3,224,224]' "
    "or a dim definition 'batch=1..32:8'"
)


def _parse_int(piece: str, what: str, offset: int) -> int:
    piece = piece.strip()
    if not _INT_RE.fullmatch(piece):
        raise _SpecSyntax(
            f"{what}: {piece[:40]!r} is not a whole number (at most 13 digits)", offset
        )
    return int(piece)


def _parse_dim(part: str) -> tuple[str, Dim]:
    """``name=default``, ``name=min..max`` or ``name=min..max:default``."""
    name, _, value = part.partition("=")
    name = name.strip()
    if not _NAME_RE.fullmatch(name):
        raise _SpecSyntax(f"cannot read {part[:60]!r}: {_TENSOR_HINT}")
    off = part.index("=") + 1
    rng, colon, default_s = value.partition(":")
    if ".." not in rng:
        if colon:
            raise _SpecSyntax(f"dim {name!r}: write 'name=min..max:default'", off)
        default = _parse_int(rng, f"dim {name!r}", off)
        base = _KNOWN_DIMS.get(name, (1, 1, 64))
        return name, Dim(default, min(base[1], default), max(base[2], default))
    a, sep, b = rng.partition("..")
    if ".." in b:
        raise _SpecSyntax(f"dim {name!r}: one '..' between min and max", off)
    lo = _parse_int(a, f"dim {name!r}", off)
    hi = _parse_int(b, f"dim {name!r}", off)
    default = _parse_int(default_s, f"dim {name!r}", off) if colon else lo
    try:
        return name, Dim(default, lo, hi)
    except InputSpecError as exc:
        raise _SpecSyntax(f"dim {name!r}: {exc}", 0) from None


def _parse_tensor(part: str) -> TensorSpec:
    """``name:dtype[d0,d1,...]`` with an optional ``{low..high}`` value range."""
    name, colon, rest = part.partition(":")
    name = name.strip()
    if not colon or not _NAME_RE.fullmatch(name) or "[" not in rest:
        raise _SpecSyntax(f"cannot read {part[:60]!r}: {_TENSOR_HINT}")
    dtype_s, _, after = rest.partition("[")
    dtype_off = len(name) + 1
    try:
        dtype = normalize_dtype(dtype_s.strip()[:40])
    except InputSpecError as exc:
        raise _SpecSyntax(str(exc), dtype_off) from None
    shape_off = part.index("[")
    shape_s, close, tail = after.partition("]")
    if not close:
        raise _SpecSyntax(f"{name}: missing ']' after the dims", shape_off)
    shape: list[int | str] = []
    if shape_s.strip():
        for d in (p.strip() for p in shape_s.split(",")):
            if _INT_RE.fullmatch(d):
                if int(d) > MAX_DIM_SIZE:
                    raise _SpecSyntax(f"{name}: dimension {d} is too large", shape_off)
                shape.append(int(d))
            elif _NAME_RE.fullmatch(d):
                shape.append(d)
            else:
                raise _SpecSyntax(
                    f"{name}: bad dimension {d[:40]!r}; use a positive integer or a name like 'batch'",
                    shape_off,
                )
    low = high = None
    tail = tail.strip()
    if tail:
        tail_off = part.index("]") + 1
        if not (tail.startswith("{") and tail.endswith("}")):
            raise _SpecSyntax(f"{name}: unexpected {tail[:40]!r} after the dims", tail_off)
        pieces = tail[1:-1].split("..")
        if len(pieces) != 2 or not all(_NUM_RE.fullmatch(p.strip()) for p in pieces):
            raise _SpecSyntax(
                f"{name}: value range {tail[:40]!r} must look like {{0..30522}} or {{-1.5..1.5}}",
                tail_off,
            )
        low, high = (float(p) for p in pieces)
    return TensorSpec(name, tuple(shape), dtype, low, high)
