"""accel.models.calls: inputs bound to a forward's signature, and the matching dynamic shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel.models.calls import bind_dynamic_shapes, bind_inputs, call_module


class Positional(nn.Module):
    def forward(self, ids, mask=None):
        return ids.float() * mask


class VarArgs(nn.Module):
    def forward(self, *args):
        return args[0].float() * args[1]


class KeywordOnly(nn.Module):
    def forward(self, *, ids, mask):
        return ids.float() * mask


class OnlyKwargs(nn.Module):
    def forward(self, **kwargs):
        return kwargs["ids"].float() * kwargs["mask"]


class FirstPositionalRestKeyword(nn.Module):
    def forward(self, ids, *, mask):
        return ids.float() * mask


INPUTS = {"ids": torch.ones(2, 3, dtype=torch.long), "mask": torch.full((2, 3), 2.0)}


@pytest.mark.parametrize(
    ("module", "n_args", "kw"),
    [
        (Positional(), 2, set()),
        (VarArgs(), 2, set()),
        (KeywordOnly(), 0, {"ids", "mask"}),
        (OnlyKwargs(), 0, {"ids", "mask"}),
        (FirstPositionalRestKeyword(), 1, {"mask"}),
    ],
)
def test_bind_inputs_follows_the_signature(module, n_args, kw):
    args, kwargs = bind_inputs(module, INPUTS)
    assert len(args) == n_args and set(kwargs) == kw
    assert torch.equal(call_module(module, INPUTS), torch.full((2, 3), 2.0))


def test_positional_inputs_keep_the_spec_order_whatever_their_names():
    # The spec's names need not be the forward's argument names: positional means in order.
    args, kwargs = bind_inputs(Positional(), {"a": 1, "b": 2})
    assert args == (1, 2) and kwargs == {}


def test_dynamic_shapes_nest_like_the_call():
    shapes = [{0: "b"}, {0: "b", 1: "s"}]
    assert bind_dynamic_shapes(Positional(), ["ids", "mask"], shapes) == tuple(shapes)
    # forward(*args): torch.export sees one argument, a tuple
    assert bind_dynamic_shapes(VarArgs(), ["ids", "mask"], shapes) == {"args": tuple(shapes)}
    assert bind_dynamic_shapes(KeywordOnly(), ["ids", "mask"], shapes) == {
        "ids": shapes[0],
        "mask": shapes[1],
    }
    assert bind_dynamic_shapes(OnlyKwargs(), ["ids", "mask"], shapes) == {
        "kwargs": {"ids": shapes[0], "mask": shapes[1]}
    }


@pytest.mark.parametrize("module", [VarArgs(), KeywordOnly()])
def test_exported_program_module_is_called_as_it_was_exported(module):
    """ep.module() checks its call against the exported (args, kwargs) structure, whatever
    signature it shows; the binding reads that structure."""
    from torch.export import Dim

    args, kwargs = bind_inputs(module, INPUTS)
    auto = [{0: Dim.AUTO, 1: Dim.AUTO}] * 2
    ep = torch.export.export(
        module, args, kwargs=kwargs, dynamic_shapes=bind_dynamic_shapes(module, list(INPUTS), auto)
    )
    other = {"ids": torch.ones(4, 5, dtype=torch.long), "mask": torch.full((4, 5), 3.0)}
    assert torch.equal(call_module(ep.module(), other), torch.full((4, 5), 3.0))


def test_old_positional_tuple_is_what_torch_export_rejects_for_varargs():
    """The cause of issue 32's refusals: a tuple of per-input specs for forward(*args)."""
    from torch.export import Dim

    from accel.passes._export_errors import explain_export_failure

    auto = ({0: Dim.AUTO}, {0: Dim.AUTO})
    with pytest.raises(Exception) as e:
        torch.export.export(VarArgs(), tuple(INPUTS.values()), dynamic_shapes=auto)
    assert "structure of `inputs` and `dynamic_shapes`" in str(e.value)
    assert "dynamic_shapes mirrors the forward's arguments" in explain_export_failure(e.value)
