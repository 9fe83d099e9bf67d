"""Workload specs: parsing, canonical form, named layers, malformed input."""

import pytest

from toolkit.errors import WorkloadError
from toolkit.workloads import RESNET18, Conv2dWorkload, list_named, parse_workload


def test_full_spec_parses():
    w = parse_workload("conv2d:N=1,H=56,W=56,CI=64,CO=64,K=3,S=1,P=1")
    assert (w.n, w.h, w.w, w.ci, w.co, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw) == (1, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1)
    assert (w.oh, w.ow) == (56, 56)


def test_batch_defaults_to_one_and_separate_axes():
    w = parse_workload("conv2d:H=14,W=28,CI=16,CO=32,KH=1,KW=3,SH=2,SW=1,PH=0,PW=1")
    assert w.n == 1 and (w.kh, w.kw, w.sh, w.sw, w.ph, w.pw) == (1, 3, 2, 1, 0, 1)
    assert (w.oh, w.ow) == (7, 28)


def test_spec_round_trip():
    for w in list_named():
        assert parse_workload(w.spec()) == w
    odd = Conv2dWorkload(2, 9, 11, 3, 5, 3, 1, 2, 1, 1, 0)
    assert parse_workload(odd.spec()) == odd


def test_resnet18_table_matches_tvm():
    # Output sizes and MACs of TVM's VTA ResNet-18 table (vta.md 4.7).
    expected = {
        "C1": (112, 118_013_952), "C2": (56, 115_605_504), "C3": (28, 57_802_752), "C4": (28, 6_422_528),
        "C5": (28, 115_605_504), "C6": (14, 57_802_752), "C7": (14, 6_422_528), "C8": (14, 115_605_504),
        "C9": (7, 57_802_752), "C10": (7, 6_422_528), "C11": (7, 115_605_504),
    }
    for name, (out, macs) in expected.items():
        w = RESNET18[f"resnet18.{name}"]
        assert (w.oh, w.macs) == (out, macs), name
    assert parse_workload("resnet18.c5") == RESNET18["resnet18.C5"]


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("conv2d:H=56,W=56,CI=64,CO=64,K=3,S=x,P=1", "S must be a non-negative integer"),
        ("conv2d:H=56,W=56,CI=64,CO=64,K=3,Q=1", "unknown workload field 'Q'"),
        ("conv2d:H=56,W=56,CI=64,K=3", "missing field(s) CO"),
        ("conv2d:H=56,W=56,CI=64,CO=64,K=3,K=5", "K given twice"),
        ("conv2d:H=56,W=56,CI=64,CO=64,K=3,S=0", "SH must be >= 1"),
        ("conv2d:H=2,W=2,CI=1,CO=1,K=5", "empty output"),
        ("conv2d:H56", "not KEY=VALUE"),
        ("conv2d:", "has no fields"),
        ("resnet99.C1", "unknown workload"),
        ("conv2d:H=8,W=8,CI=16,CO=16,K=3,G=3", "CI=16 is not a multiple of the groups G=3"),
        ("conv2d:H=8,W=8,CI=16,CO=20,K=3,G=8", "CO=20 is not a multiple of the groups G=8"),
        ("conv2d:H=8,W=8,CI=16,CO=16,K=3,G=0", "G must be >= 1"),
        ("conv2d:H=8,W=8,CI=16,CO=16,K=3,D=0", "DH must be >= 1"),
        ("conv2d:H=4,W=4,CI=1,CO=1,K=3,D=2", "empty output"),
    ],
)
def test_malformed_specs_name_the_field(spec, fragment):
    with pytest.raises(WorkloadError) as exc:
        parse_workload(spec)
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value)


def test_dict_round_trip_and_name_ignored_by_equality():
    w = RESNET18["resnet18.C8"]
    assert Conv2dWorkload.from_dict(w.to_dict()) == w
    assert w.flops == 2 * w.macs
    with pytest.raises(WorkloadError):
        Conv2dWorkload.from_dict({"h": 1})


def test_groups_and_dilation_are_in_the_spec_only_when_not_one():
    w = parse_workload("conv2d:H=56,W=56,CI=64,CO=64,K=3,S=1,P=2,G=64,D=2")
    assert (w.g, w.dh, w.dw, w.oh, w.kind, w.macs) == (64, 2, 2, 56, "depthwise", 56 * 56 * 64 * 9)
    assert parse_workload(w.spec()) == w and Conv2dWorkload.from_dict(w.to_dict()) == w
    assert w.to_dict()["g"] == 64 and parse_workload("conv2d:H=9,W=9,CI=8,CO=8,K=3,DH=2,DW=1").spec().endswith(
        ",P=0,DH=2,DW=1")
    plain = RESNET18["resnet18.C8"]
    assert not {"g", "dh", "dw"} & set(plain.to_dict()) and ",G=" not in plain.spec()   # records as they were
    assert parse_workload("conv2d:H=8,W=8,CI=16,CO=32,K=3,G=4").kind == "grouped"
    assert parse_workload("conv2d:H=8,W=8,CI=16,CO=32,K=3,G=16").kind == "depthwise"    # channel multiplier 2
