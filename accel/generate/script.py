"""The generation workload in an exported script (accel.codegen): plain torch and
transformers code that times each step generating against the original in alternating
rounds (TTFT, TPOT, tokens/s) and compares its logits teacher-forced on the original's
greedy continuation, as accel.generate does. The settings enter as literals."""

from __future__ import annotations

from typing import Any

from accel.generate.settings import PROMPT_SEED_OFFSET, GenerateSettings

HELPERS = '''
def _lm(m):
    return getattr(m, "_orig_mod", m)


class Decoder:
    """Greedy generation of a state: a Hugging Face LM through its KV cache, a stateful
    OpenVINO LM through its request's state, an ONNX Runtime GenAI model through
    og.Generator, any other model by recomputing the whole sequence for every token (no KV
    cache)."""

    def __init__(self, state, max_len):
        import inspect

        self.state, self.max_len, self.cache, self.pos = state, max_len, None, 0
        m = state["model"]
        params = set()
        if state["session"] is None and state["request"] is None and m is not None:
            if hasattr(_lm(m), "generation_config"):
                params = set(inspect.signature(_lm(m).forward).parameters)
        self.arg = next((a for a in ("cache", "past_key_values") if a in params), None)
        self.keep = "logits_to_keep" in params
        self.static = self.arg is not None and getattr(
            _lm(m).generation_config, "cache_implementation", None) == "static"
        # A stateful OpenVINO LM keeps its KV cache in the infer request's state.
        c = state["compiled"] if state["request"] is not None else None
        self.ov_names = {n for p in c.inputs for n in p.get_names()} if c is not None else set()
        self.stateful = "beam_idx" in self.ov_names
        # An ONNX Runtime GenAI model (og.Model in `compiled`): og.Generator keeps the cache.
        self.genai = state["kind"] == "ort_genai"
        # OpenVINO GenAI's LLMPipeline generates; teacher-forced calls use `request`.
        self.pipe = state.get("ov_pipe") if self.stateful else None

    def _genai_prefill(self, ids):
        params = og.GeneratorParams(self.state["compiled"])
        params.set_search_options(max_length=self.max_len, batch_size=ids.shape[0], do_sample=False)
        self.gen = og.Generator(self.state["compiled"], params)
        return self._genai_step(ids)

    def _genai_step(self, ids):
        self.gen.append_tokens(np.ascontiguousarray(ids.detach().cpu().numpy(), dtype=np.int64))
        logits = np.asarray(self.gen.get_output("logits"), dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(logits[:, -1, :]))

    def _cached(self, ids):
        from transformers import DynamicCache, StaticCache

        m = self.state["model"]
        if self.cache is None or not self.static:
            cfg = _lm(m).config
            self.cache = (StaticCache(config=cfg, max_cache_len=self.max_len) if self.static
                          else DynamicCache(config=cfg))
        else:
            self.cache.reset()
        self.pos = 0
        return self.step(ids)

    def _ov_step(self, ids):
        x = ids.detach().cpu().numpy()
        b, n = x.shape
        feed = {"input_ids": x, "attention_mask": np.ones((b, self.pos + n), dtype=np.int64),
                "beam_idx": np.arange(b, dtype=np.int32)}
        if "position_ids" in self.ov_names:
            feed["position_ids"] = np.tile(np.arange(self.pos, self.pos + n, dtype=np.int64), (b, 1))
        logits = self.state["request"].infer(feed)["logits"]
        self.pos += n
        return torch.from_numpy(np.array(logits[:, -1, :], dtype=np.float32))

    def prefill(self, ids):
        if self.genai:
            return self._genai_prefill(ids)
        if self.stateful:
            self.state["request"].reset_state()
            self.pos = 0
            return self._ov_step(ids)
        if self.arg is None:
            self.ids = ids
            return self._recompute()
        return self._cached(ids)

    def step(self, ids):
        if self.genai:
            return self._genai_step(ids)
        if self.stateful:
            return self._ov_step(ids)
        if self.arg is None:
            self.ids = torch.cat([self.ids, ids], dim=1)
            return self._recompute()
        kw = {"input_ids": ids, self.arg: self.cache, "use_cache": True}
        if self.keep:
            kw["logits_to_keep"] = 1
        with torch.no_grad():
            out = self.state["model"](**kw)
        self.pos += ids.shape[1]
        return out.logits[:, -1, :].float()

    def _recompute(self):
        globals().update(self.state)
        out = run({"input_ids": self.ids})
        logits = out.logits if hasattr(out, "logits") else out[0]
        return logits[:, -1, :].float()


def generate(dec, prompt, n):
    """Greedy tokens [batch, n], TTFT (s), the clock after each token."""
    if getattr(dec, "pipe", None) is not None:
        return ov_pipeline_generate(dec.pipe, prompt, n)
    start = time.perf_counter()
    tok = dec.prefill(prompt).argmax(-1, keepdim=True)
    sync()
    times, toks = [time.perf_counter()], [tok]
    for _ in range(n - 1):
        tok = dec.step(tok).argmax(-1, keepdim=True)
        sync()
        times.append(time.perf_counter())
        toks.append(tok)
    return torch.cat(toks, dim=1), start, times


def teacher_forced(dec, prompt, tokens):
    steps = [dec.prefill(prompt)]
    for i in range(tokens.shape[1] - 1):
        steps.append(dec.step(tokens[:, i : i + 1]))
    return torch.stack(steps, dim=1)


def generation_figures(dec_ref, dec, prompt):
    """Alternating rounds (ref, cand / cand, ref): per-round TTFT, TPOT, tokens/s of each."""
    figs = ({"ttft_ms": [], "tpot_ms": [], "tokens_per_s": []}, {"ttft_ms": [], "tpot_ms": [], "tokens_per_s": []})
    for d in (dec_ref, dec):
        generate(d, prompt, NEW_TOKENS)  # warm-up (a compiled step compiles here)
    for r in range(max(GEN_ROUNDS, 3)):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            _toks, start, times = generate((dec_ref, dec)[i], prompt, NEW_TOKENS)
            figs[i]["ttft_ms"].append((times[0] - start) * 1e3)
            if len(times) > 1:
                figs[i]["tpot_ms"].append((times[-1] - times[0]) * 1e3 / (len(times) - 1))
            figs[i]["tokens_per_s"].append(prompt.shape[0] * len(times) / (times[-1] - start))
    return figs


def report_generation(label, index):
    """The step generating against the original: figures, ratio, teacher-forced parity."""
    dec = Decoder(current_state(), PROMPT_TOKENS + NEW_TOKENS)
    cand = teacher_forced(dec, gen_prompt, gen_tokens)
    cos = F.cosine_similarity(gen_logits.double(), cand.double(), dim=-1).mean(0)
    top1 = (gen_logits.argmax(-1) == cand.argmax(-1)).double().mean(0)
    ref_figs, figs = generation_figures(gen_decoder, dec, gen_prompt)
    ratio, low, high = ratio_interval(figs["tokens_per_s"], ref_figs["tokens_per_s"])
    med = {k: statistics.median(v) if v else float("nan") for k, v in figs.items()}
    print(f"     generate: TTFT {med['ttft_ms']:.2f} ms, TPOT {med['tpot_ms']:.2f} ms/token, "
          f"{med['tokens_per_s']:.1f} tokens/s, {ratio:.2f}x [{low:.2f}-{high:.2f}] tokens/s; "
          f"teacher-forced cosine {cos.mean():.6f}, top-1 {top1.mean():.3f}")
    results[-1].update({**med, "tokens_per_s_ratio": ratio, "tokens_per_s_ratio_low": low,
                        "tokens_per_s_ratio_high": high, "tf_cosine_mean": float(cos.mean()),
                        "tf_top1": float(top1.mean())})


_report_forward = report


def report(label, index, gates=None):
    _report_forward(label, index, gates)
    report_generation(label, index)
'''


