"""Recipe -> a standalone Python script that reproduces it without the studio.

The script uses public libraries only (torch, numpy, onnx, onnxruntime, torchao,
torch-pruning), never ``accel`` or ``studio``. It builds the same model (zoo
model classes are inlined), makes the same inputs with the same seed, applies
the enabled steps in order (each pass writes its own step via ``to_script``),
saves every step's outputs and artifacts under ``--out``, and prints latency,
speedup and parity per step like ``studio run``.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accel.errors import RecipeError
from accel.generate import script as generate_script
from accel.generate.settings import is_generate
from accel.literals import doc_text
from accel.models.inputs import InputSpec, is_floating
from accel.models.runtime import runtime_for_file
from accel.privacy import SCRIPT_PREAMBLE
from accel.recipe import Recipe, load_recipe

_ZOO_CLASSES = {
    "mlp": ["MLP"],
    "resnet": ["BasicBlock", "SmallResNet"],
    "transformer": ["SelfAttention", "EncoderLayer", "MiniBert"],
    "lstm": ["LSTMClassifier"],
}

_BASE_IMPORTS = [
    "import argparse",
    "import json",
    "import math",
    "import statistics",
    "import time",
    "from pathlib import Path",
    "",
    "import numpy as np",
    "import torch",
    "import torch.nn.functional as F",
    "from torch import nn",
]

_HELPERS = '''

def as_float(outputs):
    """Outputs on CPU in float32 (single-element tuples unwrapped), for comparison."""
    if isinstance(outputs, torch.Tensor):
        t = outputs.detach()
        t = t.dequantize() if t.is_quantized else t
        t = t.cpu()
        return t.float() if t.is_floating_point() and t.dtype != torch.float64 else t
    if isinstance(outputs, (list, tuple)):
        items = [as_float(o) for o in outputs]
        return items[0] if len(items) == 1 else tuple(items)
    if isinstance(outputs, dict):
        return {k: as_float(v) for k, v in outputs.items()}
    return outputs


def leaves(outputs, prefix="out"):
    if isinstance(outputs, torch.Tensor):
        yield prefix, outputs
    elif isinstance(outputs, (list, tuple)):
        for i, o in enumerate(outputs):
            yield from leaves(o, f"{prefix}[{i}]")
    elif isinstance(outputs, dict):
        for k, o in outputs.items():
            yield from leaves(o, f"{prefix}.{k}")


def parity(reference, candidate, gates=None):
    """Worst max-abs error and cosine similarity over all outputs, and the verdict.

    ``gates`` = (rtol, atol, min_cosine) of a step with its own gates; default: the recipe's.
    """
    rtol, atol, min_cosine = gates or (RTOL, ATOL, MIN_COSINE)
    worst_abs, worst_cos, passed = 0.0, 1.0, True
    for (name, a), (_, b) in zip(leaves(reference), leaves(candidate)):
        a, b = a.double(), b.double()
        if a.shape != b.shape:
            return {"passed": False, "max_abs": float("inf"), "cosine": -1.0, "why": f"{name}: shape {tuple(b.shape)} != {tuple(a.shape)}"}
        diff = (a - b).abs()
        max_abs = float(diff.max()) if diff.numel() else 0.0
        cos = float(F.cosine_similarity(a.flatten(), b.flatten(), dim=0, eps=1e-12)) if a.numel() else 1.0
        ok = bool(torch.allclose(b, a, rtol=rtol, atol=atol)) or (min_cosine is not None and cos >= min_cosine)
        worst_abs, worst_cos, passed = max(worst_abs, max_abs), min(worst_cos, cos), passed and ok
    return {"passed": passed, "max_abs": worst_abs, "cosine": worst_cos}


def make_session(path, providers=None, options=None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    # Idle threads sleep instead of spinning (as in the studio): spinning threads would take
    # the CPU from the original model timed in the rounds between this session's calls.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for key, value in (options or {}).items():
        setattr(so, key, value)
    if THREADS:
        so.intra_op_num_threads = THREADS
    if providers is None:
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device.startswith("cuda") else ["CPUExecutionProvider"]
    providers = [p for p in providers if p in ort.get_available_providers()] or ["CPUExecutionProvider"]
    return ort.InferenceSession(str(path), sess_options=so, providers=providers)


def calibration_batches(limit=8):
    """Calibration inputs: synthetic batches from the input spec (seeds 1000, 1001, ...)."""
    return [make_inputs(seed=1000 + i) for i in range(limit)]


# What run() reads: the current model. A state is saved once for the original and swapped in
# for its timing rounds, so each step is timed against the original round by round.
STATE_NAMES = (
    "model",
    "session",
    "kind",
    "input_casts",
    "compiled",
    "request",
    "onnx_path",
    "ov_pipe",
)


def current_state():
    g = globals()
    return {k: g.get(k) for k in STATE_NAMES}


def saved_state():
    """A copy of the current model's state that later steps do not change."""
    import copy

    state = current_state()
    if state["kind"] == "torch":
        state["model"] = copy.deepcopy(state["model"])
    state["input_casts"] = dict(state["input_casts"] or {})
    return state


