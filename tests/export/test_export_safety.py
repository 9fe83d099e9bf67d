"""Nothing is loaded or run from an export unless it is listed, hashed and inside the folder; ``--force``
replaces only an edgetune export; hostile manifests and programs are one-line errors."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.cli.app import app
from toolkit.export import ExportError, export, load_export, sha256_file
from toolkit.tuning.core.runner import MeasureOptions
from toolkit.tuning.session import tune
from toolkit.testing.cli import one_line_error
from toolkit.tuning.tuners.base import make_tuner
from toolkit.vta.errors import ProgramFormatError
from toolkit.vta.program import Program
from toolkit.workloads import parse_workload

VTA_WL = "conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"
cli = CliRunner()


@pytest.fixture(scope="module")
def vta_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    log = root / "fsim.jsonl"
    tune(make_task(parse_workload(VTA_WL), resolve_board("vta-fsim")), make_tuner("random", seed=0), 8, log=log,
         measure_options=MeasureOptions(check=True))
    export(log, root / "export")
    return root / "export"


def _copy(src, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _edit_manifest(folder, change):
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))


@pytest.mark.parametrize("path", ["../evil.vtaprog", "/tmp/evil.vtaprog", "kernels/../../evil", "kernels//x", ""])
def test_a_kernel_file_outside_the_folder_is_refused(vta_export, tmp_path, path):
    folder = _copy(vta_export, tmp_path)

    def point(m):
        m["kernels"][0]["files"]["program"] = path
        m["files"][path] = "0" * 64

    _edit_manifest(folder, point)
    with pytest.raises(ExportError, match="not a plain path inside the export|does not list"):
        load_export(folder)


def test_a_kernel_file_the_manifest_does_not_hash_is_refused(vta_export, tmp_path):
    folder = _copy(vta_export, tmp_path)
    extra = folder / "kernels" / "other.vtaprog"
    shutil.copy(next((folder / "kernels").glob("*.vtaprog")), extra)
    _edit_manifest(folder, lambda m: m["kernels"][0]["files"].update(program="kernels/other.vtaprog"))
    with pytest.raises(ExportError, match="does not list and hash"):
        load_export(folder)


def test_a_symlinked_kernel_file_is_refused_even_with_the_right_hash(vta_export, tmp_path):
    folder = _copy(vta_export, tmp_path)
    prog = next((folder / "kernels").glob("*.vtaprog"))
    outside = tmp_path / "outside.vtaprog"
    shutil.move(prog, outside)
    prog.symlink_to(outside)
    assert sha256_file(prog) == json.loads((folder / "manifest.json").read_text())["files"][
        str(prog.relative_to(folder))]
    with pytest.raises(ExportError, match="symlink"):
        load_export(folder)


def test_a_symlinked_or_huge_manifest_is_refused(vta_export, tmp_path):
    folder = _copy(vta_export, tmp_path)
    real = tmp_path / "m.json"
    shutil.move(folder / "manifest.json", real)
    (folder / "manifest.json").symlink_to(real)
    with pytest.raises(ExportError, match="not an edgetune export"):
        load_export(folder)
    (folder / "manifest.json").unlink()
    (folder / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ExportError, match="nested too deeply|not a JSON object"):
        load_export(folder)


def test_force_replaces_an_export_but_never_another_folder(vta_export, tmp_path):
    log = vta_export / "tuning-log.jsonl"
    again = _copy(vta_export, tmp_path)
    export(log, again, force=True)                           # an earlier export: replaced
    assert load_export(again).kernels
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.js").write_text("console.log(1)\n")
    (project / "manifest.json").write_text('{"name": "my-app"}\n')
    r = cli.invoke(app, ["export", "--log", str(log), "--out", str(project), "--force"])
    assert "not an edgetune export" in one_line_error(r)
    assert (project / "src" / "main.js").read_text() == "console.log(1)\n"
    (again / "notes.txt").write_text("mine\n")                # an export plus a file of the user's
    r = cli.invoke(app, ["export", "--log", str(log), "--out", str(again), "--force"])
    assert "does not list" in one_line_error(r) and (again / "notes.txt").exists()


def test_a_symlinked_out_folder_is_refused(vta_export, tmp_path):
    target = tmp_path / "real"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    r = cli.invoke(app, ["export", "--log", str(vta_export / "tuning-log.jsonl"), "--out", str(tmp_path / "link")])
    assert "symlink" in one_line_error(r)


def _program_with_header(vta_export, change) -> bytes:
    prog = Program.load(next((vta_export / "kernels").glob("*.vtaprog")))
    hw = prog.hw
    data = bytearray(prog.to_bytes())
    import struct
    import zlib

    from toolkit.vta import program as module

    fixed = len(module.MAGIC) + module._HEADER.size
    version, hw_len, layout_len, n_insns, n_uops = module._HEADER.unpack_from(data, len(module.MAGIC))
    hw_json = json.loads(data[fixed: fixed + hw_len])
    layout = json.loads(data[fixed + hw_len: fixed + hw_len + layout_len])
    change(hw_json, layout)
    new_hw, new_layout = json.dumps(hw_json).encode(), json.dumps(layout).encode()
    rest = bytes(data[fixed + hw_len + layout_len: -4])
    body = (module.MAGIC + module._HEADER.pack(version, len(new_hw), len(new_layout), n_insns, n_uops)
            + new_hw + new_layout + rest)
    assert hw.insn_bytes
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("change,what", [
    (lambda hw, lay: lay["regions"][0].update(nbytes=1 << 40), "out of range"),
    (lambda hw, lay: lay["regions"][0].update(shape=[1 << 20, 1 << 20]), "does not fit"),
    (lambda hw, lay: lay["regions"][0].update(dtype="float128"), "bad name, dtype"),
    (lambda hw, lay: hw.update(CLOCK_MHZ=float("inf")), "CLOCK_MHZ"),
    (lambda hw, lay: hw.update(LOG_BLOCK=4.5), "integer"),
    (lambda hw, lay: lay.update(meta=[1]), "meta"),
])
def test_hostile_program_headers_are_format_errors(vta_export, change, what):
    with pytest.raises(ProgramFormatError, match=what):
        Program.from_bytes(_program_with_header(vta_export, change))


def test_an_export_names_the_bitstream_of_the_config_it_was_tuned_for(tmp_path):
    from toolkit.vta.config import get_preset

    log = tmp_path / "zcu.jsonl"
    r = cli.invoke(app, ["tune", "-w", VTA_WL, "-t", "random", "-n", "6", "--vta-config", "zcu102", "--log", str(log)])
    assert r.exit_code == 0, r.output
    manifest = export(log, tmp_path / "x")
    assert manifest.bitstream == get_preset("zcu102").bitstream != get_preset("pynq").bitstream
    assert f"edgetune run {tmp_path / 'x'} --board" in (tmp_path / "x" / "README.md").read_text()


def test_a_full_disk_during_export_names_the_export_and_leaves_nothing(tmp_path):
    """A write that fails for space (the file-size limit stands in for a full disk) names the export folder, leaves
    no stage behind and no half export."""
    import resource
    import signal
    import subprocess
    import sys

    log = tmp_path / "l.jsonl"
    tune(make_task(parse_workload("resnet18.C2"), resolve_board("vta-fsim")), make_tuner("random", seed=0), 8,
         log=log)

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    r = subprocess.run([sys.executable, "-m", "toolkit", "export", "--log", str(log), "--out", "exp"], cwd=tmp_path,
                       preexec_fn=limit, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("wait:")]
    assert r.returncode == 2 and len(lines) == 1 and "cannot write export exp" in lines[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.jsonl"]


def test_agreement_thresholds_are_for_model_exports(vta_export):
    r = cli.invoke(app, ["run", str(vta_export), "-b", "vta-fsim", "--min-cosine", "0.9"])
    assert "--min-cosine and --min-top1 are for model exports" in one_line_error(r)


def test_a_workload_asked_for_twice_is_exported_once(vta_export, tmp_path):
    from toolkit.export.write import RepeatedWorkloadWarning

    log = vta_export / "tuning-log.jsonl"
    with pytest.warns(RepeatedWorkloadWarning, match="1 repeated workload"):
        r = cli.invoke(app, ["export", "--log", str(log), "--out", str(tmp_path / "e"), "-w", VTA_WL, "-w", VTA_WL])
    assert r.exit_code == 0, r.output
    assert len(load_export(tmp_path / "e").kernels) == 1
