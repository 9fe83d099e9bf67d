"""Property tests of every reader of untrusted input: the tuning-log loader, ``VTAConfig.from_json``, the
VTA program reader and the export-manifest reader. Whatever the bytes, each returns a value or raises its
one-line error (never another exception), and a valid record is never dropped.

Derandomized (a fixed set of examples per run) and without an example database, so a run is reproducible.
"""

from __future__ import annotations

import json
import warnings
import math
import struct
import zlib

import pytest
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.errors import ConfigError, ExportError, LogError
from toolkit.manifest import ExportManifest
from toolkit.tuning.core.result import ErrorClass
from toolkit.tuning.journal import Journal, LogHeader, Record, read_log
from toolkit.vta import program as vta_program
from toolkit.vta.config import VTAConfig, get_preset
from toolkit.vta.errors import ProgramFormatError
from toolkit.vta.program import Program

PROPERTY = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TASK = {"workload": {"n": 1, "h": 7}, "board": "vta-fsim", "target": {"kind": "llvm"}, "template": {}, "hw": None}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10 ** 30), 10 ** 30) | st.floats(allow_nan=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
RECORD_KEYS = ["workload", "board", "tuner", "trial", "config", "index", "costs", "error", "message", "features",
               "target", "template", "timestamp", "build_s", "run_s"]


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(json.dumps(LogHeader(TASK).to_json()).encode() + b"\n" + b"".join(lines))


# -- the log loader -------------------------------------------------------------------------------------------
@PROPERTY
@given(st.lists(st.binary(max_size=60), max_size=4))
def test_any_bytes_after_a_header_load_or_give_a_log_error(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("log") / "l.jsonl"
    _write(path, [ln + b"\n" for ln in lines])
    try:
        read_log(path)
    except LogError as exc:
        assert "\n" not in str(exc)


@PROPERTY
@given(st.fixed_dictionaries({}, optional={k: json_values for k in RECORD_KEYS}))
def test_any_record_shaped_object_loads_or_gives_a_log_error(tmp_path_factory, obj):
    path = tmp_path_factory.mktemp("log") / "l.jsonl"
    base = {"workload": {}, "board": "b", "tuner": "t", "trial": 0, "config": {}}
    _write(path, [json.dumps({**base, **obj}).encode() + b"\n"])
    try:
        _, recs = read_log(path)
    except LogError:
        return
    r = recs[0]
    assert all(math.isfinite(c) and c > 0 for c in r.costs) and isinstance(r.config, dict)


valid_records = st.builds(
    Record, workload=st.just(TASK["workload"]), board=st.just("vta-fsim"), tuner=st.sampled_from(["xgb", "random"]),
    trial=st.integers(0, 10 ** 6), config=st.dictionaries(st.text(max_size=6), st.integers(0, 64), max_size=3),
    index=st.none() | st.integers(0, 10 ** 9),
    costs=st.lists(st.floats(min_value=1e-9, max_value=1e3), max_size=3),
    error=st.none() | st.sampled_from([e.value for e in ErrorClass]), message=st.text(max_size=20),
    features=st.dictionaries(st.text(max_size=6), st.floats(min_value=-1e18, max_value=1e18), max_size=3))


@PROPERTY
@given(st.lists(valid_records, max_size=6))
def test_every_valid_record_written_is_read_back_unchanged(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("log") / "l.jsonl"
    with Journal(path, LogHeader(TASK)) as journal:
        for r in records:
            journal.append(r)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # an exact repeat is read once (DuplicateRecordWarning)
        _, back = read_log(path)
    written = [json.loads(json.dumps(r.to_json())) for r in records]
    assert [b.to_json() for b in back] == [w for i, w in enumerate(written) if w not in written[:i]]


# -- VTAConfig.from_json --------------------------------------------------------------------------------------
VTA_KEYS = list(get_preset("pynq").to_json()) + ["HW_FREQ"]


@PROPERTY
@given(st.dictionaries(st.sampled_from(VTA_KEYS) | st.text(max_size=6), json_values, max_size=6))
def test_any_vta_config_dict_parses_or_gives_a_config_error(d):
    try:
        hw = VTAConfig.from_json(d)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    assert math.isfinite(hw.clock_mhz) and hw.clock_mhz > 0 and hw.insn_bytes in (16, 32)


@PROPERTY
@given(st.sampled_from(VTA_KEYS), json_values)
def test_one_field_of_a_preset_changed_reads_as_given_or_gives_a_config_error(key, value):
    d = {**get_preset("zcu102").to_json(), key: value}
    try:
        hw = VTAConfig.from_json(d)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    if key in hw.to_json():      # what was accepted is what the config holds
        assert hw.to_json()[key] == value


NONSENSE = [None, "x", -1, 10 ** 9, [], {}, True]


@pytest.mark.parametrize("key", [k for k in get_preset("zcu102").to_json() if k != "TARGET"])
@pytest.mark.parametrize("value", NONSENSE, ids=repr)
def test_a_preset_field_set_to_nonsense_is_refused(key, value):
    with pytest.raises(ConfigError):
        VTAConfig.from_json({**get_preset("zcu102").to_json(), key: value})


# -- the VTA program reader -----------------------------------------------------------------------------------
def _program_bytes() -> bytes:
    from toolkit.vta.compiler import compile_conv2d
    from toolkit.workloads import parse_workload

    hw = get_preset("pynq")
    wl = parse_workload("conv2d:H=14,W=14,CI=16,CO=16,K=3,S=1,P=1")
    cfg = {"tile_b": [1, 1], "tile_h": [2, 7], "tile_w": [1, 14], "tile_ci": [1, 1], "tile_co": [1, 1],
           "oc_nthread": 1, "h_nthread": 1}
    return compile_conv2d(wl, cfg, hw).program.to_bytes()


PROGRAM = _program_bytes()


def _with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


@PROPERTY
@given(st.lists(st.tuples(st.integers(0, len(PROGRAM) - 5), st.integers(0, 255)), min_size=1, max_size=6),
       st.booleans())
def test_a_mutated_program_reads_or_gives_a_format_error(edits, fix_crc):
    data = bytearray(PROGRAM)
    for pos, byte in edits:
        data[pos] = byte
    blob = _with_crc(bytes(data[:-4])) if fix_crc else bytes(data)
    try:
        prog = Program.from_bytes(blob)
    except ProgramFormatError as exc:
        assert "\n" not in str(exc)
        return
    assert fix_crc or blob == PROGRAM, "a changed program was read although its checksum no longer matches"
    assert Program.from_bytes(prog.to_bytes()).to_bytes() == prog.to_bytes()   # what was read writes back as read


@PROPERTY
@given(json_values, json_values)
def test_any_program_header_json_reads_or_gives_a_format_error(hw_json, layout_json):
    fixed = len(vta_program.MAGIC) + vta_program._HEADER.size
    version, hw_len, layout_len, n_insns, n_uops = vta_program._HEADER.unpack_from(PROGRAM, len(vta_program.MAGIC))
    a, b = json.dumps(hw_json).encode(), json.dumps(layout_json).encode()
    rest = PROGRAM[fixed + hw_len + layout_len: -4]
    body = vta_program.MAGIC + vta_program._HEADER.pack(version, len(a), len(b), n_insns, n_uops) + a + b + rest
    try:
        prog = Program.from_bytes(_with_crc(body))
    except ProgramFormatError as exc:
        assert "\n" not in str(exc)
        return
    assert prog.to_bytes() == Program.from_bytes(prog.to_bytes()).to_bytes()   # what was read writes back as read


# -- the export manifest reader -------------------------------------------------------------------------------
MANIFEST = {
    "schema": 1, "kind": "vta-program", "board": "vta-fsim", "board_type": "vta-fsim", "family": "vta",
    "arch": "x86_64", "target": {}, "hardware": None, "bitstream": None, "edgetune": "0", "tvm": "0",
    "created": "now", "log": {"file": "tuning-log.jsonl"}, "tuned_on": {},
    "kernels": [{"label": "k", "workload": {}, "config": {}, "index": 0, "latency_s": 1.0, "tuner": "t",
                 "template": {}, "files": {"program": "kernels/k.vtaprog"}, "signature": {}}],
    "files": {"kernels/k.vtaprog": "0" * 64}}


@PROPERTY
@given(json_values)
def test_any_json_is_a_manifest_or_an_export_error(obj):
    try:
        ExportManifest.from_json(obj, "manifest.json")
    except ExportError as exc:
        assert "\n" not in str(exc)


@PROPERTY
@given(st.sampled_from(sorted(MANIFEST)), json_values)
def test_one_bad_manifest_field_gives_an_export_error(key, value):
    try:
        m = ExportManifest.from_json({**MANIFEST, key: value}, "manifest.json")
    except ExportError:
        return
    for k in m.kernels:                       # what is accepted never points outside the listed files
        assert set(k.files.values()) <= set(m.files)
