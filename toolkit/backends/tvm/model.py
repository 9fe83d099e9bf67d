"""Whole models through Relax: a ``torch.export`` program compiled for a TVM board, its convs edgetune's kernels.

``compile_model`` imports the program with ``relax.frontend.torch.from_exported_program``, binds the weights
as constants, folds batch-norm into the conv weights (after the conv's own bias too; ``FoldBatchnormToConv2D``,
then ``DecomposeOpsForInference`` for any batch-norm left), and replaces every NCHW float32 conv2d (plain,
grouped, depthwise or dilated) by a ``call_tir`` of edgetune's scheduled kernel for its shape: the tuned config when a
record is given, else the template's fallback config (TVM's default pipeline would leave the conv
unscheduled). The kernels take their weights in their template's layout (``IHWO`` on CPUs: the transpose is
folded at compile time; ``OIHW`` on CUDA). What
follows a conv element by element (a per-channel constant added: its bias or folded batch-norm; then a
tensor of its shape added: a residual; then an activation: ReLU, ReLU6 or another clip, sigmoid, SiLU,
Hardswish, Hardsigmoid), each step reading only the one before, is computed by the kernel itself as each
output element leaves its accumulator (:class:`~toolkit.backends.tvm.epilogue.Epilogue`), so the conv's
output is written once. Each kernel is marked opaque, so ``FuseOps`` leaves it whole, and
scheduled, so a GPU pipeline's default schedules (``dlight``) leave it as it is. Pooling, the classifier and
every other operator go through TVM's default pipeline for the target (on CUDA: ``dlight``'s GPU rules).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from toolkit.backends.tvm.epilogue import Epilogue, fuse_activations
from toolkit.backends.tvm.link import link_library
from toolkit.boards import BoardProfile
from toolkit.errors import ExportError, error_line
from toolkit.manifest import ConvPlan
from toolkit.workloads import Conv2dWorkload

OPAQUE = 8
"""TVM's ``kOpaque`` operator pattern: ``FuseOps`` fuses nothing into a function marked with it."""


@dataclass(frozen=True)
class CompiledModel:
    """The whole model as a shared library for the board, and a library of its edgetune kernels alone (each
    callable by name, for timing one conv; ``None`` when the model has none)."""

    library: bytes
    kernels: bytes | None


def relax_module(program: Any) -> Any:
    """The Relax module of an exported program, weights bound as constants and batch-norm folded."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # torch-internal deprecations, not the user's
            mod = from_exported_program(program, keep_params_as_input=True, unwrap_unit_return_tuple=True)
    except Exception as exc:  # noqa: BLE001 - the importer raises plain errors for unsupported operators
        raise ExportError(f"TVM's PyTorch importer cannot take this model: {error_line(exc)}") from None
    mod, params = relax.frontend.detach_params(mod)
    if params.get("main"):
        names = [p.name for p in mod["main"].params][-len(params["main"]):]
        mod = relax.transform.BindParams("main", dict(zip(names, params["main"])))(mod)
    for step in (relax.transform.FoldConstant(), _fold_batchnorm_after_bias, relax.transform.FoldBatchnormToConv2D(),
                 relax.transform.DecomposeOpsForInference(), relax.transform.FoldConstant()):
        mod = step(mod)
    return mod


def _fold_batchnorm_after_bias(mod: Any) -> Any:
    """``mod`` with every batch-norm that follows a conv's own bias folded into that conv (weights scaled, one
    per-channel constant added), as ``FoldBatchnormToConv2D`` folds one that follows the conv directly."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    data, weight, bias, gamma, beta, mean, var = wildcard(), *(is_const() for _ in range(6))
    conv = is_op("relax.nn.conv2d")(data, weight)
    norm = is_op("relax.nn.batch_norm")(is_op("relax.add")(conv, bias), gamma, beta, mean, var)

    def fold(expr: Any, matches: Any) -> Any:
        call, w = matches[conv], matches[weight].value.numpy()
        g, b, m, v, c = (matches[p].value.numpy().astype("float32") for p in (gamma, beta, mean, var, bias))
        if (call.attrs.kernel_layout != "OIHW" or int(matches[norm].attrs.axis) != 1 or w.dtype != "float32"
                or c.size != w.shape[0] or max(c.shape, default=1) != c.size):
            return expr
        scale = g / np.sqrt(v + np.float32(matches[norm].attrs.epsilon))
        shift = (c.reshape(-1) - m) * scale + b
        scaled = relax.const((w * scale.reshape(-1, 1, 1, 1)).astype("float32"))
        return relax.op.add(relax.Call(call.op, (matches[data], scaled), call.attrs),
                            relax.const(shift.reshape(1, -1, 1, 1).astype("float32")))

    pattern = TupleGetItemPattern(norm, 0)
    return tvm.IRModule({gv: rewrite_call(pattern, fold, func) if isinstance(func, relax.Function) else func
                         for gv, func in mod.functions_items()}, attrs=mod.attrs)


