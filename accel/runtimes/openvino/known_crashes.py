"""Compile settings that crash OpenVINO's CPU plugin, refused before they take a process down.

OpenVINO 2026.4's CPU plugin dies with SIGFPE (an integer division by zero, no exception)
when it compiles a transformer's gated MLP (``down(act(gate(x)) * up(x))``, which it fuses
into its AMX ``LLMMLP`` kernel) in bf16 on exactly one inference thread. Reproduced on this
project's Sapphire Rapids machine with hf:llama_small's IR: bf16 on 2 threads, f32 on 1
thread and int8 weights on 1 thread compile; bf16 on 1 thread kills the process, also with
the hint left to the plugin (which picks bf16 on AMX). Upstream: openvinotoolkit/openvino
issue 33300 (a Llama under ``taskset -c 0``).

``check_compile(model, config, device)`` raises a ``PassError`` that names the setting to
change instead; every compile of an IR in the studio goes through it. ``safe_config`` first
turns a precision the studio chose (``precision: auto``, session option ``precision_auto``)
into f32 where bf16 would crash: the recipe did not ask for bf16, so it runs what works.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Mapping
from typing import Any

from accel.errors import PassError

log = logging.getLogger(__name__)


def _is_float_weight(out):
    """A MatMul's weight input: a floating constant, or one decompressed by a Convert (f16
    weights in an IR). Integer weights (NNCF's u8/u4 with scales) are not fused that way."""
    node = out.get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    kind = node.get_element_type().get_type_name()
    return node.get_type_name() == "Constant" and kind in ("f32", "f16", "bf16")


def _float_matmul(out):
    node = out.get_node()
    if node.get_type_name() != "MatMul" or not _is_float_weight(node.input_value(1)):
        return None
    return node


def gated_mlp(model):
    """The friendly name of the first gated MLP's down projection in ``model`` (an
    ``ov.Model``): ``MatMul(Multiply(act(MatMul(x, Wg)), MatMul(x, Wu)), Wd)`` with float
    weights and both inner MatMuls on the same ``x``; None when it has none."""
    for node in model.get_ordered_ops():
        if node.get_type_name() != "MatMul" or not _is_float_weight(node.input_value(1)):
            continue
        mul = node.input_value(0).get_node()
        if mul.get_type_name() != "Multiply":
            continue
        a, b = (mul.input_value(i).get_node() for i in range(2))
        for act, other in ((a, b), (b, a)):
            if act.get_type_name() not in ("Swish", "Gelu", "HSwish", "Mish"):
                continue
            gate = _float_matmul(act.input_value(0))
            up = _float_matmul(other.output(0)) if other.get_output_size() else None
            if gate is None or up is None:
                continue
            if gate.input_value(0) == up.input_value(0):
                return node.get_friendly_name()
    return None


def _threads(config: Mapping[str, Any]) -> int:
    if config.get("INFERENCE_NUM_THREADS"):
        return int(config["INFERENCE_NUM_THREADS"])
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _precision(config: Mapping[str, Any], device: str) -> str:
    """The inference precision the CPU plugin will use: the hint, else what it picks."""
    from accel.hardware import cpu_features

    hint = str(config.get("INFERENCE_PRECISION_HINT") or "").lower()
    if hint:
        return hint
    return "bf16" if device.upper() == "CPU" and cpu_features().amx_bf16 else "f32"


def crash_reason(model: Any, config: Mapping[str, Any], device: str = "CPU") -> str | None:
    """Why compiling ``model`` with ``config`` on ``device`` would crash the process, or
    None. Only the known case: a gated MLP in bf16/f16 on one thread of an AMX CPU."""
    from accel.hardware import cpu_features

    if device.upper() != "CPU" or not cpu_features().amx_bf16:
        return None
    precision = _precision(config, device)
    if precision not in ("bf16", "f16") or _threads(config) != 1:
        return None
    where = gated_mlp(model)
    if where is None:
        return None
    chosen = "set" if config.get("INFERENCE_PRECISION_HINT") else "left to the plugin, which picks"
    return (
        f"not compiled: OpenVINO's CPU plugin would kill the process (SIGFPE) compiling a "
        f"gated MLP ({where}) in {precision} on one thread (openvinotoolkit/openvino issue "
        f"33300); the precision was {chosen} {precision} and the threads are 1. Use "
        "precision: f32, or 2 or more threads, or compress the weights to int8/int4 first"
    )


def check_compile(model: Any, config: Mapping[str, Any], device: str = "CPU") -> None:
    """Raise PassError where ``crash_reason`` knows the compile would crash."""
    why = crash_reason(model, config, device)
    if why:
        raise PassError(why)


def safe_config(
    model: Any, config: dict[str, Any], options: Mapping[str, Any], device: str = "CPU"
) -> dict[str, Any]:
    """``config`` for compiling ``model``: f32 in place of a bf16 the studio chose itself
    (``options["precision_auto"]``) where bf16 would crash (logged); then ``check_compile``."""
    why = crash_reason(model, config, device) if options.get("precision_auto") else None
    if why:
        log.warning("precision auto runs f32 here: %s", why)
        config = {**config, "INFERENCE_PRECISION_HINT": "f32"}
    check_compile(model, config, device)
    return config


# The exported script's side: the same check on the IR it compiles (the functions above as
# source, annotation-free, and this one), so a script of an auto step runs what the studio ran.
SCRIPT_CRASH_FREE = '''
def ov_crash_free(ov_model, ov_config, wanted, device="CPU"):
    """OpenVINO's CPU plugin dies (SIGFPE) compiling a gated MLP in bf16 on one thread of an
    AMX CPU (openvinotoolkit/openvino issue 33300): precision auto runs f32 there, as the
    studio does; a bf16 asked for stops here with the reason instead of killing the script."""
    try:
        with open("/proc/cpuinfo") as f:
            amx = "amx_bf16" in f.read()
    except OSError:
        amx = False
    threads = ov_config.get("INFERENCE_NUM_THREADS") or (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    )
    hint = str(ov_config.get("INFERENCE_PRECISION_HINT") or ("bf16" if amx else "f32")).lower()
    if device != "CPU" or not amx or threads != 1 or hint not in ("bf16", "f16"):
        return ov_config
    where = gated_mlp(ov_model)
    if where is None:
        return ov_config
    if wanted == "auto":
        print(f"precision auto runs f32: {hint} on one thread crashes OpenVINO on {where}")
        return {**ov_config, "INFERENCE_PRECISION_HINT": "f32"}
    raise SystemExit(
        f"not compiled: OpenVINO's CPU plugin would crash compiling the gated MLP {where} "
        f"in {hint} on one thread: use precision f32, or 2 or more threads"
    )
'''


def script_helpers() -> list[str]:
    """The exported script's helpers (it imports os and openvino as ov): ``ov_crash_free``
    and the pattern functions it calls."""
    funcs = (_is_float_weight, _float_matmul, gated_mlp)
    return [*(inspect.getsource(f) for f in funcs), SCRIPT_CRASH_FREE]
