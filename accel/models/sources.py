"""Model sources: turn a source string into a LoadedModel.

Source forms::

    zoo:resnet                      built-in demo model (optionally zoo:transformer(num_layers=12))
    path/to/file.py:factory         a callable in a Python file returning an nn.Module
    package.module:factory          the same from an importable module
    model.pt / model.ts             TorchScript (torch.jit.load)
    model.pt2                       torch.export ExportedProgram
    model.onnx                      ONNX (external data only inside the model's folder)
    SOURCE@weights.pt               a factory (or zoo model) plus a state_dict file
    model.pt (pickled nn.Module)    only with trust_pickle=True: it can run arbitrary code

Keyword arguments for a factory: ``pkg.mod:factory(num_layers=12, width=64)``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import logging
import re
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from accel.errors import InputSpecError, ModelLoadError
from accel.models.corpus import CORPUS_PREFIXES
from accel.models.inputs import InputSpec
from accel.models.loaded import LoadedModel
from accel.models.pt2_check import check_pt2_archive
from accel.models.runtime import model_file_suffixes, runtime_for_file
from accel.trust import (
    check_factory,
    is_file_ref,
    require_code_trust,
    split_code_ref,
)

log = logging.getLogger(__name__)

_SOURCE_RE = re.compile(
    r"^(?P<target>[^()@]+?)(?:\((?P<kwargs>.*)\))?(?:@(?P<weights>[^@]+))?$", re.S
)


class SourceParts(NamedTuple):
    """A model source's parts: ``target(kwargs)@weights``."""

    target: str  # zoo:name, a file, file.py:fn or pkg.mod:fn
    kwargs: str  # the factory's keyword arguments as written ("" when none)
    weights: str | None  # a state_dict file loaded into the built model


def parse_source(source: str) -> SourceParts | None:
    """``source`` split into its parts (nothing imported or read), None when malformed."""
    m = _SOURCE_RE.match(str(source).strip())
    if not m:
        return None
    return SourceParts(m.group("target").strip(), m.group("kwargs") or "", m.group("weights"))


def load_model(
    source: str,
    input_spec: InputSpec | str | Mapping[str, Any] | None = None,
    *,
    trust_pickle: bool = False,
    factory_kwargs: Mapping[str, Any] | None = None,
    device: str = "cpu",
    validate: bool = True,
    trust_code: bool | None = None,
) -> LoadedModel:
    """Load ``source`` (see module docstring) into a LoadedModel.

    ``trust_pickle``: allow full unpickling (it runs any code in the file); only the person
    running the command may pass it. ``trust_code``: a ``file.py:factory`` /
    ``pkg.mod:factory`` source may be imported and called; default: unless a runner marked
    the source as a recipe's (``accel.trust.code_trust``). Every failure is a
    ModelLoadError whose message says what to change.
    """
    source = str(source).strip()
    if not source:
        raise ModelLoadError(
            "empty model source; give e.g. 'zoo:resnet', 'model.onnx' or 'pkg.mod:factory'"
        )
    try:
        spec = InputSpec.coerce(input_spec)
    except InputSpecError as exc:
        raise ModelLoadError(f"bad input spec: {exc}") from None
    parts = parse_source(source)
    if parts is None:
        raise ModelLoadError(f"cannot read model source {source!r}")
    target, kw_text, weights = parts
    kwargs = dict(_parse_kwargs(kw_text, source) if kw_text else {})
    kwargs.update(factory_kwargs or {})

    lm = _load_target(target, kwargs, spec, source, device, trust_pickle, trust_code)
    if weights:
        _load_state_dict(lm, Path(weights), trust_pickle)
    lm.runtime.finish_load(lm, device, validate)  # stats, device, a test forward
    return lm


# -- helpers ------------------------------------------------------------------------------