def sync():
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def sample_ms(batch):
    t0 = time.perf_counter()
    for _ in range(batch):
        run(inputs)
    sync()
    return (time.perf_counter() - t0) * 1e3 / batch


def warm_up(state, warmup):
    """First call and warm-up of a state; calls per sample (tiny models: several)."""
    globals().update(state)
    run(inputs)
    sync()
    fastest = float("inf")
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        run(inputs)
        sync()
        fastest = min(fastest, time.perf_counter() - t0)
    return calls_per_sample(fastest)


def time_rounds(*states):
    """Per-round medians and all samples (ms per call) of each state, timed in alternating
    rounds (A B, B A, ...); a single state is timed alone with the same rounds. The current
    model is the current one again afterwards."""
    entry = current_state()
    base_rounds = min(ROUNDS, ITERS)
    per_round = max(1, -(-ITERS // base_rounds))
    batches = [warm_up(st, WARMUP) for st in states]
    medians, samples = [[] for _ in states], [[] for _ in states]
    order = list(range(len(states)))
    rounds, timed_s = 0, 0.0
    scale = 2 // len(states)  # one state alone: its time counts twice, like two in a round
    while rounds < base_rounds or (timed_s * scale < MIN_TIME_S and rounds < max(MAX_ROUNDS, base_rounds)):
        for i in (order if rounds % 2 == 0 else order[::-1]):
            globals().update(states[i])
            got = [sample_ms(batches[i]) for _ in range(per_round)]
            medians[i].append(statistics.median(got))
            samples[i].extend(got)
            timed_s += sum(got) * batches[i] / 1e3
        rounds += 1
    globals().update(entry)
    return medians, samples


def ratio_interval(reference, candidate, confidence=0.95, resamples=2000, seed=SEED):
    """Median of the per-round ratios reference/candidate with a percentile bootstrap interval."""
    ratios = np.asarray(reference, dtype=float) / np.asarray(candidate, dtype=float)
    value = float(np.median(ratios))
    if len(ratios) == 1:
        return value, value, value
    rng = np.random.default_rng(seed)
    medians = np.median(ratios[rng.integers(0, len(ratios), size=(resamples, len(ratios)))], axis=1)
    low, high = np.quantile(medians, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return value, min(float(low), value), max(float(high), value)


def report(label, index, gates=None):
    outputs = as_float(run(inputs))
    torch.save(outputs, step_dir / "outputs.pt")
    p = parity(reference, outputs, gates)
    (ref_rounds, cand_rounds), (ref_samples, cand_samples) = time_rounds(original, current_state())
    p50_ref, p50_step = statistics.median(ref_samples), statistics.median(cand_samples)
    speedup, low, high = ratio_interval(ref_rounds, cand_rounds)
    # The interval covers the ratio of the two p50s printed beside it (as the studio's does).
    low, high = min(low, p50_ref / p50_step), max(high, p50_ref / p50_step)
    verdict = "pass" if p["passed"] else "FAIL"
    print(f"{index + 1:>3}  {label:<22} {p50_ref:>9.3f} {p50_step:>9.3f}  {speedup:>6.2f}x "
          f"[{low:.2f}-{high:.2f}]  {verdict:<4}  max_abs={p['max_abs']:.3g} cosine={p['cosine']:.6f}")
    results.append({"index": index, "step": label, "p50_ref_ms": p50_ref, "p50_step_ms": p50_step,
                    "speedup": speedup, "speedup_low": low, "speedup_high": high, **p})
'''


def kwargs_code(text: str, source: str) -> str:
    """Factory keyword arguments from a model source, re-emitted as literals (never the
    source's own text): ``in_features=16, name='x'``."""
    from accel.errors import ModelLoadError
    from accel.models.sources import _parse_kwargs

    if not text:
        return ""
    try:
        kwargs = _parse_kwargs(text, source)
    except ModelLoadError as exc:
        raise RecipeError(str(exc)) from None
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def _spec_code(spec: InputSpec, fn_name: str = "make_inputs") -> str:
    """A make_inputs(seed, dims) that produces exactly InputSpec.sample's tensors."""
    defaults = {k: d.default for k, d in spec.dims.items()}
    lines = [
        f"def {fn_name}(seed=0, dims=None):",
        f'    """The inputs of the model: {doc_text(spec)}"""',
        f"    dims = {{**{defaults!r}, **(dims or {{}})}}",
        "    gen = torch.Generator().manual_seed(seed)",
        "    out = {}",
    ]
    for t in spec.inputs:
        shape = (
            "("
            + ", ".join(f"dims[{d!r}]" if isinstance(d, str) else str(d) for d in t.shape)
            + ("," if len(t.shape) == 1 else "")
            + ")"
        )
        if t.dtype == "bool":
            expr = f"torch.randint(0, 2, {shape}, generator=gen).bool()"
        elif is_floating(t.dtype):
            if t.low is not None and t.high is not None:
                expr = f"(torch.rand({shape}, generator=gen) * ({t.high - t.low!r}) + {t.low!r}).to(torch.{t.dtype})"
            else:
                expr = f"torch.randn({shape}, generator=gen).to(torch.{t.dtype})"
        else:
            lo = int(t.low) if t.low is not None else 0
            hi = int(t.high) if t.high is not None else 100
            expr = f"torch.randint({lo}, {hi}, {shape}, generator=gen, dtype=torch.{t.dtype})"
        lines.append(f"    out[{t.name!r}] = {expr}")
    lines.append("    return out")
    return "\n".join(lines)


def _dynamic_axes(spec: InputSpec) -> dict[str, dict[int, str]]:
    axes = {
        t.name: {i: d for i, d in enumerate(t.shape) if isinstance(d, str)} for t in spec.inputs
    }
    return {k: v for k, v in axes.items() if v}


def _zoo_model_code(name: str, kw: str) -> tuple[str, list[str]]:
    """(class definitions, statements) building a zoo model as the studio does."""
    from accel.models import zoo

    if name not in _ZOO_CLASSES:
        raise RecipeError(f"unknown zoo model {name!r}")
    classes = "\n\n".join(inspect.getsource(getattr(zoo, c)) for c in _ZOO_CLASSES[name])
    cls = _ZOO_CLASSES[name][-1]
    has_bn = name == "resnet"
    defs = classes
    if has_bn:
        # The studio warms BatchNorm with the zoo model's own input spec, whatever the recipe's.
        defs += "\n\n\n" + _spec_code(
            InputSpec.parse(zoo.ZOO[name].input_spec), "make_warmup_inputs"
        )
    stmt = [
        "# The studio's demo model, built with its fixed seed.",
        "with torch.random.fork_rng(devices=[]):",
        "    torch.manual_seed(0)",
        f"    model = {cls}({kw})",
    ]
    if has_bn:
        stmt += [
            "    # Give BatchNorm non-trivial running statistics, as the studio does.",
            "    model.train()",
            "    with torch.no_grad():",
            "        for i in range(4):",
            "            model(*make_warmup_inputs(seed=100 + i, dims={'batch': 8}).values())",
        ]
    stmt += ["model = model.eval()", 'kind = "torch"']
    return defs, stmt


def _factory_model_code(target: str, src: str, kw: str, imports: list[str]) -> list[str]:
    """Statements calling the user's model factory (its import appended to ``imports``)."""
    from accel.errors import UntrustedCodeError
    from accel.trust import is_file_ref, split_code_ref

    try:
        mod, fn = split_code_ref(target, src)  # identifiers only: they are written as code
    except UntrustedCodeError as exc:
        raise RecipeError(str(exc)) from None
    if not is_file_ref(mod) and mod.split(".")[0] in sys.stdlib_module_names:
        raise RecipeError(
            f"{src!r} is not a model factory: the standard library has none, and the "
            "script would call it. Name your own factory (my_model.py:build)."
        )
    if is_file_ref(mod):
        imports.append("import importlib.util")
        stmt = [
            f"_spec = importlib.util.spec_from_file_location('user_model', {mod!r})",
            "_mod = importlib.util.module_from_spec(_spec)",
            "_spec.loader.exec_module(_mod)",
            f"model = _mod.{fn}({kw}).eval()",
        ]
    else:
        imports.append(f"from {mod} import {fn}")
        stmt = [f"model = {fn}({kw}).eval()"]
    stmt.append('kind = "torch"')
    return stmt


def _model_code(recipe: Recipe, spec: InputSpec) -> tuple[list[str], str, str]:
    """(imports, definitions, statements that set `model`/`kind`/`onnx_path`/`session`)."""
    from accel.models.runtime import runtime_for_file
    from accel.models.sources import parse_source

    src = recipe.model.source
    parts = parse_source(src)
    if parts is None:
        raise RecipeError(f"cannot export a script for model source {src!r}")
    target, kw_text, weights = parts
    kw = kwargs_code(kw_text, src)
    imports: list[str] = []
    defs = ""
    runtime = runtime_for_file(target) if ":" not in Path(target).name else None
    if target.startswith("zoo:"):
        defs, stmt = _zoo_model_code(target[4:], kw)
    elif runtime is not None:  # a model file: its runtime writes how to load it
        script = runtime.script()
        imports += [i for i in script.imports if i not in imports]
        stmt = [f"model_file = Path({target!r})", script.loads[Path(target).suffix.lower()]]
    else:
        stmt = _factory_model_code(target, src, kw, imports)
    if weights:
        stmt.append(
            f"model.load_state_dict(torch.load({weights!r}, map_location='cpu', weights_only=True))"
        )
    stmt.append("if kind == 'torch':\n    model = model.to(device)")
    return imports, defs, "\n".join(stmt)


def _source_spec(source: str) -> InputSpec:
    """The input spec of a source whose recipe gives none, read without building, loading or
    importing anything: a zoo or corpus model's registered spec, an ONNX file's declared
    inputs. Other files and factories need the recipe's spec (``studio export-script`` reads
    a model file's spec in a confined worker and passes it in)."""
    from pathlib import Path

    from accel.errors import AccelError
    from accel.trust import is_code_ref

    target = source.split("(", 1)[0].split("@", 1)[0].strip()
    try:
        if target.startswith("zoo:"):
            from accel.models.zoo import ZOO

            if target[4:] not in ZOO:
                raise RecipeError(f"unknown zoo model {target[4:]!r}; valid: {', '.join(ZOO)}")
            return InputSpec.parse(ZOO[target[4:]].input_spec)
        if target.startswith(("hf:", "tv:")):
            from accel.models.corpus import get_entry

            return InputSpec.parse(get_entry(target).input_spec)
        runtime = None if is_code_ref(source) else runtime_for_file(target)
        spec = runtime.file_input_spec(Path(target)) if runtime is not None else None
        if spec is not None:
            return spec
    except RecipeError:
        raise
    except (AccelError, OSError, ValueError) as exc:
        raise RecipeError(
            f"cannot read the input spec of {source!r} ({exc}); add input_spec to the recipe"
        ) from None
    raise RecipeError(
        f"the recipe gives no model.input_spec, and the script export does not load or import "
        f"{source!r} to find it; add input_spec to the recipe's model"
    )


def _run_helper(kinds: list[str]) -> str:
    """The script's ``run(inputs)``: one branch per model kind the script reaches, each
    written by that kind's runtime (accel.runtimes)."""
    from accel.models.runtime import get_runtime

    names = ", ".join(get_runtime(k).label for k in kinds)
    lines = [
        "def run(inputs):",
        f'    """Run the current model ({names}) on a dict of inputs."""',
        "    feed = {}",
        "    for name, x in inputs.items():",
        "        if name in input_casts and x.is_floating_point():",
        "            x = x.to(input_casts[name])",
        "        feed[name] = x",
    ]
    for i, k in enumerate(kinds):
        body = get_runtime(k).script().run_branch
        if len(kinds) == 1:
            lines.append(textwrap.indent(body, "    "))
            break
        lines.append(f"    {'if' if i == 0 else 'elif'} kind == {k!r}:")
        lines.append(textwrap.indent(body, "        "))
    if len(kinds) > 1:
        lines.append('    raise ValueError(f"no runtime for model kind {kind!r}")')
    return "\n".join(lines)


def _source_kind(target: str) -> str:
    """Kind of the model a source target loads (zoo models and factories are torch)."""
    from accel.models.runtime import runtime_for_file

    runtime = runtime_for_file(target) if ":" not in Path(target).name else None
    return runtime.kind if runtime is not None else "torch"


def _step_gates(step: Any) -> str:
    """``, gates=(rtol, atol, min_cosine)`` for a step with its own gates, else nothing."""
    g = step.gates
    return "" if g is None else f", gates=({g.rtol!r}, {g.atol!r}, {g.min_cosine!r})"


def _steps_code(
    recipe: Recipe, imports: list[str], helpers: list[str], kinds: list[str]
) -> list[str]:
    """Each enabled step's code block; its imports, helpers and output kind are added to
    ``imports``, ``helpers`` and ``kinds``."""
    from accel.passes import get_pass

    steps_code: list[str] = []
    for index, step in recipe.enabled_steps():
        cls = get_pass(step.pass_name)
        if cls.output_kind and cls.output_kind not in kinds:
            kinds.append(cls.output_kind)
        config = cls.parse_config(step.params)
        try:
            snippet = cls().to_script(config)
        except NotImplementedError:
            raise RecipeError(f"pass {step.pass_name} cannot be exported as a script yet") from None
        for line in snippet.imports:
            if line not in imports:
                imports.append(line)
        for h in snippet.helpers:
            h = textwrap.dedent(h).strip()
            if h not in helpers:
                helpers.append(h)
        dirname = f"step_{index:02d}_{step.pass_name}"
        params = ", ".join(f"{k}={v!r}" for k, v in step.params.items())
        steps_code.append(
            f"# -- step {index + 1}: {doc_text(step.label)} ({doc_text(params)})\n"
            f"step_dir = OUT / {dirname!r}\n"
            "step_dir.mkdir(parents=True, exist_ok=True)\n"
            "torch.manual_seed(SEED)\n"
            f"{textwrap.dedent(snippet.code).strip()}\n"
            f"report({step.label!r}, {index}{_step_gates(step)})\n"
        )
    return steps_code


def _timing_constants(b: Any) -> list[str]:
    """The studio's timing settings and its batching rule (accel.timing), for the script:
    the settings as literals, the rule as its own source, so both batch alike."""
    import inspect

    from accel.timing import batching, rounds
    from accel.timing.settings import TimingSettings

    t = TimingSettings.from_any(b)
    return [
        f"ROUNDS, MIN_TIME_S = {t.rounds!r}, {t.min_time_s!r}",
        f"TINY_CALL_S, TARGET_SAMPLE_S = {batching.TINY_CALL_S!r}, {batching.TARGET_SAMPLE_S!r}",
        f"MAX_BATCH, MAX_ROUNDS = {batching.MAX_BATCH!r}, {rounds.MAX_ROUNDS!r}",
        "",
        "",
        inspect.getsource(batching.calls_per_sample).rstrip(),
        "",
    ]


def _script_header(recipe: Recipe, spec: InputSpec, imports: list[str]) -> list[str]:
    """The script's docstring, imports and the recipe's settings as literals."""
    g = recipe.gates
    b = recipe.benchmark
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    seed = recipe.seed
    return [
        "#!/usr/bin/env python",
        f'"""Recipe {doc_text(recipe.name)} on {doc_text(recipe.model.source)}, exported by '
        f"Accel Studio on {stamp}.",
        "",
        "Reproduces the recipe with public libraries only: builds the model, applies each step,",
        "saves every step's outputs and artifacts under --out and prints latency, speedup and",
        "parity against the original model. Each step is timed against the original in",
        "alternating rounds; its speedup is the median of the per-round ratios [95% interval],",
        "printed beside both models' median latency from those same rounds. Models faster than",
        "a millisecond a call are timed in batches of calls, by the studio's own rule.",
        "",
        "    python this_script.py --out results/",
        '"""',
        "",
        "import os",
        "import sys",
        "",
        SCRIPT_PREAMBLE.rstrip(),
        "",
        "\n".join(i for i in imports if i not in ("import os", "import sys")),
        "",
        f"RTOL, ATOL, MIN_COSINE = {g.rtol!r}, {g.atol!r}, {g.min_cosine!r}",
        f"WARMUP, ITERS, THREADS = {b.warmup!r}, {b.iters!r}, {b.threads!r}",
        *_timing_constants(b),
        f"SEED = {seed!r}",
        "# Symbolic dims of the inputs ({input: {axis: name}}), kept dynamic by ONNX export.",
        f"DYNAMIC_AXES = {_dynamic_axes(spec)!r}",
        "# Range of each symbolic dim: name -> (min, max, default); torch.export uses min/max.",
        f"DIMS = { ({k: (d.min, d.max, d.default) for k, d in spec.dims.items()})!r}",
    ]


def recipe_to_script(recipe: Recipe | dict[str, Any] | str) -> str:
    """The whole script as text (see module docstring). Reads and writes text only: the
    model source is never imported or run, and every recipe value enters as a literal."""
    from accel.models.sources import parse_source

    recipe = load_recipe(recipe)
    spec = InputSpec.coerce(recipe.model.input_spec)
    if spec is None:
        spec = _source_spec(recipe.model.source)
    model_imports, model_defs, model_stmt = _model_code(recipe, spec)
    imports = list(_BASE_IMPORTS) + model_imports
    helpers: list[str] = []
    kinds = [_source_kind(parse_source(recipe.model.source).target)]
    steps_code = _steps_code(recipe, imports, helpers, kinds)
    helpers += _data_helpers(recipe, spec)
    generation = is_generate(recipe.benchmark)  # each step also generates (accel.generate)
    if generation:
        helpers.append(generate_script.HELPERS.strip())
    parts = [
        *_script_header(recipe, spec, imports),
        *(generate_script.script_constants(recipe.benchmark) if generation else []),
        "",
        "",
        _spec_code(spec),
        "",
        "",
        model_defs,
        "",
        "",
        _run_helper(kinds),
        "",
        "",
        _HELPERS.strip(),
        "",
        "",
        "\n\n\n".join(helpers),
        "",
        "",
        *_main_code(recipe, model_stmt, steps_code),
    ]
    return "\n".join(p for p in parts if p is not None)


def _data_helpers(recipe: Recipe, spec: InputSpec) -> list[str]:
    """The script's helpers for the recipe's data: ``calibration_batches()`` yields the
    studio's calibration batches (a file, a function, synthetic options; defined after the
    default, so it wins), ``train_batches()`` its training batches (used by qat)."""
    from accel.data import calibration_script_helper, train_script_helper

    helpers = []
    calibration = calibration_script_helper(recipe.data.calibration, spec, recipe.seed)
    if calibration:
        helpers.append(calibration.strip())
    train = train_script_helper(recipe.data.train, spec, recipe.seed)
    if train:  # training steps (qat) use train_batches() when the script defines it
        helpers.append(train.strip())
    return helpers


def _main_code(recipe: Recipe, model_stmt: str, steps_code: list[str]) -> list[str]:
    """The script's main part: its arguments, the model and its reference outputs, the
    original's row, every step, the results file."""
    dims = dict(recipe.benchmark.dims)
    generation = is_generate(recipe.benchmark)
    return [
        "parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])",
        "parser.add_argument('--out', default='recipe_out', help='folder for artifacts and outputs')",
        f"parser.add_argument('--device', default={recipe.device!r})",
        "args = parser.parse_args()",
        "OUT = Path(args.out).resolve()  # absolute: a step may work in a scratch folder",
        "OUT.mkdir(parents=True, exist_ok=True)",
        "device = args.device",
        "if THREADS:",
        "    torch.set_num_threads(THREADS)",
        "torch.manual_seed(SEED)",
        "input_casts = {}",
        "session = None",
        "onnx_path = None",
        "results = []",
        "",
        model_stmt,
        f"inputs = make_inputs(seed=SEED, dims={dims!r})",
        "reference = as_float(run(inputs))",
        "torch.save(reference, OUT / 'reference_outputs.pt')",
        "original = saved_state()  # each step is timed against it in alternating rounds",
        "# The original's own row, timed alone with the same rounds and batching as the steps.",
        "baseline_ms = statistics.median(time_rounds(original)[1][0])",
        "print(f\"     {'':<22} {'ref ms':>9} {'p50 ms':>9}  speedup [95% CI]\")",
        "print(f\"  0  {'original':<22} {baseline_ms:>9.3f} {baseline_ms:>9.3f}   1.00x\")",
        *(generate_script.baseline_lines() if generation else []),
        "torch.manual_seed(SEED)",
        "",
        "\n".join(steps_code),
        "(OUT / 'results.json').write_text(json.dumps(results, indent=2))",
        "",
    ]
