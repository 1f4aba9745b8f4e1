"""What the engine trusts, and the checks that keep files and recipes from running code.

See SECURITY.md at the repository root for the threat model. In short:

* A model source the *person running the command* names (a CLI argument, the GUI's Open
  dialog, a notebook call) may import and call code: that person chose it.
* A recipe file is data someone may have sent. A ``file.py:factory`` / ``pkg.mod:factory``
  it names (model source, data function, metric) is imported only when the caller opted
  in (``--trust-recipe-code``, a GUI confirmation). While a recipe runs, the runner marks
  code from it as untrusted with :func:`code_trust`; loaders ask :func:`require_code_trust`.
* Whatever the trust, nothing from the standard library or site-packages is called as a
  model factory unless it lives in a model library's model namespace (``torch.nn``
  classes, ``torchvision.models``, ``timm``, ``transformers``, ``diffusers``...;
  :func:`check_factory`), checked before the call.
* Full unpickling (``.pt`` modules, pickled weights inside ``.pt2``) needs ``trust_pickle``,
  which only the caller can pass; a recipe's own ``trust_pickle`` is ignored.
"""

from __future__ import annotations

import contextlib
import inspect
import keyword
import re
import site
import sys
import sysconfig
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from accel.errors import UntrustedCodeError

# True: code named by the current caller may run. The runner sets False while it loads what
# a recipe names, unless the caller passed trust_recipe_code.
_CODE_TRUSTED: ContextVar[bool] = ContextVar("accel_code_trusted", default=True)

TRUST_CODE_HINT = (
    "A recipe cannot decide by itself to import and run code. If you trust this recipe, "
    "run it again with --trust-recipe-code (in the studio: confirm when asked), or name the "
    "model yourself with --model."
)

RECIPE_TRUST_PICKLE_IGNORED = (
    "the recipe sets model.trust_pickle, which is ignored: only the person running it can "
    "allow unpickling (CLI: --trust-pickle; in the studio: the Open dialog's checkbox)"
)

# Sources the studio builds itself (its own code, no user module imported): the demo zoo,
# the corpus of real architectures (accel.models.corpus.CORPUS_PREFIXES: hf: from configs,
# tv: torchvision, timm:, diffusers: from configs; a test keeps the two lists equal),
# synthetic data.
BUILT_IN_PREFIXES = ("zoo:", "hf:", "tv:", "timm:", "diffusers:", "synthetic")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@contextlib.contextmanager
def code_trust(trusted: bool) -> Iterator[None]:
    """Within this block, code named by a recipe may run only if ``trusted``."""
    token = _CODE_TRUSTED.set(bool(trusted))
    try:
        yield
    finally:
        _CODE_TRUSTED.reset(token)


def code_trusted() -> bool:
    return _CODE_TRUSTED.get()


def is_code_ref(text: str) -> bool:
    """True if ``text`` (a model or data source) names Python code to import:
    ``file.py:name`` or ``pkg.mod:name``, optionally with ``(kwargs)`` / ``@weights``."""
    head = str(text).strip().split("(", 1)[0].split("@", 1)[0].strip()
    if head.startswith(BUILT_IN_PREFIXES) or ":" not in head:
        return False
    mod, _, _ = head.rpartition(":")
    if len(mod) == 1 and mod.isalpha():  # a Windows drive letter, C:\...
        return False
    return bool(mod)


def require_code_trust(ref: str, what: str = "model source", trusted: bool | None = None) -> None:
    """Raise UntrustedCodeError if code named by a recipe may not run right now
    (``trusted``: the caller's explicit decision; None: the current :func:`code_trust`)."""
    if not (code_trusted() if trusted is None else trusted):
        raise UntrustedCodeError(
            f"the recipe's {what} {ref!r} names Python code to import and call; it was not "
            f"imported. {TRUST_CODE_HINT}"
        )


def split_code_ref(target: str, source: str | None = None) -> tuple[str, str]:
    """``(module or file, attribute)`` of ``pkg.mod:name`` / ``file.py:name``, validated:
    the attribute is a Python identifier, a module is dotted identifiers."""
    source = source or target
    mod, _, name = target.rpartition(":")
    if not mod or not _IDENT.fullmatch(name) or keyword.iskeyword(name):
        raise UntrustedCodeError(
            f"{source!r}: expected 'file.py:factory' or 'pkg.mod:factory' where factory is a "
            f"Python name (got {name!r})"
        )
    if not is_file_ref(mod) and not all(
        _IDENT.fullmatch(p) and not keyword.iskeyword(p) for p in mod.split(".")
    ):
        raise UntrustedCodeError(
            f"{source!r}: {mod!r} is neither a .py file nor a module name like 'pkg.mod'"
        )
    return mod, name


def is_file_ref(mod: str) -> bool:
    return mod.endswith(".py") or "/" in mod or "\\" in mod


# -- where a callable comes from -----------------------------------------------------------


def _system_dirs() -> list[Path]:
    paths: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(sysconfig.get_paths()[key])
    with contextlib.suppress(Exception):
        paths.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        paths.add(site.getusersitepackages())
    out = []
    for p in paths:
        with contextlib.suppress(OSError):
            out.append(Path(p).resolve())
    return out


