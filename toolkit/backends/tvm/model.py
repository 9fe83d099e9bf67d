"""Whole models through Relax: a ``torch.export`` program compiled for a TVM board, its convs edgetune's kernels.

``compile_model`` imports the program with ``relax.frontend.torch.from_exported_program``, binds the weights
as constants, folds batch-norm into the conv weights (``FoldBatchnormToConv2D``, then
``DecomposeOpsForInference`` for any batch-norm left), and replaces every plain conv2d (NCHW, groups 1,
no dilation) by a ``call_tir`` of edgetune's scheduled kernel for its shape: the tuned config when a
record is given, else the template's fallback config (TVM's default pipeline would leave the conv
unscheduled). The kernels take their weights in ``IHWO``: the transpose is folded at compile time. Each
kernel is marked opaque, so ``FuseOps`` leaves it whole and fuses what follows it (bias, residual add,
ReLU) into one elementwise kernel. Grouped and depthwise convs, pooling, the classifier and every other
operator go through TVM's default CPU pipeline.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from toolkit.boards import BoardProfile
from toolkit.errors import ExportError
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import BuildError
from toolkit.workloads import Conv2dWorkload

OPAQUE = 8
"""TVM's ``kOpaque`` operator pattern: ``FuseOps`` fuses nothing into a function marked with it."""


@dataclass(frozen=True)
class ConvPlan:
    """What one conv of the model (graph order) gets: an edgetune kernel of ``template`` with ``config``,
    or, when ``template`` is ``None``, TVM's default lowering."""

    module: str
    template: Any | None
    config: Config | None


def relax_module(program: Any) -> Any:
    """The Relax module of an exported program, weights bound as constants and batch-norm folded."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # torch-internal deprecations, not the user's
            mod = from_exported_program(program, keep_params_as_input=True, unwrap_unit_return_tuple=True)
    except Exception as exc:  # noqa: BLE001 - the importer raises plain errors for unsupported operators
        raise ExportError(f"TVM's PyTorch importer cannot take this model: {_last_line(exc)}") from None
    mod, params = relax.frontend.detach_params(mod)
    if params.get("main"):
        names = [p.name for p in mod["main"].params][-len(params["main"]):]
        mod = relax.transform.BindParams("main", dict(zip(names, params["main"])))(mod)
    for step in (relax.transform.FoldBatchnormToConv2D(), relax.transform.DecomposeOpsForInference(),
                 relax.transform.FoldConstant()):
        mod = step(mod)
    return mod


def compile_model(program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], *,
                  progress: Callable[[str], None] | None = None) -> tuple[bytes, bytes | None, dict[str, str]]:
    """The shared library of the whole model for ``profile`` (cross-linked by its compiler), a library of its
    edgetune kernels alone (each callable by name, for timing one conv; ``None`` when there is none) and, for
    each conv that got an edgetune kernel, module path -> the kernel's function name."""
    import tvm
    from tvm import relax

    mod = relax_module(program)
    names: dict[str, str] = {}
    kernels: dict[tuple[str, int | None], tuple[Any, str]] = {}
    funcs: dict[str, Any] = {}

    def kernel(plan: ConvPlan, builder: Any) -> Any:
        key = (plan.template.workload.spec(), plan.config.index if plan.config else None)
        if key not in kernels:
            if progress is not None:
                progress(f"kernel {plan.template.workload.label}")
            try:
                func = plan.template.schedule(plan.config)["main"]
            except Exception as exc:  # noqa: BLE001 - ScheduleError and friends
                raise ExportError(f"config #{plan.config.index} of {plan.template.workload.label} does not schedule "
                                  f"({_last_line(exc)}); tune it again") from None
            name = f"edgetune_conv{len(kernels)}"
            funcs[name] = func.with_attr("global_symbol", name)
            func = funcs[name].with_attr("op_pattern", OPAQUE)
            kernels[key] = builder.add_func(func, name), name
        names[plan.module] = kernels[key][1]
        return kernels[key][0]

    mod = _ConvRewriter(mod, plans, kernel).run()
    mod = relax.transform.FoldConstant()(mod)
    if progress is not None:
        progress("the whole model (Relax)")
    target = profile.tvm_target()
    try:
        with target:
            executable = tvm.compile(mod, target=target)
            alone = tvm.compile(tvm.IRModule(funcs), target=target) if funcs else None
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"TVM could not compile the model for {profile.name}: {_last_line(exc)}") from None
    return _library(executable, profile), _library(alone, profile) if alone else None, names


