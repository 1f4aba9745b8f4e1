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
from typing import Any

from accel.errors import InputSpecError, ModelLoadError
from accel.models.corpus import CORPUS_PREFIXES
from accel.models.inputs import InputSpec
from accel.models.loaded import LoadedModel
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
    m = _SOURCE_RE.match(source)
    if not m:
        raise ModelLoadError(f"cannot read model source {source!r}")
    target, kw_text, weights = m.group("target").strip(), m.group("kwargs"), m.group("weights")
    kwargs = dict(_parse_kwargs(kw_text, source) if kw_text else {})
    kwargs.update(factory_kwargs or {})

    path = Path(target)
    suffix = path.suffix.lower()
    if target.startswith("zoo:"):
        lm = _load_zoo(target[4:], kwargs, spec, source)
    elif target.startswith(CORPUS_PREFIXES):
        lm = _load_corpus(target, kwargs, spec, source)
    elif suffix == ".onnx":
        lm = _load_onnx(path, spec, source)
    elif suffix == ".xml":
        from accel.backends import get_backend

        lm = get_backend("openvino").load(path, spec, source)
    elif suffix == ".pt2":
        lm = _load_exported(path, spec, source, trust_pickle)
    elif suffix in (".pt", ".ts", ".pth", ".jit") and ":" not in path.name:
        lm = _load_torch_file(path, spec, source, trust_pickle)
    elif ":" in target:
        require_code_trust(source, trusted=trust_code)
        lm = _load_factory(target, kwargs, spec, source)
    else:
        if not path.exists():
            raise ModelLoadError(
                f"model source {source!r} not found. Give a file (.onnx, .pt, .ts, .pt2), "
                "a zoo model (zoo:mlp, zoo:resnet, zoo:transformer, zoo:lstm) or a factory (pkg.mod:factory)."
            )
        raise ModelLoadError(
            f"unsupported model file type {suffix!r} for {source!r}; use .onnx, .xml (OpenVINO IR), .pt, .ts or .pt2"
        )

    if weights:
        _load_state_dict(lm, Path(weights), trust_pickle)
    lm.backend.finish_load(lm, device, validate)  # stats, device, a test forward
    return lm


# -- helpers ------------------------------------------------------------------------------


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelLoadError(
                f"device {device!r} asked for, but no CUDA GPU is available here; use device 'cpu'"
            )
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"device {device!r} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif device != "cpu":
        raise ModelLoadError(f"unknown device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")


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


