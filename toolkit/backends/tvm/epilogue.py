"""What a model's conv kernel computes after the convolution, as each output element leaves its accumulator.

An :class:`Epilogue` adds a per-output-channel ``bias`` (its own bias or a folded batch-norm), then a
``residual`` tensor of the output's shape, then applies an activation. Each activation is one entry of
:data:`ACTIVATIONS`: the Relax graph TVM's PyTorch importer makes of it (a pattern of Relax's dataflow pattern
language, ``tvm.relax.dpl``) and the ``te`` expression the kernel computes instead. :func:`fuse_activations`
rewrites every activation applied to a kernel's output into that kernel's epilogue.

>>> Epilogue(bias=True, act="clip", bounds=(0.0, 6.0)).describe()
['bias', 'relu6']
>>> sorted(ACTIVATIONS)
['clip', 'hardsigmoid', 'hardswish', 'relu', 'sigmoid', 'silu']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable


@dataclass(frozen=True)
class Epilogue:
    """The steps after the conv, in this order: add ``bias`` (a ``[CO]`` input), add ``residual`` (an NCHW
    input), apply ``act`` (a key of :data:`ACTIVATIONS`; ``clip`` with its ``bounds``). The kernel's inputs are
    ``data, weight[, bias][, residual]``."""

    bias: bool = False
    residual: bool = False
    act: str | None = None
    bounds: tuple[float, float] | None = None

    def __bool__(self) -> bool:
        return self.bias or self.residual or self.act is not None

    def describe(self) -> list[str]:
        """The steps it does, in order (``["bias", "residual", "relu"]``; a clip is ``relu6`` or ``clip(lo,hi)``)."""
        steps = [name for name in ("bias", "residual") if getattr(self, name)]
        if self.act == "clip":
            lo, hi = self.bounds or (-math.inf, math.inf)
            steps.append("relu6" if (lo, hi) == (0.0, 6.0) else f"clip({lo:g},{hi:g})")
        elif self.act is not None:
            steps.append(self.act)
        return steps

    def apply(self, value: Any) -> Any:
        """The activation of a ``te`` expression (``value`` itself without one)."""
        return value if self.act is None else ACTIVATIONS[self.act].compute(value, self.bounds)


@dataclass(frozen=True)
class Activation:
    """One activation: ``pattern(x)`` builds the Relax pattern TVM's importer makes of it applied to ``x`` (its
    root, and the clip calls whose bounds it takes or checks), ``uses`` is how often that graph reads ``x``, and
    ``compute(v, bounds)`` is the ``te`` expression of it."""

    pattern: Callable[[Any], tuple[Any, dict[str, Any]]]
    uses: int
    compute: Callable[[Any, tuple[float, float] | None], Any]
    fixed: dict[str, tuple[float, float]] | None = None
    """The bounds a named clip of the pattern must have (hardswish's ``relu6``), else the activation is another."""


def _op(name: str) -> Callable[..., Any]:
    from tvm.relax.dpl import is_op

    return is_op(f"relax.{name}")


def _relu6_of(x: Any) -> tuple[Any, dict[str, Any]]:
    """``clip(clip(x + 3, 0, inf), -inf, 6)``: how the importer writes relu6(x + 3)."""
    from tvm.relax.dpl import wildcard

    low = _op("clip")(_op("add")(x, wildcard()), wildcard(), wildcard())
    high = _op("clip")(low, wildcard(), wildcard())
    return high, {"low": low, "high": high}


def _silu(x: Any) -> tuple[Any, dict[str, Any]]:
    sig = _op("sigmoid")(x)
    return _op("multiply")(x, sig) | _op("multiply")(sig, x), {}


def _hardswish(x: Any) -> tuple[Any, dict[str, Any]]:
    from tvm.relax.dpl import wildcard

    six, parts = _relu6_of(x)
    product = _op("multiply")(x, six) | _op("multiply")(six, x)
    return _op("divide")(product, wildcard()), parts


def _hardsigmoid(x: Any) -> tuple[Any, dict[str, Any]]:
    from tvm.relax.dpl import wildcard

    six, parts = _relu6_of(x)
    return _op("divide")(six, wildcard()), parts


def _clip(x: Any) -> tuple[Any, dict[str, Any]]:
    from tvm.relax.dpl import wildcard

    root = _op("clip")(x, wildcard(), wildcard())
    return root, {"clip": root}


def _te() -> Any:
    from tvm import te

    return te


def _relu6_te(v: Any) -> Any:
    te = _te()
    return te.min(te.max(v + te.const(3.0, "float32"), te.const(0.0, "float32")), te.const(6.0, "float32"))


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(lambda x: (_op("nn.relu")(x), {}), 1,
                       lambda v, _: _te().max(v, _te().const(0.0, "float32"))),
    "clip": Activation(_clip, 1, lambda v, b: _te().min(_te().max(v, _te().const(b[0], "float32")),
                                                         _te().const(b[1], "float32"))),
    "sigmoid": Activation(lambda x: (_op("sigmoid")(x), {}), 1, lambda v, _: _te().sigmoid(v)),
    "silu": Activation(_silu, 2, lambda v, _: v * _te().sigmoid(v)),
    "hardswish": Activation(_hardswish, 2, lambda v, _: v * _relu6_te(v) / _te().const(6.0, "float32"),
                            fixed={"low": (0.0, math.inf), "high": (-math.inf, 6.0)}),
    "hardsigmoid": Activation(_hardsigmoid, 1, lambda v, _: _relu6_te(v) / _te().const(6.0, "float32"),
                              fixed={"low": (0.0, math.inf), "high": (-math.inf, 6.0)}),
}
"""Every activation a kernel's epilogue computes, by name. Hardswish and hardsigmoid are matched with their
constants (3 added, divided by 6) checked in :func:`_constants_match`."""