def _load_target(
    target: str,
    kwargs: dict[str, Any],
    spec: InputSpec | None,
    source: str,
    device: str,
    trust_pickle: bool,
    trust_code: bool | None,
) -> LoadedModel:
    """The model a source's target names: a zoo or corpus model, a model file (its runtime
    loads it, when it can run here), or a factory (when code is trusted)."""
    path = Path(target)
    runtime = runtime_for_file(path) if ":" not in path.name else None
    if target.startswith("zoo:"):
        return _load_zoo(target[4:], kwargs, spec, source)
    if target.startswith(CORPUS_PREFIXES):
        return _load_corpus(target, kwargs, spec, source)
    if runtime is not None:
        reason = runtime.unavailable_reason(device)
        if reason:
            raise ModelLoadError(f"{source} needs {runtime.label}, which cannot run here: {reason}")
        return runtime.load(path, spec, source, trust_pickle=trust_pickle)
    if ":" in target:
        require_code_trust(source, trusted=trust_code)
        return _load_factory(target, kwargs, spec, source)
    files = ", ".join(model_file_suffixes())
    if not path.exists():
        raise ModelLoadError(
            f"model source {source!r} not found. Give a model file ({files}), "
            "a zoo model (zoo:mlp, zoo:resnet, zoo:transformer, zoo:lstm) or a factory (pkg.mod:factory)."
        )
    raise ModelLoadError(
        f"unsupported model file type {path.suffix.lower()!r} for {source!r}; use one of {files}"
    )


def _parse_kwargs(text: str, source: str) -> dict[str, Any]:
    try:
        call = ast.parse(f"f({text})", mode="eval").body
        assert isinstance(call, ast.Call)
        if call.args:
            raise ValueError("positional arguments are not supported; use name=value")
        return {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (SyntaxError, ValueError, AssertionError) as exc:
        raise ModelLoadError(
            f"cannot read factory arguments in {source!r} ({exc}); write them as "
            "literals, e.g. 'pkg.mod:factory(num_layers=12, name=\"x\")'"
        ) from None


def _load_zoo(
    name: str, kwargs: dict[str, Any], spec: InputSpec | None, source: str
) -> LoadedModel:
    from accel.models.zoo import ZOO, build_zoo_model

    if name not in ZOO:
        raise ModelLoadError(
            f"unknown zoo model {name!r}; valid: {', '.join('zoo:' + n for n in ZOO)}"
        )
    try:
        module = build_zoo_model(name, **kwargs)
    except TypeError as exc:
        raise ModelLoadError(f"zoo:{name} does not take these arguments: {exc}") from None
    return LoadedModel(
        source=source,
        kind="torch",
        input_spec=spec or InputSpec.parse(ZOO[name].input_spec),
        module=module,
        format="zoo",
        metadata={"task": ZOO[name].task, "description": ZOO[name].description},
    )


def _load_corpus(
    name: str, kwargs: dict[str, Any], spec: InputSpec | None, source: str
) -> LoadedModel:
    from accel.models.corpus import build_corpus_model, get_entry

    entry = get_entry(name)
    if kwargs:
        raise ModelLoadError(f"{name} takes no arguments; give the model name alone")
    try:
        module = build_corpus_model(name)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"building {name} failed: {type(exc).__name__}: {exc}") from exc
    return LoadedModel(
        source=source,
        kind="torch",
        input_spec=spec or InputSpec.parse(entry.input_spec),
        module=module,
        format="corpus",
        metadata={"task": entry.task, "description": entry.description},
    )


