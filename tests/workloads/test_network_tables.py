"""The built-in network tables against independently written torch models and published MAC totals."""

from collections import Counter

import pytest
import torch

import reference_models as ref
from toolkit.errors import WorkloadError
from toolkit.workloads.extract import extract
from toolkit.backends import backend_for
from toolkit.workloads.networks import NETWORKS, get_network, plan_tasks
from toolkit.workloads import RESNET18, parse_workload

REFERENCES = {
    "resnet18": (ref.resnet18, (1, 3, 224, 224)),
    "resnet34": (ref.resnet34, (1, 3, 224, 224)),
    "resnet50": (ref.resnet50, (1, 3, 224, 224)),
    "vgg16": (ref.vgg16, (1, 3, 224, 224)),
    "alexnet": (ref.alexnet, (1, 3, 224, 224)),
    "mobilenet_v1": (ref.mobilenet_v1, (1, 3, 224, 224)),
    "yolov3_tiny": (ref.YoloV3Tiny, (1, 3, 416, 416)),
}


def _shapes(layers):
    return Counter({layer.workload: layer.count for layer in layers})


@pytest.mark.parametrize("name", NETWORKS)
def test_table_matches_the_torch_definition(name):
    factory, shape = REFERENCES[name]
    with torch.device("meta"):           # shapes only: no weight initialisation
        model = factory()
    extracted = extract(model, shape, name=name).network
    net = get_network(name)
    assert net.input_shape == shape
    assert _shapes(net.layers) == _shapes(extracted.layers)
    assert net.n_convs == sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())


# Published totals at 224x224 (416x416 for YOLOv3-tiny), MACs including the fully connected layers,
# which are not convs: the FC MACs are added here from the published FC shapes.
PUBLISHED = {
    "resnet18": (1.8e9, 512 * 1000),
    "resnet50": (4.1e9, 2048 * 1000),
    "vgg16": (15.5e9, 25088 * 4096 + 4096 * 4096 + 4096 * 1000),
    "alexnet": (0.71e9, 9216 * 4096 + 4096 * 4096 + 4096 * 1000),
    "mobilenet_v1": (0.569e9, 1024 * 1000),          # Howard et al. Table 1: 569 million mult-adds
    "yolov3_tiny": (5.571e9 / 2, 0),                 # darknet prints 5.571 BFLOPs (2 per MAC)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_mac_totals_match_published_numbers(name):
    published, fc = PUBLISHED[name]
    assert get_network(name).macs + fc == pytest.approx(published, rel=0.02)


def test_resnet18_is_tvms_vta_table():
    net = get_network("resnet18")
    assert [layer.name for layer in net.layers] == [f"resnet18.C{i}" for i in range(1, 12)]
    assert [layer.count for layer in net.layers] == [1, 4, 1, 1, 3, 1, 1, 3, 1, 1, 3]
    assert [layer.workload for layer in net.layers] == list(RESNET18.values())


def test_mobilenet_depthwise_layers_are_workloads_that_vta_leaves_to_the_cpu():
    net = get_network("mobilenet_v1")
    dw = [layer for layer in net.layers if layer.workload.kind == "depthwise"]
    assert sum(layer.count for layer in dw) == 13
    assert all(",G=" in layer.workload.spec() for layer in dw)
    assert sum(layer.count for layer in net.dense()) == 14   # first full conv + 13 pointwise
    plan = plan_tasks(net, block=16)
    assert sum(t.count for t in plan.tasks) == 14
    assert all("VTA runs dense convs; runs on the CPU" in why for _, why in plan.skipped)
    assert sum(t.count for t in plan_tasks(net).tasks) == 27      # a CPU or GPU board tunes every conv


def test_network_layers_parse_as_workloads():
    assert parse_workload("resnet50.L3") == get_network("resnet50").layers[2].workload
    assert parse_workload("VGG16.l1").spec() == "conv2d:N=1,H=224,W=224,CI=3,CO=64,K=3,S=1,P=1"
    assert parse_workload("mobilenet_v1.L2").spec() == "conv2d:N=1,H=112,W=112,CI=32,CO=32,K=3,S=1,P=1,G=32"
    with pytest.raises(WorkloadError, match="unknown workload resnet50.L99: network resnet50 has no layer 'L99'"):
        parse_workload("resnet50.L99")
    with pytest.raises(WorkloadError, match="unknown network"):
        get_network("resnet1000")


def test_vta_plan_rewrites_c1_by_space_to_depth_keeps_it_on_cpu_or_pads_it():
    net = get_network("resnet18")
    plan = backend_for("vta").plan_network(net)
    assert [t.workload.name for t in plan.tasks] == [f"resnet18.C{i}" for i in range(1, 12)]
    assert plan.tasks[0].workload.spec() == "conv2d:N=1,H=115,W=115,CI=16,CO=64,K=4,S=1,P=0" and not plan.skipped
    plan = backend_for("vta").plan_network(net, first_conv="cpu")
    assert [t.workload.name for t in plan.tasks] == [f"resnet18.C{i}" for i in range(2, 12)]
    assert [name for name, _ in plan.skipped] == ["resnet18.C1"]
    padded = backend_for("vta").plan_network(net, first_conv="pad")
    assert padded.tasks[0].workload.ci == 16 and padded.tasks[0].workload.name == "resnet18.C1"
    cpu = backend_for("cpu").plan_network(net)
    assert len(cpu.tasks) == 11 and not cpu.skipped


def test_vta_plan_pads_channels_and_skips_depthwise():
    plan = backend_for("vta").plan_network(get_network("yolov3_tiny"))
    heads = [t for t in plan.tasks if "L9" in t.workload.name or "L12" in t.workload.name]
    assert [t.workload.co for t in heads] == [256, 256]           # 255 output channels padded to 16
    assert all(t.workload.ci % 16 == 0 and t.workload.co % 16 == 0 for t in plan.tasks)
    mobilenet = backend_for("vta").plan_network(get_network("mobilenet_v1"))
    assert sum("depthwise" in why for _, why in mobilenet.skipped) == 9     # 9 distinct depthwise shapes
    assert sum(t.count for t in mobilenet.tasks) == 14                      # the first conv by space-to-depth
