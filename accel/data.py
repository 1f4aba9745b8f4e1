"""Data sources: calibration, QAT / fine-tuning and evaluation data behind one interface.

``make_data_source(spec, input_spec)`` reads one of

- ``synthetic`` or ``synthetic(batches=8, batch=4)``: unlabelled inputs sampled from the
  InputSpec (batch ``i`` uses seed ``1000 + 10000 * seed + i``, the seeds the exported
  script's ``calibration_batches()`` uses);
- ``synthetic-labelled:SOURCE`` (options as above, e.g.
  ``synthetic-labelled(batches=16,batch=32):zoo:mlp``): the same inputs labelled by the
  argmax of a fixed *teacher* model loaded from SOURCE. The labels never depend on the
  model being evaluated, so a quantized model's accuracy against them measures what
  quantization lost (the float teacher scores 100%). Without ``:SOURCE`` the caller's
  ``teacher`` (the runner passes the recipe's original model) labels the data;
- ``file.npz`` / tensor-only ``file.pt``: one array per input name (leading dim =
  samples) plus an optional ``labels`` array, cut into batches of ``batch_size``;
- ``pkg.mod:function`` or ``file.py:function``: a function returning an iterable of
  batches, each a dict of input tensors (optionally with a ``labels`` key) or an
  ``(inputs, labels)`` tuple.

Every batch is checked against the InputSpec (names, ranks, fixed dims, symbolic dim
ranges, dtypes) and for NaN/Inf before any work starts; problems raise ``DataError``
saying what was expected. ``evaluate_accuracy`` scores a model on labelled data.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import DataError, InputSpecError
from accel.models.inputs import InputSpec, is_floating

if TYPE_CHECKING:
    import torch

    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)

LABELS_KEY = "labels"
SYNTHETIC_SEED_BASE = 1000
_SYNTH_RE = re.compile(
    r"^(?P<kind>synthetic|synthetic-labelled)(?:\((?P<opts>[^)]*)\))?(?::(?P<source>.+))?$"
)


@dataclass
class Batch:
    """One batch: input tensors by name and optional labels (first dim = batch)."""

    inputs: dict[str, torch.Tensor]
    labels: torch.Tensor | None = None

    @property
    def size(self) -> int:
        first = next(iter(self.inputs.values()))
        return int(first.shape[0]) if first.dim() else 1


class DataSource:
    """Validated batches held in memory (small data: calibration / eval sets)."""

    def __init__(self, spec: str, batches: list[Batch], *, description: str = ""):
        self.spec = spec
        self._batches = batches
        self.description = description or spec

    def batches(self, limit: int | None = None) -> Iterator[Batch]:
        for i, b in enumerate(self._batches):
            if limit is not None and i >= limit:
                return
            yield b

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def has_labels(self) -> bool:
        return bool(self._batches) and all(b.labels is not None for b in self._batches)

    @property
    def num_samples(self) -> int:
        return sum(b.size for b in self._batches)

    def __repr__(self) -> str:
        return f"DataSource({self.spec!r}, {len(self)} batches, labels={self.has_labels})"


# -- building ---------------------------------------------------------------------------------


def make_data_source(
    spec: str,
    input_spec: InputSpec | str,
    *,
    seed: int = 0,
    require_labels: bool = False,
    teacher: LoadedModel | None = None,
    batch_size: int | None = None,
) -> DataSource:
    """Read and validate a data source (see module docstring); raise DataError if unusable."""
    input_spec = InputSpec.coerce(input_spec)
    if input_spec is None:
        raise DataError("a data source needs the model's input spec")
    spec = (spec or "").strip()
    if not spec:
        raise DataError("empty data source; use 'synthetic', a .npz/.pt file or pkg.mod:function")
    m = _SYNTH_RE.match(spec)
    if m:
        batches = _synthetic(m, input_spec, seed, teacher, batch_size)
    elif Path(spec).suffix.lower() in (".npz", ".pt", ".pth") and ":" not in Path(spec).name:
        batches = _from_file(Path(spec), input_spec, batch_size)
    elif ":" in spec:
        batches = _from_function(spec, input_spec)
    else:
        raise DataError(
            f"cannot read data source {spec!r}: use 'synthetic', 'synthetic-labelled:zoo:NAME', "
            "a .npz or tensor-only .pt file, or pkg.mod:function"
        )
    if not batches:
        raise DataError(f"data source {spec!r} is empty (no batches)")
    for i, b in enumerate(batches):
        _check_batch(b, input_spec, f"{spec}: batch {i}")
    if require_labels and not all(b.labels is not None for b in batches):
        raise DataError(
            f"data source {spec!r} has no labels, and this use needs labelled data. Add a 'labels' array "
            "to the file, return (inputs, labels) from the function, or use 'synthetic-labelled:SOURCE' "
            "(labels = argmax of the teacher model SOURCE)."
        )
    return DataSource(spec, batches)


def _parse_opts(text: str | None, spec: str) -> dict[str, int]:
    opts: dict[str, int] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not (value.strip().isascii() and value.strip().isdigit()):
            raise DataError(
                f"{spec}: options look like 'synthetic(batches=8, batch=4)', got {part!r}"
            )
        opts[key.strip()] = int(value)
    unknown = set(opts) - {"batches", "batch"}
    if unknown:
        raise DataError(f"{spec}: unknown option(s) {sorted(unknown)}; known: batches, batch")
    return opts


def batch_dims(input_spec: InputSpec, batch: int | None) -> dict[str, int] | None:
    """Dims giving the leading symbolic dim of the first input the size ``batch``."""
    if batch is None:
        return None
    first = input_spec.inputs[0].shape
    if not first or not isinstance(first[0], str):
        raise DataError(
            f"the model's first input has no symbolic batch dim ({input_spec}); remove 'batch='"
        )
    d = input_spec.dims[first[0]]
    if not d.min <= batch <= d.max:
        raise DataError(f"batch={batch} is outside the range {d.min}..{d.max} of dim {first[0]!r}")
    return {first[0]: batch}


def synthetic_inputs(
    input_spec: InputSpec, index: int, *, seed: int = 0, batch: int | None = None
) -> dict[str, Any]:
    """Synthetic batch ``index`` (the exported script uses the same seeds)."""
    return input_spec.sample(
        seed=SYNTHETIC_SEED_BASE + 10000 * seed + index, dims=batch_dims(input_spec, batch)
    )


def _synthetic(
    m: re.Match[str], input_spec: InputSpec, seed: int, teacher: Any, batch_size: int | None
) -> list[Batch]:
    spec = m.group(0)
    opts = _parse_opts(m.group("opts"), spec)
    n = opts.get("batches", 8)
    if n < 1:
        raise DataError(f"{spec}: batches must be at least 1")
    batch = opts.get("batch", batch_size)
    labelled = m.group("kind") == "synthetic-labelled"
    if m.group("source") and not labelled:
        raise DataError(
            f"{spec}: 'synthetic' takes no source; did you mean 'synthetic-labelled:{m.group('source')}'?"
        )
    inputs = [synthetic_inputs(input_spec, i, seed=seed, batch=batch) for i in range(n)]
    if not labelled:
        return [Batch(x) for x in inputs]
    if m.group("source"):
        from accel.errors import ModelLoadError
        from accel.models import load_model

        try:
            teacher = load_model(m.group("source"), input_spec)
        except (ModelLoadError, InputSpecError) as exc:
            raise DataError(f"{spec}: cannot load the teacher model: {exc}") from None
    if teacher is None:
        raise DataError(
            f"{spec}: name the teacher model that labels the data, e.g. 'synthetic-labelled:zoo:mlp'"
        )
    out = []
    for x in inputs:
        y = _first_tensor(teacher.forward(x))
        if y is None or y.dim() < 2:
            raise DataError(
                f"{spec}: the teacher's output is not a [batch, classes] tensor; cannot derive labels"
            )
        out.append(Batch(x, y.float().argmax(-1)))
    return out


def _first_tensor(outputs: Any) -> torch.Tensor | None:
    import torch

    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, (list, tuple)) and outputs:
        return _first_tensor(outputs[0])
    if isinstance(outputs, Mapping) and outputs:
        return _first_tensor(next(iter(outputs.values())))
    return None


def _from_file(path: Path, input_spec: InputSpec, batch_size: int | None) -> list[Batch]:
    from accel.models.tensor_files import load_tensor_file

    arrays = load_tensor_file(path)
    labels = arrays.pop(LABELS_KEY, None)
    if not arrays:
        raise DataError(
            f"{path}: holds only labels; add one array per model input ({', '.join(input_spec.names)})"
        )
    if len(input_spec.inputs) == 1 and input_spec.names[0] not in arrays and len(arrays) == 1:
        arrays = {input_spec.names[0]: next(iter(arrays.values()))}
    missing = [n for n in input_spec.names if n not in arrays]
    if missing:
        raise DataError(
            f"{path}: no array for input(s) {missing}; expected arrays {input_spec.names} "
            f"(+ optional {LABELS_KEY!r}) for {input_spec}, found {sorted(arrays)}"
        )
    sizes = {n: int(arrays[n].shape[0]) if arrays[n].dim() else 0 for n in input_spec.names}
    n = min(sizes.values())
    if n == 0:
        raise DataError(f"{path}: empty arrays (0 samples)")
    if len(set(sizes.values())) > 1:
        raise DataError(
            f"{path}: arrays have different numbers of samples {sizes}; the first dim is the sample dim"
        )
    if labels is not None and (labels.dim() == 0 or int(labels.shape[0]) != n):
        raise DataError(
            f"{path}: {LABELS_KEY!r} has shape {list(labels.shape)}, expected one label per sample ({n})"
        )
    step = _file_batch(input_spec, n, batch_size)
    batches = []
    for start in range(0, n, step):
        x = {k: arrays[k][start : start + step] for k in input_spec.names}
        y = labels[start : start + step] if labels is not None else None
        batches.append(Batch(x, y))
    return batches


def _file_batch(input_spec: InputSpec, n: int, batch_size: int | None) -> int:
    first = input_spec.inputs[0].shape
    if first and isinstance(first[0], int):
        return first[0]
    if first and isinstance(first[0], str):
        d = input_spec.dims[first[0]]
        return max(1, min(batch_size or 32, d.max, n))
    return n


def _load_function(spec: str, what: str = "data function") -> Callable[[], Any]:
    from accel.errors import UntrustedCodeError
    from accel.trust import check_function, require_code_trust, split_code_ref

    try:
        require_code_trust(spec, what)
        mod_name, fn_name = split_code_ref(spec)
    except UntrustedCodeError as exc:
        raise DataError(str(exc)) from None
    try:
        if mod_name.endswith(".py") or "/" in mod_name:
            p = Path(mod_name)
            if not p.is_file():
                raise DataError(f"data source {spec!r}: file {p} not found")
            spec_obj = importlib.util.spec_from_file_location(f"_accel_data_{p.stem}", p)
            if spec_obj is None or spec_obj.loader is None:
                raise DataError(f"data source {spec!r}: cannot import {p}")
            mod = importlib.util.module_from_spec(spec_obj)
            spec_obj.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except DataError:
        raise
    except Exception as exc:
        raise DataError(
            f"data source {spec!r}: cannot import {mod_name} ({type(exc).__name__}: {exc})"
        ) from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise DataError(f"data source {spec!r}: {mod_name} has no function {fn_name!r}")
    try:
        check_function(fn, mod.__name__, spec, what)
    except UntrustedCodeError as exc:
        raise DataError(str(exc)) from None
    return fn


def _from_function(spec: str, input_spec: InputSpec) -> list[Batch]:
    fn = _load_function(spec)
    try:
        items = fn()
        if not isinstance(items, Iterable):
            raise DataError(
                f"data source {spec!r}: the function returned {type(items).__name__}, not an iterable of batches"
            )
        return [_to_batch(item, input_spec, spec, i) for i, item in enumerate(items)]
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"data source {spec!r} failed: {type(exc).__name__}: {exc}") from None


def _as_tensor(x: Any, where: str) -> torch.Tensor:
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise DataError(f"{where}: object arrays are not data")
        return torch.from_numpy(x)
    raise DataError(f"{where}: expected a tensor or numpy array, got {type(x).__name__}")


def _to_batch(item: Any, input_spec: InputSpec, spec: str, i: int) -> Batch:
    where = f"{spec}: batch {i}"
    labels = None
    if isinstance(item, Batch):
        return item
    # (inputs, labels), unless it is the two input tensors of a two-input model.
    pair = isinstance(item, tuple) and len(item) == 2
    if pair and (len(input_spec.inputs) != 2 or isinstance(item[0], (Mapping, tuple, list))):
        item, labels = item
    if isinstance(item, Mapping):
        d = dict(item)
        if LABELS_KEY in d and LABELS_KEY not in input_spec.names:
            labels = d.pop(LABELS_KEY)
        inputs = {str(k): _as_tensor(v, where) for k, v in d.items()}
    elif isinstance(item, (tuple, list)):
        if len(item) != len(input_spec.inputs):
            raise DataError(
                f"{where}: {len(item)} tensors, the model takes {len(input_spec.inputs)} ({input_spec})"
            )
        inputs = {n: _as_tensor(v, where) for n, v in zip(input_spec.names, item)}
    else:
        if len(input_spec.inputs) != 1:
            raise DataError(
                f"{where}: one tensor given, the model takes {len(input_spec.inputs)} inputs ({input_spec})"
            )
        inputs = {input_spec.names[0]: _as_tensor(item, where)}
    if len(input_spec.inputs) == 1 and input_spec.names[0] not in inputs and len(inputs) == 1:
        inputs = {input_spec.names[0]: next(iter(inputs.values()))}
    return Batch(inputs, _as_tensor(labels, where + " labels") if labels is not None else None)


def _check_batch(b: Batch, input_spec: InputSpec, where: str) -> None:
    import torch

    try:
        input_spec.validate(b.inputs)
    except InputSpecError as exc:
        raise DataError(f"{where}: {exc} (the model's inputs: {input_spec})") from None
    extra = sorted(set(b.inputs) - set(input_spec.names))
    if extra:
        raise DataError(f"{where}: unexpected input(s) {extra}; the model takes {input_spec.names}")
    for t in input_spec.inputs:
        x = b.inputs[t.name]
        if x.numel() == 0:
            raise DataError(f"{where}: input {t.name!r} is empty (shape {list(x.shape)})")
        if is_floating(t.dtype):
            bad = int((~torch.isfinite(x)).sum())
            if bad:
                raise DataError(
                    f"{where}: input {t.name!r} has {bad} NaN/Inf values; clean the data first"
                )
        elif t.dtype != "bool" and t.low is not None and t.high is not None:
            lo, hi = int(x.min()), int(x.max())
            if lo < t.low or hi >= t.high:
                raise DataError(
                    f"{where}: input {t.name!r} has values {lo}..{hi}, outside its range {{{t.low:g}..{t.high:g}}}"
                )
    if b.labels is not None:
        n = b.size
        if b.labels.dim() == 0 or int(b.labels.shape[0]) != n:
            raise DataError(
                f"{where}: labels of shape {list(b.labels.shape)} for a batch of {n} samples"
            )
        if b.labels.is_floating_point() and not bool(torch.isfinite(b.labels).all()):
            raise DataError(f"{where}: labels contain NaN/Inf")


# -- evaluation -------------------------------------------------------------------------------


def _metric_fn(metric: str) -> Callable[[Any, Any], float] | None:
    if metric == "top1":
        return None
    if ":" not in metric:
        raise DataError(
            f"unknown metric {metric!r}; use 'top1' or pkg.mod:function(outputs, labels) -> float"
        )
    return _load_function(metric, "metric function")


def evaluate_accuracy(model: LoadedModel, data: DataSource, metric: str = "top1") -> float:
    """Accuracy of ``model`` on labelled ``data``: top-1 (fraction correct) or a user metric
    (``pkg.mod:function(outputs, labels) -> float``, averaged over batches by sample count)."""
    import torch

    fn = _metric_fn(metric)
    if not data.has_labels:
        raise DataError(f"accuracy needs labelled data; {data.spec!r} has no labels")
    total, score = 0, 0.0
    for b in data.batches():
        out = model.forward(b.inputs)
        n = b.size
        if fn is None:
            logits = _first_tensor(out)
            if logits is None or logits.dim() < 2:
                raise DataError(
                    "top1 needs a [batch, classes] output; give a metric function instead"
                )
            pred = logits.detach().float().cpu().argmax(-1)
            labels = b.labels
            if labels.is_floating_point() and labels.dim() == pred.dim() + 1:
                labels = labels.argmax(-1)  # one-hot / soft labels
            score += float((pred == labels.to(pred.dtype)).sum())
        else:
            with torch.no_grad():
                score += float(fn(out, b.labels)) * n
        total += n
    return score / total if total else float("nan")


# -- script export ----------------------------------------------------------------------------


def calibration_script_helper(spec: str | None, input_spec: InputSpec, seed: int = 0) -> str | None:
    """Source of a ``calibration_batches(limit=8)`` for the exported script that yields the
    same input batches as ``make_data_source(spec)`` (None: keep the script's default)."""
    return _batches_source(spec, input_spec, seed, labels=False)


def train_script_helper(spec: str | None, input_spec: InputSpec, seed: int = 0) -> str | None:
    """Source of a ``train_batches()`` for the exported script: the ``(inputs, labels)`` pairs
    of ``make_data_source(spec)``; labels are None where the studio derives them from a
    teacher model (``synthetic-labelled``), which the script's QAT step does from its float model."""
    return _batches_source(spec, input_spec, seed, labels=True)


def _batches_source(spec: str | None, input_spec: InputSpec, seed: int, labels: bool) -> str | None:
    from accel.literals import doc_text

    if not spec:
        return None
    spec_doc = doc_text(spec)  # recipe text enters the script only escaped or as a literal
    names = input_spec.names
    m = _SYNTH_RE.match(spec.strip())
    if labels:
        head, doc_end = "def train_batches():\n", ""
    else:
        head, doc_end = "def calibration_batches(limit=8):\n", " (labels dropped)"
    if m:
        return _synthetic_batches_source(m, spec, spec_doc, head, input_spec, seed, labels)
    if Path(spec).suffix.lower() in (".npz", ".pt", ".pth"):
        return _file_batches_source(spec, spec_doc, head, doc_end, input_spec, labels)
    return _code_batches_source(spec, spec_doc, head, doc_end, names, labels)


def _synthetic_batches_source(
    m: re.Match[str],
    spec: str,
    spec_doc: str,
    head: str,
    input_spec: InputSpec,
    seed: int,
    labels: bool,
) -> str | None:
    """Batches made by make_inputs with the synthetic spec's seeds and dims (None: the
    script's default ones)."""
    opts = _parse_opts(m.group("opts"), spec)
    if not labels and not opts and seed == 0:
        return None  # the script's default: make_inputs(seed=1000 + i), 8 batches
    dims = batch_dims(input_spec, opts.get("batch"))
    base = SYNTHETIC_SEED_BASE + 10000 * seed
    n = opts.get("batches", 8)
    item = f"make_inputs(seed={base} + i, dims={dims!r})"
    return (
        head
        + f'    """Inputs of {spec_doc} (seeds {base}, {base + 1}, ...)."""\n'
        + (
            f"    return [({item}, None) for i in range({n})]\n"
            if labels
            else f"    return [{item} for i in range(min(limit, {n}))]\n"
        )
    )


def _file_batches_source(
    spec: str,
    spec_doc: str,
    head: str,
    doc_end: str,
    input_spec: InputSpec,
    labels: bool,
) -> str:
    """Batches cut from an .npz / .pt file the way the studio cuts them."""
    names = input_spec.names
    first = input_spec.inputs[0].shape
    n_hint = f"len(arrays[{names[0]!r}])"
    if first and isinstance(first[0], int):
        batch = f"{first[0]}"
    elif first:
        batch = f"max(1, min(32, {input_spec.dims[first[0]].max}, {n_hint}))"
    else:
        batch = n_hint
    ret = (
        "    return [({k: arrays[k][i : i + step] for k in names}, None if labels is None else labels[i : i + step])\n"
        "            for i in range(0, n, step)]\n"
        if labels
        else "    return [{k: arrays[k][i : i + step] for k in names} for i in range(0, n, step)][:limit]\n"
    )
    return (
        head + f'    """Batches of {spec_doc}, cut as the studio cuts them{doc_end}."""\n'
        f"    path = Path({str(Path(spec).resolve())!r})\n"
        '    if path.suffix.lower() == ".npz":\n'
        "        with np.load(path, allow_pickle=False) as z:\n"
        "            arrays = {k: torch.from_numpy(np.array(z[k])) for k in z.files}\n"
        "    else:\n"
        '        arrays = torch.load(path, map_location="cpu", weights_only=True)\n'
        "        if isinstance(arrays, torch.Tensor):\n"
        '            arrays = {"input": arrays}\n'
        "        elif isinstance(arrays, (list, tuple)):\n"
        '            arrays = {f"input{i}": t for i, t in enumerate(arrays)}\n'
        f"    labels = arrays.pop({LABELS_KEY!r}, None)\n"
        f"    names = {names!r}\n"
        "    if len(names) == 1 and names[0] not in arrays:\n"
        "        arrays = {names[0]: next(iter(arrays.values()))}\n"
        f"    step = {batch}\n"
        f"    n = len(arrays[{names[0]!r}])\n" + ret
    )


def _code_batches_source(
    spec: str,
    spec_doc: str,
    head: str,
    doc_end: str,
    names: list[str],
    labels: bool,
) -> str:
    """Batches from a user function (``module:function`` or ``file.py:function``)."""
    from accel.errors import UntrustedCodeError
    from accel.trust import is_file_ref, split_code_ref

    try:
        mod, fn = split_code_ref(spec)  # identifiers only: they are written as code
    except UntrustedCodeError as exc:
        raise DataError(str(exc)) from None
    if is_file_ref(mod):
        load = (
            "    import importlib.util\n"
            f"    _spec = importlib.util.spec_from_file_location('user_data', {str(Path(mod).resolve())!r})\n"
            "    _mod = importlib.util.module_from_spec(_spec)\n"
            "    _spec.loader.exec_module(_mod)\n"
            f"    items = _mod.{fn}()\n"
        )
    else:
        load = f"    from {mod} import {fn}\n\n    items = {fn}()\n"
    return (
        head + f'    """Batches from {spec_doc}{doc_end}."""\n' + load + f"    names = {names!r}\n"
        "    out = []\n"
        "    for item in items:\n"
        "        y = None\n"
        "        if isinstance(item, tuple) and len(item) == 2 and (len(names) != 2 or isinstance(item[0], (dict, list, tuple))):\n"
        "            item, y = item\n"
        "        if isinstance(item, dict):\n"
        f"            y = item.get({LABELS_KEY!r}, y) if {LABELS_KEY!r} not in names else y\n"
        "            x = {k: torch.as_tensor(item[k]) for k in names}\n"
        "        elif isinstance(item, (list, tuple)):\n"
        "            x = {k: torch.as_tensor(v) for k, v in zip(names, item)}\n"
        "        else:\n"
        "            x = {names[0]: torch.as_tensor(item)}\n"
        + (
            "        out.append((x, None if y is None else torch.as_tensor(y)))\n    return out\n"
            if labels
            else "        out.append(x)\n    return out[:limit]\n"
        )
    )