def _import_factory(target: str, source: str) -> Any:
    mod_part, func_name = split_code_ref(target, source)
    if is_file_ref(mod_part):
        file = Path(mod_part)
        if not file.is_file():
            raise ModelLoadError(f"factory file {file} not found (from {source!r})")
        mod_name = f"_accel_user_{hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(mod_name, file)
        if spec is None or spec.loader is None:
            raise ModelLoadError(f"cannot import {file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise ModelLoadError(f"importing {file} failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(mod_part)
        except ModuleNotFoundError as exc:
            raise ModelLoadError(
                f"cannot import module {mod_part!r} for {source!r} ({exc}); is it installed or on PYTHONPATH?"
            ) from None
        except Exception as exc:
            raise ModelLoadError(
                f"importing {mod_part} failed: {type(exc).__name__}: {exc}"
            ) from exc
    fn = getattr(module, func_name, None)
    if fn is None or not callable(fn):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        raise ModelLoadError(
            f"{mod_part} has no callable {func_name!r}; callables there: {', '.join(names[:20])}"
        )
    check_factory(fn, module.__name__, source)  # before the call, never after
    return fn


def _load_factory(
    target: str, kwargs: dict[str, Any], spec: InputSpec | None, source: str
) -> LoadedModel:
    import torch

    fn = _import_factory(target, source)
    try:
        module = fn(**kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"factory {target} raised {type(exc).__name__}: {exc}. Fix the factory or its arguments."
        ) from exc
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(
            f"factory {target} returned {type(module).__name__}, expected a torch.nn.Module"
        )
    if spec is None:
        spec = _spec_from_attr(module, fn)
    if spec is None:
        raise ModelLoadError(
            f"{source}: no input spec. Give one, e.g. --input 'x:float32[batch,3,224,224]', "
            "or set an `input_spec` string attribute on the model or the factory."
        )
    return LoadedModel(
        source=source, kind="torch", input_spec=spec, module=module.eval(), format="factory"
    )


def _spec_from_attr(*objs: Any) -> InputSpec | None:
    for obj in objs:
        s = getattr(obj, "input_spec", None)
        if isinstance(s, (str, InputSpec)):
            try:
                return InputSpec.coerce(s)
            except InputSpecError as exc:
                raise ModelLoadError(
                    f"the model's input_spec attribute is invalid: {exc}"
                ) from None
    return None


def _require_file(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model file {path} does not exist; check the path")
    if not path.is_file():
        raise ModelLoadError(f"{path} is not a file")
    if path.stat().st_size == 0:
        raise ModelLoadError(f"model file {path} is empty (interrupted download or save?)")


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError):
        return False
    return any(n.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for n in names)


def _is_legacy_pickle(path: Path) -> bool:
    """A torch.save file in the pre-1.6 format: a plain pickle (protocol 2+) stream."""
    with open(path, "rb") as fh:
        head = fh.read(2)
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _load_torchscript(
    path: Path, spec: InputSpec | None, source: str, trust_pickle: bool
) -> LoadedModel:
    """A TorchScript archive, its code checked first unless the person trusts the file."""
    import torch

    from accel.models import torchscript_check

    if not trust_pickle:
        torchscript_check.scan_code(path)
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise ModelLoadError(
            f"{path} looks like TorchScript but cannot be loaded ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). The file may be truncated or from a newer torch."
        ) from None
    if not trust_pickle:
        torchscript_check.scan_module(path, module)
    spec = spec or _spec_from_attr(module)
    if spec is None:
        raise ModelLoadError(
            f"{path}: TorchScript files carry no input spec; give one with --input"
        )
    return LoadedModel(
        source=source, kind="torch", input_spec=spec, module=module.eval(), format="torchscript"
    )


def load_torch_file(
    path: Path, spec: InputSpec | None, source: str, trust_pickle: bool
) -> LoadedModel:
    import torch

    _require_file(path)
    if _is_torchscript(path):
        return _load_torchscript(path, spec, source, trust_pickle)
    legacy = not zipfile.is_zipfile(path)
    if legacy and not _is_legacy_pickle(path):
        raise ModelLoadError(
            f"{path} is neither a TorchScript archive nor a torch.save file (corrupt or truncated?)"
        )
    what = "an old-format (non-zip) torch.save pickle" if legacy else "a torch.save file"
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        if not trust_pickle:
            from accel.models.pickle_scan import file_imports

            raise ModelLoadError(
                f"{path} is {what} with pickled Python objects (e.g. a whole nn.Module), and loading it can run "
                f"arbitrary code, so it was not loaded; {file_imports(path)}. If you trust this file, pass "
                "trust_pickle=True (CLI: --trust-pickle). Safer: save a state_dict and load it as "
                f"'pkg.mod:factory@{path.name}'. (weights_only load said: {str(exc).splitlines()[0][:200]})"
            ) from None
        log.warning("trust_pickle: fully unpickling %s; this runs any code the file contains", path)
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc2:
            raise ModelLoadError(
                f"{path} ({what}): unpickling failed: {type(exc2).__name__}: {exc2}"
            ) from None
    if isinstance(obj, torch.nn.Module):
        spec = spec or _spec_from_attr(obj)
        if spec is None:
            raise ModelLoadError(f"{path}: give an input spec with --input")
        return LoadedModel(
            source=source, kind="torch", input_spec=spec, module=obj.eval(), format="pickle"
        )
    if isinstance(obj, Mapping):
        raise ModelLoadError(
            f"{path} holds a state_dict (weights only), not a model. Give the architecture too: "
            f"'pkg.mod:factory@{path}' or 'file.py:factory@{path}'."
        )
    raise ModelLoadError(f"{path} holds a {type(obj).__name__}, not a model")


def load_exported(
    path: Path, spec: InputSpec | None, source: str, trust_pickle: bool = False
) -> LoadedModel:
    import torch

    _require_file(path)
    if trust_pickle:
        log.warning("trust_pickle: %s may unpickle Python objects; this runs their code", path)
    else:
        check_pt2_archive(path)
    try:
        ep = torch.export.load(str(path))
    except Exception as exc:
        raise ModelLoadError(
            f"{path} cannot be loaded as a torch.export program ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Corrupt, truncated, or saved by another torch version."
        ) from None
    if spec is None:
        spec = _spec_from_exported(ep)
    return LoadedModel(
        source=source,
        kind="torch",
        input_spec=spec,
        module=ep.module(),
        format="exported_program",
        metadata={"exported_program": True},
    )


def _spec_from_exported(ep: Any) -> InputSpec:
    import torch

    from accel.models.inputs import TensorSpec

    tensors = []
    for i, node in enumerate(n for n in ep.graph.nodes if n.op == "placeholder"):
        spec_i = ep.graph_signature.input_specs[i]
        if spec_i.kind.name != "USER_INPUT":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        shape: list[int | str] = []
        for d in val.shape:
            shape.append(
                int(d)
                if isinstance(d, int) or str(d).isdigit()
                else ("batch" if not shape else f"d{len(shape)}")
            )
        dtype = str(val.dtype).replace("torch.", "")
        low, high = (
            (0.0, 100.0) if not val.dtype.is_floating_point and dtype != "bool" else (None, None)
        )
        tensors.append(TensorSpec(node.name, tuple(shape), dtype, low, high))
    return InputSpec(tuple(tensors))


def _load_state_dict(lm: LoadedModel, path: Path, trust_pickle: bool) -> None:
    import torch

    if lm.module is None or lm.format in ("torchscript", "exported_program"):
        raise ModelLoadError(
            "a state_dict (@weights) can only be applied to a factory or zoo model"
        )
    _require_file(path)
    try:
        sd = torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    except Exception as exc:
        raise ModelLoadError(
            f"cannot read state_dict {path} ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
            "it must be a tensor-only file saved with torch.save(model.state_dict(), path)"
        ) from None
    if isinstance(sd, Mapping) and "state_dict" in sd and isinstance(sd["state_dict"], Mapping):
        sd = sd["state_dict"]
    if not isinstance(sd, Mapping):
        raise ModelLoadError(f"{path} does not hold a state_dict (got {type(sd).__name__})")
    try:
        lm.module.load_state_dict(sd, strict=True)
    except RuntimeError as exc:
        raise ModelLoadError(
            f"{path} does not fit the model built by the factory: {str(exc).splitlines()[0]} "
            "Check the factory arguments (sizes) match the ones used for training."
        ) from None
    lm.format = f"{lm.format}+state_dict"


def torch_stats(module: Any) -> tuple[int, int, str]:
    """(parameter count, bytes of parameters and buffers, content hash) of a module."""
    import torch

    h = hashlib.sha256()
    n_params = 0
    size = 0
    seen: set[int] = set()
    try:
        state = module.state_dict()
    except Exception:  # some scripted modules
        state = {}
    for name, t in state.items():
        if not isinstance(t, torch.Tensor):
            continue
        size += t.numel() * t.element_size()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        try:
            h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        except (RuntimeError, TypeError):  # quantized / packed tensors
            h.update(repr(t).encode())
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n_params += p.numel()
    return n_params, size, h.hexdigest()
