"""The text of `studio show`: a recorded run's header, its steps table (timings, size,
parity), each step's metrics, parameters, parity and artifacts, and the log's last lines."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from studio.commands._table import fmt_bytes, fmt_duration, fmt_num, fmt_when, render_table
from studio.fmt import NOISY_MARK, is_noisy
from studio.generation_columns import CLI_HEADERS, GENERATION_NOTE, cli_rows
from studio.tables import TIMING_HEADERS, parity_verdict, step_verdict, timing_cells

if TYPE_CHECKING:
    from studio.store.records import RunDetail, StepRecord


def print_run(d: RunDetail) -> None:
    """Print one run (see the module docstring)."""
    _print_header(d)
    if d.steps:
        print()
        _print_steps_table(d.steps)
        for st in d.steps:
            _print_step_details(st)
    if d.log_tail and d.run.status != "succeeded":
        print("\nlast log lines:")
        print("\n".join("  " + line for line in d.log_tail.splitlines()[-15:]))


def _print_header(d: RunDetail) -> None:
    """The run's identity, model, recipe, device, times, tags, notes, environment, folder
    and how it ended when it failed."""
    r = d.run
    print(f"run {r.id}  {r.status}")
    if r.name:
        print(f"name      {r.name}")
    print(f"model     {r.model_source or '-'} ({r.model_kind or '?'})")
    print(f"recipe    {r.recipe_name or '-'} [{r.recipe_hash[:12]}]")
    print(f"device    {r.device or '-'}")
    print(f"created   {fmt_when(r.created_at)}   took {fmt_duration(r.duration_s)}")
    if r.parent_run_id:
        print(f"re-run of {r.parent_run_id}")
    if r.tags:
        print(f"tags      {', '.join(r.tags)}")
    if r.notes:
        print(f"notes     {r.notes}")
    env = d.environment
    if env:
        keys = [k for k in ("torch", "onnxruntime", "python", "cpu", "gpu", "cuda") if env.get(k)]
        print("env       " + " | ".join(f"{k} {env[k]}" for k in keys))
    if d.run_dir:
        print(f"folder    {d.run_dir}")
    if r.error:
        print(f"error     {r.error}")
    if d.signal or (d.exit_code not in (None, 0)):
        print(f"worker    exit code {d.exit_code} {d.signal}".rstrip())


def _print_steps_table(steps: list[StepRecord]) -> None:
    """One row per step (the original first) and which steps were timed noisily."""
    rows = [
        [
            "0" if st.index < 0 else str(st.index + 1),
            "original" if st.index < 0 else st.pass_name,
            st.status,
            fmt_duration(st.duration_s) if st.index >= 0 else "-",
            *timing_cells(st.timing),
            fmt_bytes(st.metrics.get("size_bytes")),
            step_verdict(st.status, st.parity_passed, st.index) if st.index >= 0 else "-",
            _worst(st) if st.index >= 0 else "",
        ]
        for st in steps
    ]
    headers = ["#", "step", "status", "time", *TIMING_HEADERS, "size", "parity", "worst"]
    print(render_table(headers, rows, "llllrrrrll"))
    gen = cli_rows([(st.index, st.pass_name, st.metrics) for st in steps])
    if gen:
        print()
        print(render_table(CLI_HEADERS, gen, "ll" + "r" * (len(CLI_HEADERS) - 2)))
        print(GENERATION_NOTE)
    noisy = [st for st in steps if st.index >= 0 and is_noisy(st.timing)]
    if noisy:
        why = next((r for st in noisy if (r := st.timing.noise_reason)), "")
        print(
            f"{NOISY_MARK} noisy timing in step(s) "
            f"{', '.join(str(st.index + 1) for st in noisy)}: {why or 'see the step details'}"
        )


def _worst(step: StepRecord) -> str:
    """The step's worst parity metric, or its error's first line."""
    worst = step.worst_parity()
    if worst is None:
        return step.error.splitlines()[0][:60] if step.error else ""
    out, key, value = worst
    return f"{out}: {key}={fmt_num(value, 3)}"


def _print_step_details(st: StepRecord) -> None:
    """A step's metrics, parameters, parity per output, artifacts and error."""
    label = "original" if st.index < 0 else f"step {st.index + 1} {st.pass_name}"
    if st.metrics:
        items = ", ".join(f"{k}={fmt_num(v)}" for k, v in sorted(st.metrics.items()))
        print(f"\n{label}: {items}")
    if st.params:
        print(f"  params: {json.dumps(st.params)}")
    for p in st.parity:
        verdict = parity_verdict(p.passed)
        items = ", ".join(f"{k}={fmt_num(v)}" for k, v in sorted(p.metrics.items()))
        print(f"  parity {p.output_name}: {verdict}  {items}")
    for a in st.artifacts:
        print(f"  artifact {a.kind}: {a.path} ({fmt_bytes(a.bytes)}, sha256 {a.sha256[:12]})")
    if st.error:
        print(f"  error: {st.error}")
