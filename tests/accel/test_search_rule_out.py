"""A pruning pass whose chains keep missing the parity budget by far is left out for the rest
of the search (accel.search.rule_out); one within budget keeps it. Fake executors: nothing
is timed or pruned for real."""

from __future__ import annotations

from types import SimpleNamespace

from accel.search import SearchConfig, run_search
from accel.search import rule_out as ro
from accel.search.engine import _DoneHandle as _Done

INFO = ("torch", frozenset({"linear"}))
PASSES = ("quantize_dynamic_int8", "export_onnx", "onnxruntime", "prune_channels", "distill")


class PruneFails:
    """Every chain with prune_channels fails the gate with cosine drop ``drop``; the rest
    pass at 2x."""

    slots = 1

    def __init__(self, drop):
        self.drop = drop
        self.chains: list[tuple[str, ...]] = []

    def submit(self, number, spec):
        chain = tuple(s["pass"] for s in spec["steps"])
        self.chains.append(chain)
        if "prune_channels" in chain:
            result = {"trial_status": "gate_failed", "metrics": {"cosine_drop": self.drop}}
            result["gate"] = f"cosine drop {self.drop} over the budget"
        else:
            result = {
                "trial_status": "ok",
                "metrics": {"speedup": 2.0, "cosine_drop": 0.0, "size_bytes": 100.0},
            }
        return _Done({"status": "succeeded", "result": result, "run_id": f"r{number}"})

    def close(self):
        pass


def _config(tmp_path, **kw):
    base = dict(
        model="zoo:mlp",
        objective="latency",
        max_trials=14,
        budget_s=None,
        passes=PASSES,
        allow=("prune", "distill"),
        max_cosine_drop=0.01,
        final_top_k=0,
        out_dir=str(tmp_path),
        seed=5,
    )
    base.update(kw)
    return SearchConfig(**base)


def test_far_misses_leave_pruning_out_for_the_rest_of_the_search(tmp_path):
    ex = PruneFails(drop=0.12)
    res = run_search(_config(tmp_path), ex, model_info=INFO)
    pruned = [i for i, c in enumerate(ex.chains) if "prune_channels" in c]
    assert len(pruned) == ro.FAILS, ex.chains  # two far misses, then no prune chain runs
    assert all("prune_channels" not in c for c in ex.chains[pruned[-1] + 1 :])
    assert len(ex.chains) > pruned[-1] + 1  # the search went on with the other chains
    why = res.space["ruled_out"]["prune_channels"]
    assert "0.12 (trial" in why and "budget 0.01" in why
    assert res.space["excluded"]["prune_channels"] == why
    assert res.best is not None and "prune_channels" not in res.trial(res.best).chain
    # the seeds a ruled-out pass never ran are not owed: no "budget too small" verdict
    assert "too small for the seeds" not in res.reason
    assert res.reason.startswith("every chain in the space was tried but those with prune_channels")


def test_near_misses_keep_pruning_in_the_search(tmp_path):
    ex = PruneFails(drop=0.02)  # 2x the budget: a lower ratio may still pass
    res = run_search(_config(tmp_path), ex, model_info=INFO)
    assert sum("prune_channels" in c for c in ex.chains) > ro.FAILS
    assert "ruled_out" not in res.space


def _t(number, chain, status, drop=None):
    return SimpleNamespace(number=number, chain=chain, status=status, metrics={"cosine_drop": drop})


def test_one_chain_within_budget_keeps_the_pass():
    trials = [
        _t(1, ("prune_channels", "distill", "openvino"), "gate_failed", 0.3),
        _t(2, ("prune_channels", "distill", "onnxruntime"), "ok", 0.004),
        _t(3, ("prune_channels", "distill"), "gate_failed", 0.2),
    ]
    assert ro.rule_out(trials, 0.01, {}) == {}
    far = ro.rule_out([trials[0], trials[2]], 0.01, {})
    assert set(far) == {"prune_channels"} and "trial 1" in far["prune_channels"]
    assert ro.rule_out([trials[0], trials[2]], 0.01, far) == {}  # said once
    # failures of another kind (a crash, no cosine) do not count
    assert ro.rule_out([_t(4, ("prune_channels",), "failed"), trials[0]], 0.01, {}) == {}