def _library(executable: Any, profile: BoardProfile) -> bytes:
    """The executable as a shared library, linked by the profile's (cross) compiler."""
    from tvm.support import cc

    fcompile = cc.cross_compiler(profile.cross_compiler) if profile.cross_compiler else None
    with tempfile.TemporaryDirectory(prefix="edgetune-model-") as tmp:
        path = os.path.join(tmp, "model.so")
        try:
            executable.export_library(path, **({"fcompile": fcompile} if fcompile else {}))
        except Exception as exc:  # noqa: BLE001 - compiler errors come back as RuntimeError
            raise BuildError(f"linking with {profile.cross_compiler or 'the default compiler'} failed: "
                             f"{_last_line(exc)}") from None
        return Path(path).read_bytes()


def _last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _make_rewriter() -> type:
    """The Relax mutator class (built on first use: ``relax`` is imported lazily)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    conv_op = tvm.ir.Op.get("relax.nn.conv2d")

    @mutator
    class Rewriter(PyExprMutator):
        def __init__(self, mod: Any, plans: Sequence[ConvPlan], kernel: Callable[[ConvPlan, Any], Any]) -> None:
            super().__init__(mod)
            self.mod_, self.plans, self.kernel, self.seen = mod, list(plans), kernel, 0

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if call.op != conv_op:
                return call
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
            weight = self.builder_.emit(relax.op.permute_dims(call.args[1], [1, 2, 3, 0]))
            return relax.call_tir(self.kernel(plan, self.builder_), [call.args[0], weight], call.ty)

        def run(self) -> Any:
            gv = self.mod_.get_global_var("main")
            self.builder_.update_func(gv, self.visit_expr(self.mod_["main"]))
            if self.seen != len(self.plans):
                raise ExportError(f"the model's Relax graph has {self.seen} convs, its PyTorch graph "
                                  f"{len(self.plans)}; the model cannot be matched")
            return self.builder_.get()

    return Rewriter


def _workload(call: Any) -> Conv2dWorkload | None:
    """The edgetune workload of a Relax conv2d call (``None`` when it is not one: grouped, dilated, another
    layout or dtype, a weight computed at run time, a symbolic shape)."""
    import tvm

    a = call.attrs
    plain = (a.data_layout == "NCHW" and a.kernel_layout == "OIHW" and a.out_layout == "NCHW"
             and [int(d) for d in a.dilation] == [1, 1] and isinstance(call.args[1], tvm.ir.expr.Constant))
    pad = [int(p) for p in a.padding]
    if not plain or int(a.groups) != 1 or pad[0] != pad[2] or pad[1] != pad[3]:
        return None
    try:
        xs = [int(v) for v in call.args[0].ty.shape]
        ws = [int(v) for v in call.args[1].ty.shape]
    except (TypeError, ValueError):   # a symbolic shape
        return None
    if call.args[0].ty.dtype != "float32":
        return None
    return Conv2dWorkload(xs[0], xs[2], xs[3], xs[1], ws[0], ws[2], ws[3], int(a.strides[0]), int(a.strides[1]),
                          pad[0], pad[1])


_REWRITER: type | None = None


def _ConvRewriter(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands for the lazily built class
    global _REWRITER
    if _REWRITER is None:
        _REWRITER = _make_rewriter()
    return _REWRITER(*args, **kwargs)