def script_constants(bench: Any) -> list[str]:
    """The workload's settings as literals."""
    s = GenerateSettings.from_bench(bench)
    rounds = int(getattr(bench, "rounds", 3) or 3)
    return [
        "# Generation workload: prompt tokens, new tokens, batch, timed rounds (greedy).",
        f"PROMPT_TOKENS, NEW_TOKENS, GEN_BATCH, GEN_ROUNDS = {s.prompt_tokens!r}, "
        f"{s.new_tokens!r}, {s.batch!r}, {rounds!r}",
    ]


def baseline_lines() -> list[str]:
    """After the original is built: its seeded prompt, greedy continuation and logits."""
    return [
        "gen_generator = torch.Generator().manual_seed(SEED + " + repr(PROMPT_SEED_OFFSET) + ")",
        "gen_prompt = torch.randint(0, _lm(model).config.vocab_size, (GEN_BATCH, PROMPT_TOKENS), "
        "generator=gen_generator)",
        "gen_decoder = Decoder(saved_state(), PROMPT_TOKENS + NEW_TOKENS)",
        "gen_tokens, _start, _times = generate(gen_decoder, gen_prompt, NEW_TOKENS)",
        "gen_logits = teacher_forced(gen_decoder, gen_prompt, gen_tokens)",
        "print(f'     generate: original TTFT {(_times[0] - _start) * 1e3:.2f} ms, '",
        "      f'{gen_prompt.shape[0] * len(_times) / (_times[-1] - _start):.1f} tokens/s')",
    ]
