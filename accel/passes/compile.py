"""torch.compile pass: graph capture with Dynamo and code generation by a backend."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from accel.models.forms import COMPILED, EAGER, EXPORTED
from accel.passes.base import (
    STAGE_LOWER,
    Choice,
    Pass,
    PassConfig,
    PassContext,
    Requirements,
    ScriptStep,
    SearchSpec,
    register_pass,
)

if TYPE_CHECKING:
    from accel.models.loaded import LoadedModel

log = logging.getLogger(__name__)


class CompileConfig(PassConfig):
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = (
        Field(
            "default",
            description="inductor mode: reduce-overhead uses CUDA graphs, max-autotune benchmarks kernels",
        )
    )
    backend: str = Field(
        "inductor", description="torch.compile backend: inductor, aot_eager, eager, cudagraphs..."
    )
    fullgraph: bool = Field(
        False, description="fail on any graph break instead of falling back to Python"
    )
    dynamic: bool | None = Field(
        None, description="dynamic shapes: true, false, or null to decide automatically"
    )
    explain: bool = Field(
        True, description="record graph breaks and their reasons (torch._dynamo.explain)"
    )


def _explain(module, args, ctx: PassContext) -> list[dict[str, str]]:
    """Graph count and graph breaks with their reasons into ctx.details; returns the breaks."""
    import torch

    try:
        with torch.inference_mode():
            out = torch._dynamo.explain(module)(*args)
    except Exception as exc:  # noqa: BLE001 - explain is advisory; compile itself decides
        ctx.details["explain_error"] = (
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
        return []
    breaks = []
    for r in out.break_reasons:
        where = ""
        if r.user_stack:
            f = r.user_stack[-1]
            where = f"{f.filename}:{f.lineno} in {f.name}"
        breaks.append({"reason": str(r.reason).splitlines()[0][:300], "where": where})
    ctx.details["graph_count"] = out.graph_count
    ctx.details["graph_breaks"] = len(breaks)
    ctx.details["graph_break_reasons"] = breaks
    ctx.metrics["graph_breaks"] = float(len(breaks))
    return breaks


def _check_settings(module: Any, config: CompileConfig, ctx: PassContext) -> None:
    """Refuse what cannot compile; warn about settings that do nothing or cost much here."""
    import torch

    from accel.errors import PassError

    if isinstance(module, torch.jit.ScriptModule):
        raise PassError(
            "compile cannot compile a TorchScript module; put compile before torchscript, or drop one."
        )
    backends = torch._dynamo.list_backends(exclude_tags=())
    if config.backend not in backends:
        raise PassError(
            f"compile: unknown backend {config.backend!r}; available: {', '.join(backends)}"
        )
    if config.mode != "default" and config.backend != "inductor":
        raise PassError(
            f"compile: mode {config.mode!r} is an inductor mode; set backend: inductor or mode: default."
        )
    on_cpu = not str(ctx.device).startswith("cuda")
    if on_cpu and config.mode == "reduce-overhead":
        ctx.warn(
            "mode reduce-overhead uses CUDA graphs, which do nothing on CPU; it behaves like default here."
        )
    if on_cpu and config.mode.startswith("max-autotune") and config.backend == "inductor":
        ctx.warn(
            "max-autotune on CPU benchmarks many kernel variants: compilation takes much longer."
        )


@register_pass
class Compile(Pass):
    name = "compile"
    search = SearchSpec(
        stage=STAGE_LOWER,
        params={"mode": Choice(("default", "max-autotune-no-cudagraphs"))},
        fixed={"explain": False},
    )
    summary = "torch.compile the model (Dynamo + inductor or another backend); compile time reported apart."
    category = "compile"
    Config = CompileConfig
    requires = Requirements(
        model_kinds=("torch",),
        note="inductor needs a C++ compiler; first call compiles",
        accepts=(EAGER, EXPORTED),
        produces=COMPILED,
    )

    def apply(self, model: LoadedModel, config: CompileConfig, ctx: PassContext) -> LoadedModel:
        import torch

        from accel.errors import PassError

        module = model.module
        _check_settings(module, config, ctx)
        args = list(model.prepare_inputs(ctx.inputs).values())
        ctx.details["backend"] = config.backend
        ctx.details["mode"] = config.mode
        if config.explain:
            ctx.progress(0.05, "looking for graph breaks")
            breaks = _explain(module, args, ctx)
            if breaks and config.fullgraph:
                b = breaks[0]
                raise PassError(
                    f"compile with fullgraph: the model has {len(breaks)} graph break(s); first: {b['reason']} "
                    f"at {b['where'] or '?'}. Rewrite that code or set fullgraph: false."
                )
            if breaks:
                ctx.warn(
                    f"{len(breaks)} graph break(s); first: {breaks[0]['reason']} at {breaks[0]['where'] or '?'}"
                )
        compiled = torch.compile(
            module,
            backend=config.backend,
            mode=None if config.mode == "default" else config.mode,
            fullgraph=config.fullgraph,
            dynamic=config.dynamic,
        )
        new = model.replace(module=compiled, metadata={**model.metadata, "compiled": True})
        # Compile now, on the run's inputs and in inference mode like the benchmark, so the
        # compile time is measured apart and never mixed into the latency numbers.
        ctx.progress(0.2, f"compiling with {config.backend}")
        t0 = time.perf_counter()
        try:
            new.forward(ctx.inputs)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            hint = " Try backend: aot_eager or eager to see whether the backend or the graph capture fails."
            if config.fullgraph:
                hint = " Set fullgraph: false to let it fall back to Python at graph breaks."
            raise PassError(
                f"torch.compile ({config.backend}) failed: {type(exc).__name__}: {first}.{hint}"
            ) from None
        ctx.metrics["compile_time_s"] = time.perf_counter() - t0
        ctx.details["compile_time_s"] = round(ctx.metrics["compile_time_s"], 3)
        return new

    def to_script(self, config: CompileConfig) -> ScriptStep:
        kwargs = [f"backend={config.backend!r}"]
        if config.mode != "default":
            kwargs.append(f"mode={config.mode!r}")
        if config.fullgraph:
            kwargs.append("fullgraph=True")
        if config.dynamic is not None:
            kwargs.append(f"dynamic={config.dynamic}")
        code = (
            f"model = torch.compile(model, {', '.join(kwargs)})\n"
            "# The first call compiles; time it apart from the latency.\n"
            "t0 = time.perf_counter()\n"
            "run(inputs)\n"
            "print(f'    compile time {time.perf_counter() - t0:.2f} s')\n"
        )
        return ScriptStep(code=code)