def _bounds(call: Any) -> tuple[float, float] | None:
    """A Relax clip call's (min, max), ``None`` when they are not constants."""
    try:
        return float(call.args[1].value), float(call.args[2].value)
    except (AttributeError, TypeError, ValueError):
        return None


def _scalar(expr: Any) -> float | None:
    """The value of a scalar Relax constant (``None``: not one)."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant) or expr.value.numpy().size != 1:
        return None
    return float(expr.value.numpy().reshape(()))


def _constants_match(name: str, root: Any, parts: dict[str, Any], bound: dict[Any, Any]) -> bool:
    """Whether a hardswish or hardsigmoid match adds 3 and divides by 6 (``bound``: each variable's value)."""
    if name not in ("hardswish", "hardsigmoid"):
        return True
    added = parts["low"].args[0]
    added = bound.get(added, added)
    return _scalar(added.args[1]) == 3.0 and _scalar(root.args[1]) == 6.0


def fuse_activations(func: Any, kernels: dict[str, Epilogue], grow: Callable[[str, Epilogue, Any], Any]) -> Any:
    """The Relax function ``func`` with every activation of :data:`ACTIVATIONS` applied to the output of a kernel
    call (a ``call_tir`` of a function named in ``kernels``, whose epilogue has no activation yet, and whose output
    nothing else reads) replaced by a call of that kernel with the activation in its epilogue:
    ``grow(name, epilogue, call)`` returns that call."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import rewrite_call, wildcard

    uses, bound = _use_counts_of_values(func)

    def matcher(name: str, act: Activation) -> tuple[Any, Callable[[Any, Any], Any]]:
        kernel = wildcard()
        root, parts = act.pattern(kernel)

        def rewrite(expr: Any, matches: Any) -> Any:
            call = bound.get(matches[kernel], matches[kernel])
            if not isinstance(call, relax.Call) or call.op != tvm.ir.Op.get("relax.call_tir"):
                return expr
            callee = call.args[0].name_hint
            epilogue = kernels.get(callee)
            if epilogue is None or epilogue.act is not None or uses.get(call, 0) != act.uses:
                return expr
            found = {key: bound.get(matches[p], matches[p]) for key, p in parts.items()}
            if any(_bounds(found[key]) != want for key, want in (act.fixed or {}).items()):
                return expr
            if not _constants_match(name, bound.get(matches[root], matches[root]), found, bound):
                return expr
            bounds = _bounds(found["clip"]) if name == "clip" else None
            if name == "clip" and bounds is None:
                return expr
            return grow(callee, replace(epilogue, act=name, bounds=bounds), call)

        return root, rewrite

    for name, act in ACTIVATIONS.items():
        pattern, rewrite = matcher(name, act)
        func = rewrite_call(pattern, rewrite, func)
        uses, bound = _use_counts_of_values(func)
    return func


def _use_counts_of_values(func: Any) -> tuple[dict[Any, int], dict[Any, Any]]:
    """How many times each bound value of ``func`` is read, keyed by the value (the call) it binds; and the value
    bound to each variable."""
    from tvm import relax

    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    counts: dict[Any, int] = {}
    exprs = [b.value for block in func.body.blocks for b in block.bindings] + [func.body.body]
    for expr in exprs:
        for var in relax.analysis.free_vars(expr):
            if var in bound:
                counts[bound[var]] = counts.get(bound[var], 0) + 1
    return counts, bound
