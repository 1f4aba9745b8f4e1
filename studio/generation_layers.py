"""What the CLI and the Profile panel show of a per-layer generation profile (no Qt): the
prefill / decode split by group, the top layers by decode time, how much of the TTFT and
TPOT the layers explain, and the KV cache's growth (``accel.profile.generation``)."""

from __future__ import annotations

from typing import Any

from studio.fmt import fmt_bytes, fmt_ms
from studio.tables import Column, cli_table

KV_LINES = 8  # lengths the CLI prints of the KV growth


def _pct(v: float) -> str:
    return f"{v:.1f}%"


def _share(value: float, whole: float | None) -> float | None:
    return 100.0 * value / whole if whole else None


def group_columns(gen: Any) -> list[Column]:
    """Per group: prefill ms and share of the TTFT, decode ms per token and share of TPOT."""
    return [
        Column("group", lambda g: g.group),
        Column("prefill ms", lambda g: g.prefill_ms, fmt_ms),
        Column("% TTFT", lambda g: _share(g.prefill_ms, gen.ttft_ms), _pct),
        Column("decode ms/token", lambda g: g.decode_ms if gen.tpot_ms else None, fmt_ms),
        Column("% TPOT", lambda g: _share(g.decode_ms, gen.tpot_ms), _pct),
    ]


def split_columns() -> list[Column]:
    """The layers' table of a generation profile: self times per phase, group, calls."""
    return [
        Column("layer", lambda r: r.name or "(root)"),
        Column("type", lambda r: r.type),
        Column("group", lambda r: r.group),
        Column("prefill ms", lambda r: r.prefill_ms, fmt_ms),
        Column("decode ms/token", lambda r: r.decode_ms, fmt_ms),
        Column("decode incl. ms", lambda r: r.decode_inclusive_ms, fmt_ms),
        Column("calls/token", lambda r: r.calls, str),
    ]


def coverage_line(gen: Any) -> str:
    """How much of the plain TTFT and TPOT the layers' self times add up to."""
    parts = [
        f"layer self times add up to {100 * (gen.prefill_coverage or 0):.1f}% of the TTFT "
        f"({fmt_ms(gen.ttft_ms)} ms)"
    ]
    if gen.tpot_ms:
        parts.append(
            f"{100 * (gen.decode_coverage or 0):.1f}% of the TPOT ({fmt_ms(gen.tpot_ms)} ms)"
        )
    return " and ".join(parts) + f"; {gen.rounds} hooked rounds beside plain ones"


def kv_formula(gen: Any) -> str:
    """The KV cache's kind and closed-form size per cached position."""
    per = gen.kv_bytes_per_token
    size = "unknown size per position" if per is None else f"{fmt_bytes(per)} per position"
    return (
        f"KV cache ({gen.kv_cache}): {size} (2 x layers x kv heads x head size x dtype bytes "
        f"x batch {gen.batch})"
    )


def kv_rows(gen: Any, n: int = KV_LINES) -> list[tuple[int, int]]:
    """At most ``n`` (length, bytes) points of the growth, evenly spread, the last kept."""
    pts = list(zip(gen.kv_lengths, gen.kv_bytes, strict=False))
    if len(pts) <= n:
        return pts
    step = (len(pts) - 1) / (n - 1)
    return [pts[round(i * step)] for i in range(n)]


def kv_columns(gen: Any) -> list[Column]:
    per = gen.kv_bytes_per_token
    return [
        Column("cached positions", lambda p: p[0], str),
        Column("KV bytes", lambda p: p[1], fmt_bytes),
        Column("closed form", lambda p: None if per is None else p[0] * per, fmt_bytes),
    ]


def split_text(gen: Any, top: int = 10) -> str:
    """The CLI's section: groups, coverage, top layers by decode time, the KV growth."""
    head = (
        f"generation per layer: prefill of {gen.prompt_tokens} tokens, decode per token over "
        f"{gen.new_tokens - 1} steps, batch {gen.batch}"
    )
    # The root's own code counts in "other"; as a layer it would only repeat the model.
    layers = [r for r in gen.top(len(gen.rows), "decode") if r.name][:top]
    parts = [
        head,
        cli_table(group_columns(gen), gen.groups()),
        coverage_line(gen),
        "",
        f"top {len(layers)} layers by decode time per token:",
        cli_table(split_columns(), layers),
        "",
        kv_formula(gen),
        cli_table(kv_columns(gen), kv_rows(gen)),
    ]
    parts += [f"note: {n}" for n in gen.notes]
    return "\n".join(parts)


def summary_html(gen: Any) -> str:
    """The Profile panel's summary of a decoder profiled generating (one short line)."""
    tpot = f", TPOT <b>{fmt_ms(gen.tpot_ms)} ms</b>" if gen.tpot_ms else ""
    cover = f"{100 * (gen.prefill_coverage or 0):.0f}"
    if gen.decode_coverage is not None:
        cover += f" / {100 * gen.decode_coverage:.0f}"
    return (
        f"generating {gen.prompt_tokens} + {gen.new_tokens} tokens: TTFT "
        f"<b>{fmt_ms(gen.ttft_ms)} ms</b>{tpot}, layers cover {cover} %"
    )