def _load_torch_file(
    path: Path, spec: InputSpec | None, source: str, trust_pickle: bool
) -> LoadedModel:
    import torch

    _require_file(path)
    if _is_torchscript(path):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise ModelLoadError(
                f"{path} looks like TorchScript but cannot be loaded ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}). The file may be truncated or from a newer torch."
            ) from None
        spec = spec or _spec_from_attr(module)
        if spec is None:
            raise ModelLoadError(
                f"{path}: TorchScript files carry no input spec; give one with --input"
            )
        return LoadedModel(
            source=source, kind="torch", input_spec=spec, module=module.eval(), format="torchscript"
        )
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
            raise ModelLoadError(
                f"{path} is {what} with pickled Python objects (e.g. a whole nn.Module), and loading it can run "
                "arbitrary code, so it was not loaded. If you trust this file, pass trust_pickle=True "
                f"(CLI: --trust-pickle). Safer: save a state_dict and load it as 'pkg.mod:factory@{path.name}'. "
                f"(weights_only load said: {str(exc).splitlines()[0][:200]})"
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


_PT2_PICKLE_HINT = (
    "If you trust this file, pass trust_pickle=True (CLI: --trust-pickle). Safer: re-save it "
    "with torch.export.save from a model whose weights are plain tensors."
)


def check_pt2_archive(path: Path) -> None:
    """Refuse a .pt2 archive that would make torch unpickle anything but tensors.

    torch.export.load unpickles with ``weights_only=False`` every weight or constant whose
    config entry says ``use_pickle``, custom/opaque objects, and sample inputs that fail a
    weights-only load. This reads the archive's configs *before* torch touches it and accepts
    a pickled entry only if it loads with ``weights_only=True`` (tensors, and torchao's
    quantized tensor classes, as the runner's own int8 steps save them).
    """
    import json

    try:
        with zipfile.ZipFile(path) as z:
            names = [i.filename for i in z.infolist()]
            if len(set(names)) != len(names):
                raise ModelLoadError(
                    f"{path}: the archive holds several entries with the same name; refused "
                    "(a reader could pick a different one than the check). " + _PT2_PICKLE_HINT
                )
            roots = {n.split("/", 1)[0] for n in names}
            if len(roots) != 1 or any(".." in n.split("/") for n in names):
                raise ModelLoadError(f"{path}: not a torch.export archive (unexpected layout)")
            root = roots.pop()
            if f"{root}/archive_format" not in names:
                raise ModelLoadError(
                    f"{path} is in the old torch.export format, which unpickles its contents; "
                    "it is loaded only with trust_pickle. " + _PT2_PICKLE_HINT
                )
            for name in names:
                rel = name[len(root) + 1 :]
                if rel in ("data/weights/model_weights_config.json",):
                    _check_pt2_config(path, z, name, f"{root}/data/weights/")
                elif rel == "data/constants/model_constants_config.json":
                    _check_pt2_config(path, z, name, f"{root}/data/constants/")
                elif rel.startswith("data/sample_inputs/") and not name.endswith("/"):
                    why = _not_weights_only(z.read(name))
                    if why:
                        raise ModelLoadError(
                            f"{path}: its sample inputs ({name}) hold pickled Python objects "
                            f"({why}), which torch would unpickle; not loaded. " + _PT2_PICKLE_HINT
                        )
    except zipfile.BadZipFile:
        raise ModelLoadError(f"{path} is not a torch.export archive (not a zip file)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError) as exc:
        raise ModelLoadError(f"{path}: malformed archive ({type(exc).__name__}: {exc})") from None


_PT2_ENTRY = re.compile(r"[A-Za-z0-9_.\-]+")


def _check_pt2_config(path: Path, z: zipfile.ZipFile, name: str, folder: str) -> None:
    import json

    data = json.loads(z.read(name).decode("utf-8"))
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: malformed archive config {name}")
    for fqn, meta in config.items():
        if not isinstance(meta, dict):
            raise ModelLoadError(f"{path}: malformed entry {fqn!r} in {name}")
        path_name = str(meta.get("path_name", ""))
        if not _PT2_ENTRY.fullmatch(path_name) or ".." in path_name:
            raise ModelLoadError(f"{path}: bad file name {path_name!r} for {fqn!r} in {name}")
        if path_name.startswith(("custom_obj", "opaque_obj")):
            why = "a custom Python object"
        elif meta.get("use_pickle") is not False:
            why = _not_weights_only(z.read(folder + path_name))
        else:
            continue
        if why:
            raise ModelLoadError(
                f"{path}: {fqn!r} is stored as a pickled Python object ({name}: "
                f"{path_name!r}: {why}), and loading it can run arbitrary code, so the file was "
                "not loaded. " + _PT2_PICKLE_HINT
            )


def _pickle_globals(data: bytes) -> set[tuple[str, str]]:
    """The (module, name) globals a torch.save payload's pickle refers to, read without
    unpickling (pickletools only decodes the opcodes)."""
    import io
    import pickletools

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            pkl = next(n for n in z.namelist() if n.endswith("data.pkl"))
            data = z.read(pkl)
    except (zipfile.BadZipFile, StopIteration):
        pass  # a legacy (non-zip) stream: read its first pickle as is
    found: set[tuple[str, str]] = set()
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(data)):
            if op.name == "GLOBAL":
                mod, _, name = str(arg).partition(" ")
                found.add((mod, name))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.add((strings[-2], strings[-1]))
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # noqa: BLE001 - a malformed stream fails the weights-only load anyway
        pass
    return found


def _not_weights_only(data: bytes) -> str | None:
    """None if ``data`` (a torch.save payload) loads with ``weights_only=True`` — allowing
    torchao's tensor classes, which the runner's quantized steps save — else the reason."""
    import importlib
    import io

    import torch

    extra = []
    for mod, name in _pickle_globals(data):
        if mod.split(".", 1)[0] != "torchao":
            continue
        try:
            obj = getattr(importlib.import_module(mod), name)
        except Exception:  # noqa: BLE001 - unknown name: the load below refuses it
            continue
        if isinstance(obj, type):  # classes only, never a torchao function
            extra.append(obj)
    try:
        with torch.serialization.safe_globals(extra):
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - anything but tensors
        return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return None


def _load_exported(
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


def _load_onnx(path: Path, spec: InputSpec | None, source: str) -> LoadedModel:
    from accel.models.onnx_io import check_external_data, spec_from_onnx

    _require_file(path)
    data_files = check_external_data(path)
    inferred = spec_from_onnx(path)
    if spec is None:
        spec = inferred
    elif [t.name for t in spec.inputs] != [t.name for t in inferred.inputs]:
        raise ModelLoadError(
            f"input spec names {spec.names} do not match the ONNX model's inputs {inferred.names}"
        )
    h = hashlib.sha256()
    size = 0
    for f in [path, *data_files]:
        size += f.stat().st_size
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    n_params = 0
    for init in proto.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        n_params += n
    return LoadedModel(
        source=source,
        kind="onnx",
        input_spec=spec,
        onnx_path=path,
        num_params=n_params,
        size_bytes=size,
        content_hash=h.hexdigest(),
        format="onnx",
        metadata={
            "opset": max(
                (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None
            )
        },
    )


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


def _fill_torch_stats(lm: LoadedModel) -> None:
    lm.num_params, lm.size_bytes, lm.content_hash = torch_stats(lm.module)


def _validate_forward(lm: LoadedModel) -> None:
    try:
        inputs = lm.example_inputs()
    except InputSpecError as exc:  # e.g. too large for the memory available
        raise ModelLoadError(f"cannot build inputs for the spec '{lm.input_spec}': {exc}") from None
    try:
        lm.forward(inputs)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelLoadError(
            f"the model does not accept inputs of the spec '{lm.input_spec}': {type(exc).__name__}: {first}. "
            "Give the right input spec (names, shapes, dtypes), e.g. --input 'x:float32[batch,3,224,224]'."
        ) from None
