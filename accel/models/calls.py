"""How the studio calls a torch model: the input spec's tensors bound to its forward's signature.

Inputs go positionally in the spec's order (the spec's names need not be the forward's
argument names), except where the forward cannot take them so: keyword-only parameters get
the input of their name, and a forward with only ``**kwargs`` gets every input by name.
``forward(self, *args)`` wrappers take the inputs positionally too, but torch.export sees the
tail as one argument (a tuple), so its ``dynamic_shapes`` must be nested the same way.

The functions import what they need inside and carry no annotations, so exported scripts
copy their source as is.
"""

from __future__ import annotations


def forward_signature(module):
    """The signature of ``module.forward`` (without ``self``), or None where Python cannot
    read one (TorchScript, C++ modules)."""
    import inspect

    forward = getattr(module, "forward", module)
    try:
        return inspect.signature(forward)
    except (TypeError, ValueError):
        return None


def _exported_keywords(module):
    """The keyword inputs of a module unlifted from a torch.export program (``ep.module()``
    checks its call against the (args, kwargs) structure it was exported with, whatever its
    signature shows), or None for any other module."""
    spec = getattr(module, "_in_spec", None)
    try:
        return set(spec.child(1).context) if spec is not None else None
    except (AttributeError, IndexError, TypeError):
        return None


def bind_inputs(module, inputs):
    """``(args, kwargs)`` to call ``module`` with the name -> value mapping ``inputs``
    (the input spec's order)."""
    import inspect

    exported_keywords = _exported_keywords(module)
    if exported_keywords is not None:  # a torch.export program: its in_spec says what it takes
        kwargs = {n: v for n, v in inputs.items() if n in exported_keywords}
        return tuple(v for n, v in inputs.items() if n not in kwargs), kwargs
    sig = forward_signature(module)
    if sig is None:
        return tuple(inputs.values()), {}
    kinds = [p.kind for p in sig.parameters.values()]
    positional = sum(
        k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for k in kinds
    )
    var_positional = inspect.Parameter.VAR_POSITIONAL in kinds
    keyword_only = {
        n for n, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    kwargs = {n: v for n, v in inputs.items() if n in keyword_only}
    rest = [(n, v) for n, v in inputs.items() if n not in kwargs]
    if inspect.Parameter.VAR_KEYWORD in kinds and not var_positional and len(rest) > positional:
        kwargs.update(rest[positional:])  # more inputs than positional parameters: by name
        rest = rest[:positional]
    return tuple(v for _, v in rest), kwargs


def call_module(module, inputs):
    """``module`` run on ``inputs`` bound as :func:`bind_inputs` says."""
    args, kwargs = bind_inputs(module, inputs)
    return module(*args, **kwargs)


def bind_dynamic_shapes(module, names, shapes):
    """torch.export's ``dynamic_shapes`` in the structure of the call :func:`bind_inputs`
    makes: a tuple (one entry per input) for a plain positional forward, else a dict keyed
    by the forward's parameter names (``*args`` gets a tuple, ``**kwargs`` a dict), which
    is what torch.export matches against the signature."""
    import inspect

    args, kwargs = bind_inputs(module, dict(zip(names, shapes)))
    sig = forward_signature(module)
    if sig is None:
        return tuple(args)
    positional = [
        p
        for p in sig.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if not kwargs and len(args) <= len(positional):
        return tuple(args)
    return dict(sig.bind(*args, **kwargs).arguments)