def compile_model(program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], *,
                  progress: Callable[[str], None] | None = None, fuse: bool = True) -> CompiledModel:
    """The whole model for ``profile`` (cross-linked by its compiler), each conv as its plan says (graph order: a
    plan with a template gets edgetune's kernel, one without TVM's default lowering). Each plan with a kernel
    gets its ``kernel`` (the function's name in the kernels' library) and ``epilogue`` (what the kernel computes
    in the model: ``["bias", "residual", ACTIVATION]`` at most; none unless ``fuse``: then TVM fuses what follows
    each kernel into an elementwise kernel of its own)."""
    import tvm
    from tvm import relax

    mod = relax_module(program)
    kernels: dict[tuple[str, int | None, Epilogue], tuple[Any, str]] = {}
    alone: dict[str, Any] = {}
    made: dict[str, tuple[ConvPlan, Epilogue]] = {}     # kernel name -> its conv's plan and epilogue

    def scheduled(plan: ConvPlan, epilogue: Epilogue) -> tuple[Any, str]:
        if progress is not None and not epilogue:
            progress(f"kernel {plan.template.workload.label}")
        try:
            func = plan.template.schedule(plan.config, epilogue)["main"]
        except Exception as exc:  # noqa: BLE001 - ScheduleError and friends
            raise ExportError(f"config #{plan.config.index} of {plan.template.workload.label} does not schedule "
                              f"({error_line(exc)}); tune it again") from None
        name = f"edgetune_conv{len(kernels)}"
        func = func.with_attr("global_symbol", name).with_attr("tir.is_scheduled", True)
        if not epilogue:
            alone[name] = func
        made[name] = plan, epilogue
        return func.with_attr("op_pattern", OPAQUE), name

    def kernel(plan: ConvPlan, builder: Any, epilogue: Epilogue) -> Any:
        key = (plan.template.workload.spec(), plan.config.index if plan.config else None, epilogue)
        if key not in kernels:
            func, name = scheduled(plan, epilogue)
            kernels[key] = builder.add_func(func, name), name
        if not epilogue:
            plan.kernel = kernels[key][1]
        return kernels[key][0]

    failures: list[ExportError] = []

    def grow(name: str, epilogue: Epilogue, call: Any) -> Any:
        plan = made[name][0]
        rewriter.epilogues[plan.module] = epilogue
        try:
            return relax.call_tir(kernel(plan, builder, epilogue), call.args[1], call.ty_args[0])
        except ExportError as exc:   # TVM's rewriter passes it on as a RuntimeError
            failures.append(exc)
            raise

    rewriter = _ConvRewriter(mod, plans, kernel, fuse)
    mod = rewriter.run()
    if fuse:
        builder = relax.BlockBuilder(mod)
        try:
            main = fuse_activations(mod["main"], {name: epilogue for name, (_, epilogue) in made.items()}, grow)
        except Exception:
            if failures:
                raise failures[0] from None
            raise
        builder.update_func(mod.get_global_var("main"), main)
        mod = builder.get()
    mod = _without_unused_kernels(relax.transform.DeadCodeElimination(["main"])(mod))
    mod = relax.transform.FoldConstant()(mod)
    if progress is not None:
        progress("the whole model (Relax)")
    target = profile.tvm_target()
    try:
        with target:
            executable = tvm.compile(mod, target=target)
            kernels_only = tvm.compile(tvm.IRModule(alone), target=target) if alone else None
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"TVM could not compile the model for {profile.name}: {error_line(exc)}") from None
    for plan in plans:
        plan.epilogue = rewriter.epilogues[plan.module].describe() if plan.module in rewriter.epilogues else None
    return CompiledModel(link_library(executable, profile.cross_compiler),
                         link_library(kernels_only, profile.cross_compiler) if kernels_only else None)