def _is_stdlib_module(name: str | None) -> bool:
    top = (name or "builtins").split(".", 1)[0]
    return top in sys.stdlib_module_names or top in sys.builtin_module_names


def _is_system_module(name: str | None) -> bool:
    """The module is part of the standard library or installed in site-packages."""
    if not name or _is_stdlib_module(name):
        return True  # unknown origin: treat as not the user's own code
    mod = sys.modules.get(name)
    file = getattr(mod, "__file__", None)
    if not file:
        return True  # built-in / namespace: not a user's file
    try:
        resolved = Path(file).resolve()
    except OSError:
        return True
    return any(resolved.is_relative_to(d) for d in _system_dirs())


# Where a model factory from installed packages may come from: the model namespaces of the
# libraries the studio supports. Found at (the module named) and defined in must both be one.
MODEL_LIBRARIES = ("torch.nn", "torchvision", "torchaudio", "timm", "transformers", "diffusers")


def _in_model_namespace(name: str | None) -> bool:
    """``torch.nn.*``, ``torchvision.models.*``, ``torchaudio.models.*``, ``timm`` /
    ``timm.models.*`` / ``timm.layers.*``, and ``transformers`` / ``diffusers`` (the top
    level) or their ``.models.*``: where those libraries keep their models, not their I/O,
    hub or pipeline helpers."""
    parts = (name or "").split(".")
    top = parts[0]
    if top == "torch":
        return parts[:2] == ["torch", "nn"] and (len(parts) == 2 or parts[2] != "utils")
    if top in ("torchvision", "torchaudio"):
        return len(parts) >= 2 and parts[1] == "models"
    if top in ("timm", "transformers", "diffusers"):
        return len(parts) == 1 or parts[1] in ("models", "layers")
    return False


def _is_module_class(fn: Any) -> bool:
    import torch

    return isinstance(fn, type) and issubclass(fn, torch.nn.Module)


def check_factory(fn: Any, module_name: str, ref: str) -> None:
    """Refuse, before calling it, a callable from the standard library or site-packages that
    is not in a model library's model namespace (``MODEL_LIBRARIES``): there, an
    ``nn.Module`` class, or (outside ``torch.nn``) a model-building function. The user's
    own code (their named file or package) is theirs to run.

    ``os:system``, ``subprocess:run``, ``builtins:eval`` or
    ``torch.fx.graph_module:reduce_graph_module`` never run, whoever asked: an annotation
    says nothing about what a function does."""
    defined_in = getattr(fn, "__module__", None)
    if isinstance(fn, type) or inspect.isfunction(fn) or inspect.isbuiltin(fn):
        origins = {module_name, defined_in}
    else:  # an instance with __call__, a partial...: judge by where it was found
        origins = {module_name, defined_in, type(fn).__module__}
    if not any(_is_system_module(o) for o in origins):
        return  # the user's own code (opted in above)
    in_library = all(_in_model_namespace(o) for o in origins)
    is_torch = any((o or "").split(".")[0] == "torch" for o in origins)
    if in_library and (_is_module_class(fn) or (inspect.isfunction(fn) and not is_torch)):
        return
    raise UntrustedCodeError(
        f"{ref!r} is not a model factory the studio calls: "
        f"{getattr(fn, '__qualname__', type(fn).__name__)} (from {defined_in or module_name}) "
        "is not an nn.Module class or model function of a model library (torch.nn, "
        "torchvision.models, timm, transformers, diffusers), and other callables from the "
        "standard library or installed packages are never called as model factories. Write "
        "a small factory in your own file (my_model.py:build) that returns the nn.Module."
    )


def check_function(fn: Any, module_name: str, ref: str, what: str = "data function") -> None:
    """Refuse, before calling it, a data or metric function from the standard library
    (``os:getcwd``, ``os:fork``...): those are never data sources."""
    origins = {module_name, getattr(fn, "__module__", None)}
    if not inspect.isfunction(fn) and not isinstance(fn, type):
        origins.add(type(fn).__module__)
    bad = sorted(o for o in origins if o and _is_stdlib_module(o)) or (
        ["an unknown module"] if not any(origins) else []
    )
    if bad:
        raise UntrustedCodeError(
            f"{what} {ref!r} comes from the Python standard library ({bad[0]}), which holds "
            "no data sources or metrics; it was not called. Write the function in your own "
            "file (my_data.py:batches)."
        )


def recipe_code_refs(recipe: Any) -> list[str]:
    """The code a recipe (a Recipe or its dict) would import and call: its model source and
    data / metric functions that are ``file.py:name`` or ``pkg.mod:name`` references."""
    data = recipe.to_dict() if hasattr(recipe, "to_dict") else dict(recipe or {})
    model = data.get("model")
    refs = [model.get("source") if isinstance(model, dict) else model]
    d = data.get("data") if isinstance(data.get("data"), dict) else {}
    for key in ("calibration", "train", "eval", "metric"):
        value = d.get(key)
        if isinstance(value, str) and value.startswith("synthetic-labelled"):
            value = value.partition(":")[2]  # the teacher model's source
        refs.append(value)
    return [r for r in refs if isinstance(r, str) and is_code_ref(r)]
