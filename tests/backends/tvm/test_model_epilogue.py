"""Whole models through Relax: which operators after a conv its kernel computes, and that the model stays right."""

from typing import Any

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax

from toolkit.backends import template_for
from toolkit.backends.tvm.model import compile_model
from toolkit.manifest import ConvPlan
from toolkit.boards import load_profile
from toolkit.workloads.extract import extract

LOCAL = load_profile("local")
SHAPE = (1, 4, 8, 8)


class Conv(nn.Module):
    """One 3x3 conv of 4 -> 8 channels, then ``after(y, x)``."""

    def __init__(self, after, bias: bool = True) -> None:
        super().__init__()
        self.conv, self.after = nn.Conv2d(4, 8, 3, padding=1, bias=bias), after

    def forward(self, x):
        return self.after(self.conv(x), x)


SKIP = torch.arange(8 * 64, dtype=torch.float32).reshape(1, 8, 8, 8) / 100
SHIFT = torch.linspace(-1, 1, 8).reshape(8, 1, 1)
CASES = {
    "bias+relu": (lambda y, x: torch.relu(y), True, ["bias", "relu"]),
    "relu without bias": (lambda y, x: torch.relu(y), False, ["relu"]),
    "bias+residual+relu": (lambda y, x: torch.relu(y + SKIP), True, ["bias", "residual", "relu"]),
    "a computed residual, first": (lambda y, x: torch.relu(x.repeat(1, 2, 1, 1) + y), False, ["residual", "relu"]),
    "a constant per channel on a conv without bias": (
        lambda y, x: y + SHIFT, False, ["bias"]),
    "a conv's bias, then a constant per channel (batch-norm), then relu": (
        lambda y, x: torch.relu(y + SHIFT), True, ["bias", "relu"]),
    "a constant per channel after a residual": (lambda y, x: y + SKIP + SHIFT, True, ["bias", "residual"]),
    "output used twice": (lambda y, x: torch.relu(y) * y, True, ["bias"]),
    "y + y": (lambda y, x: y + y, False, []),
    "relu after relu": (lambda y, x: torch.relu(torch.relu(y)), True, ["bias", "relu"]),
    "broadcast to a larger batch": (lambda y, x: y + torch.ones(2, 8, 8, 8), False, []),
    "a scalar added": (lambda y, x: torch.relu(y + 0.5), False, []),
    "bias+relu6": (lambda y, x: nn.functional.relu6(y), True, ["bias", "relu6"]),
    "bias+clamp": (lambda y, x: torch.clamp(y, -0.5, 0.25), True, ["bias", "clip(-0.5,0.25)"]),
    "bias+sigmoid": (lambda y, x: torch.sigmoid(y), True, ["bias", "sigmoid"]),
    "bias+silu": (lambda y, x: nn.functional.silu(y), True, ["bias", "silu"]),
    "bias+hardswish": (lambda y, x: nn.functional.hardswish(y), True, ["bias", "hardswish"]),
    "bias+hardsigmoid": (lambda y, x: nn.functional.hardsigmoid(y), True, ["bias", "hardsigmoid"]),
    "bias+residual+silu": (lambda y, x: nn.functional.silu(y + SKIP), True, ["bias", "residual", "silu"]),
    "silu whose input is read again": (lambda y, x: nn.functional.silu(y) + y, True, ["bias"]),
    "hardswish-like with other constants": (lambda y, x: y * nn.functional.relu6(y + 2) / 6, True, ["bias"]),
}


def _plan(module: str, template: Any) -> ConvPlan:
    """The plan of a conv that gets ``template``'s fallback config."""
    return ConvPlan(module, template.workload, "fallback", template=template, config=template.fallback_config())


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_computes_the_ops_after_its_conv_it_can_take(case, tmp_path):
    after, bias, expected = CASES[case]
    torch.manual_seed(0)
    model = Conv(after, bias).eval()
    x = torch.randn(SHAPE)
    program = torch.export.export(model, (x,))
    plans = []
    for node in extract(model, SHAPE).convs:
        template = template_for(node.layer.workload, LOCAL)
        plans.append(_plan(node.module, template))
    built = compile_model(program, LOCAL, plans)
    assert [(p.module, p.kernel, p.epilogue) for p in plans] == [("conv", "edgetune_conv0", expected)]
    assert built.kernels is not None

    (tmp_path / "model.so").write_bytes(built.library)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "model.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy(), tvm.cpu())).numpy()
    with torch.no_grad():
        want = model(x).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


KINDS = {
    "depthwise": nn.Conv2d(8, 8, 3, padding=1, groups=8),
    "depthwise, 2 outputs per group, stride 2": nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=8),
    "grouped": nn.Conv2d(8, 16, 3, padding=1, groups=4),
    "dilated": nn.Conv2d(8, 8, 3, padding=2, dilation=2),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_grouped_depthwise_and_dilated_convs_get_edgetune_kernels_with_their_epilogues(kind, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 1), nn.ReLU(), KINDS[kind], nn.BatchNorm2d(KINDS[kind].out_channels),
                          nn.Hardswish()).eval()
    x = torch.randn(SHAPE)
    convs = extract(model, SHAPE).convs
    plans = [_plan(node.module, template_for(node.layer.workload, LOCAL)) for node in convs]
    assert convs[1].layer.workload.kind == kind.split(",")[0]
    built = compile_model(torch.export.export(model, (x,)), LOCAL, plans)
    assert [p.epilogue for p in plans] == [["bias", "relu"], ["bias", "hardswish"]]
    (tmp_path / "model.so").write_bytes(built.library)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "model.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy(), tvm.cpu())).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_without_fusion_no_kernel_takes_an_epilogue():
    model = Conv(lambda y, x: torch.relu(y + SKIP)).eval()
    program = torch.export.export(model, (torch.randn(SHAPE),))
    template = template_for(extract(model, SHAPE).convs[0].layer.workload, LOCAL)
    plan = _plan("conv", template)
    compile_model(program, LOCAL, [plan], fuse=False)
    assert plan.epilogue == []


@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_after_a_conv_with_or_without_its_own_bias_is_folded_into_the_kernel(bias, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, bias=bias), nn.BatchNorm2d(8), nn.ReLU()).eval()
    with torch.no_grad():
        norm = model[1]
        norm.running_mean.uniform_(-0.5, 0.5), norm.running_var.uniform_(0.5, 2.0)
        norm.weight.uniform_(0.5, 1.5), norm.bias.uniform_(-1, 1)
    x = torch.randn(SHAPE)
    template = template_for(extract(model, SHAPE).convs[0].layer.workload, LOCAL)
    plan = _plan("0", template)
    built = compile_model(torch.export.export(model, (x,)), LOCAL, [plan])
    assert plan.epilogue == ["bias", "relu"]      # no batch-norm arithmetic left outside the kernel
    (tmp_path / "model.so").write_bytes(built.library)
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "model.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy(), tvm.cpu())).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-4)