def _without_unused_kernels(mod: Any) -> Any:
    """``mod`` without the kernels no call takes any more (those a larger epilogue replaced)."""
    import tvm
    from tvm import relax

    used = {gv.name_hint for gv in relax.analysis.all_global_vars(mod["main"])} | {"main"}
    return tvm.IRModule({gv: func for gv, func in mod.functions_items() if gv.name_hint in used}, attrs=mod.attrs)


def _make_rewriter() -> type:
    """The Relax mutator class (built on first use: ``relax`` is imported lazily)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    conv_op, add_op = (tvm.ir.Op.get(f"relax.{name}") for name in ("nn.conv2d", "add"))

    @mutator
    class Rewriter(PyExprMutator):
        """Replaces the model's convs by edgetune kernels, then grows each kernel's epilogue over the adds that
        follow it (a per-channel constant added, then a tensor of its shape added), each taking the kernel's output
        as its only use; the kernels they replace are left dead. Activations come after
        (:func:`~toolkit.backends.tvm.epilogue.fuse_activations`)."""

        def __init__(self, mod: Any, plans: Sequence[ConvPlan], kernel: Callable[[ConvPlan, Any, Epilogue], Any],
                     fuse: bool) -> None:
            super().__init__(mod)
            self.mod_, self.plans, self.kernel, self.fuse, self.seen = mod, list(plans), kernel, fuse, 0
            self.failure: ExportError | None = None
            self.uses = _use_counts(mod["main"])
            self.bound: Any = None
            self.growing: dict[Any, tuple[ConvPlan, Epilogue]] = {}   # var bound to a kernel call -> what it does
            self.epilogues: dict[str, Epilogue] = {}

        def visit_var_binding_(self, binding: Any) -> None:
            self.bound = binding.var
            super().visit_var_binding_(binding)

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            try:
                if call.op == conv_op:
                    return self._conv(call)
                if self.fuse and call.op == add_op:
                    return self._grow(call)
            except ExportError as exc:   # TVM's visitor passes it on as a RuntimeError: `run` raises it again
                self.failure = exc
                raise
            return call

        def _conv(self, call: Any) -> Any:
            if self.seen >= len(self.plans):
                raise ExportError("the model's Relax graph has more convs than its PyTorch graph; the model "
                                  "cannot be matched")
            plan = self.plans[self.seen]
            self.seen += 1
            if plan.template is None:
                return call
            workload = _workload(call)
            if workload != plan.template.workload:
                raise ExportError(f"conv {plan.module}: Relax sees {workload.spec() if workload else 'another op'}, "
                                  f"PyTorch {plan.template.workload.spec()}; the model cannot be matched")
            weight = call.args[1]
            if plan.template.weight_layout == "IHWO":
                weight = self.builder_.emit(relax.op.permute_dims(weight, [1, 2, 3, 0]))
            return self._kernel_call(plan, Epilogue(), [call.args[0], weight], call.ty)

        def _kernel_call(self, plan: ConvPlan, epilogue: Epilogue, args: list[Any], ty: Any) -> Any:
            self.growing[self.bound] = (plan, epilogue)
            self.epilogues[plan.module] = epilogue
            return relax.call_tir(self.kernel(plan, self.builder_, epilogue), args, ty)

        def _grow(self, call: Any) -> Any:
            """``call`` (an add) as a step of the epilogue of the kernel it takes, when it can be one."""
            for i, source in enumerate(call.args[:2]):
                if (source not in self.growing or self.uses.get(source, 0) != 1 or not _takes_once(call, source)
                        or _static_shape_of(call.ty) != _static_shape(source)):   # a broadcast to a larger shape
                    continue
                plan, epilogue = self.growing[source]
                args = list(self.lookup_binding(source).args[1].fields)
                grown, args = _added(call.args[1 - i], call.ty, epilogue, args)
                args = [a if isinstance(a, (relax.Var, tvm.ir.expr.Constant)) else self.builder_.emit(a)
                        for a in args]
                if grown is not None:
                    return self._kernel_call(plan, grown, args, call.ty)
            return call

        def run(self) -> Any:
            gv = self.mod_.get_global_var("main")
            try:
                self.builder_.update_func(gv, self.visit_expr(self.mod_["main"]))
            except Exception:
                if self.failure is not None:
                    raise self.failure from None
                raise
            if self.seen != len(self.plans):
                raise ExportError(f"the model's Relax graph has {self.seen} convs, its PyTorch graph "
                                  f"{len(self.plans)}; the model cannot be matched")
            return self.builder_.get()

    def _takes_once(call: Any, source: Any) -> bool:
        """Whether ``call`` takes ``source`` once (``x + x`` is not an epilogue step of ``x``'s kernel)."""
        return sum(arg.same_as(source) for arg in call.args) == 1

    def _added(other: Any, ty: Any, epilogue: Epilogue, args: list[Any]) -> tuple[Epilogue | None, list[Any]]:
        """The epilogue grown by adding ``other`` to the output (of type ``ty``, NCHW) of a kernel called with
        ``args``, and the kernel's new inputs: a float32 constant of one value per output channel (as a ``[CO]``
        vector) as the bias when nothing or only a bias was done yet (two in a row are summed into one bias),
        else a float32 tensor of the output's shape as the residual."""
        shape, out = _static_shape(other), _static_shape_of(ty)
        if shape is None or out is None or other.ty.dtype != "float32" or ty.dtype != "float32":
            return None, args
        channels = out[1]
        if isinstance(other, tvm.ir.expr.Constant) and epilogue in (Epilogue(), Epilogue(bias=True)):
            per_channel = len(shape) in (3, 4) and shape[-3] == channels and all(
                d == 1 for j, d in enumerate(shape) if j != len(shape) - 3)
            if per_channel:
                bias = relax.op.reshape(other, (channels,))
                if epilogue.bias:
                    return epilogue, [*args[:2], relax.op.add(args[2], bias)]
                return Epilogue(bias=True), [*args, bias]
        if shape == out and not epilogue.residual:
            return replace(epilogue, residual=True), [*args, other]
        return None, args

    return Rewriter


def _static_shape(expr: Any) -> list[int] | None:
    """The constant shape of a Relax tensor expression, ``None`` when it is not a tensor of known shape."""
    return _static_shape_of(getattr(expr, "ty", None))


def _static_shape_of(ty: Any) -> list[int] | None:
    """The constant shape of a Relax tensor type (``None`` as :func:`_static_shape`)."""
    try:
        return [int(d) for d in ty.shape]
    except (AttributeError, TypeError, ValueError):
        return None


def _use_counts(func: Any) -> dict[Any, int]:
    """How many times each variable of ``func`` is used (bindings and the function's result)."""
    from tvm import relax

    counts: dict[Any, int] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            for var in relax.analysis.free_vars(binding.value):
                counts[var] = counts.get(var, 0) + 1
    for var in relax.analysis.free_vars(func.body.body):
        counts[var] = counts.get(var, 0) + 1
    return counts


def _workload(call: Any) -> Conv2dWorkload | None:
    """The edgetune workload of a Relax conv2d call, groups and dilation included (``None`` when it is not one:
    another layout or dtype, asymmetric padding, a weight computed at run time, a symbolic shape)."""
    import tvm

    a = call.attrs
    plain = (a.data_layout == "NCHW" and a.kernel_layout == "OIHW" and a.out_layout == "NCHW"
             and isinstance(call.args[1], tvm.ir.expr.Constant))
    pad = [int(p) for p in a.padding]
    if not plain or pad[0] != pad[2] or pad[1] != pad[3]:
        return None
    xs, ws = _static_shape(call.args[0]), _static_shape(call.args[1])
    if xs is None or ws is None or call.args[0].ty.dtype != "float32":   # a symbolic shape, another dtype
        return None
    dh, dw = (int(d) for d in a.dilation)
    return Conv2dWorkload(xs[0], xs[2], xs[3], xs[1], ws[0], ws[2], ws[3], int(a.strides[0]), int(a.strides[1]),
                          pad[0], pad[1], g=int(a.groups), dh=dh, dw=dw)


_REWRITER: type | None = None


def _ConvRewriter(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands for the lazily built class
    global _REWRITER
    if _REWRITER is None:
        _REWRITER = _make_rewriter()
    return _REWRITER(*args, **kwargs)
