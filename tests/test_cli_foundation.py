"""The foundation commands through typer's CliRunner and as a real subprocess."""

import json
import re
import os
import subprocess
import sys

from typer.testing import CliRunner

from toolkit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_help_lists_command_groups():
    r = invoke("--help")
    assert r.exit_code == 0
    for group in ("board", "workloads"):
        assert group in r.output


def test_board_add_list_show_remove(tmp_path):
    inv = str(tmp_path / "inv.toml")
    r = invoke("board", "add", "pynq1", "--type", "pynq-z1", "--host", "192.0.2.10", "--tag", "lab",
               "--inventory", inv)
    assert r.exit_code == 0, r.output
    assert "pynq1" in r.output and "rpc key pynq" in r.output
    r = invoke("board", "list", "--json", "--inventory", inv)
    data = json.loads(r.output)
    assert [b["name"] for b in data["boards"]] == ["pynq1"]
    assert data["boards"][0]["user"] == "xilinx"  # the profile's default user
    assert "vta-fsim" in data["builtin"]
    r = invoke("board", "show", "pynq1", "--json", "--inventory", inv)
    shown = json.loads(r.output)
    assert shown["profile"]["vta"]["bitstream"] == "1x16_i8w8a32_15_15_18_17"
    text = invoke("board", "show", "pynq1", "--inventory", inv).output
    for key in ("arch", "family", "host", "vta"):      # each once, the entry's and the profile's merged
        assert len(re.findall(rf"^[│|]? *{key} ", text, flags=re.M)) == 1, (key, text)
    r = invoke("board", "list", "--inventory", inv)
    assert "pynq1" in r.output and "vta-fsim" in r.output
    r = invoke("board", "remove", "pynq1", "--inventory", inv)
    assert r.exit_code == 0
    assert json.loads(invoke("board", "list", "--json", "--inventory", inv).output)["boards"] == []


def test_inventory_from_environment(tmp_path, monkeypatch):
    path = tmp_path / "env-inv.toml"
    monkeypatch.setenv("EDGETUNE_INVENTORY", str(path))
    assert invoke("board", "add", "pi", "--type", "rpi4", "--host", "pi.local").exit_code == 0
    assert "[boards.pi]" in path.read_text()


def test_builtin_board_show():
    r = invoke("board", "show", "vta-fsim", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["builtin"] is True


def test_bad_input_is_one_line_no_traceback(tmp_path):
    inv = str(tmp_path / "inv.toml")
    cases = [
        ("board", "add", "x", "--type", "pynq-z9", "--inventory", inv),
        ("board", "show", "nope", "--inventory", inv),
        ("board", "remove", "nope", "--inventory", inv),
        ("workloads", "show", "conv2d:H=56,W=56,CI=64,CO=64,K=3,S=x"),
    ]
    for args in cases:
        r = invoke(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
        assert len([line for line in r.output.splitlines() if line.strip()]) == 1, r.output


def test_corrupt_inventory_cli_error(tmp_path):
    inv = tmp_path / "inv.toml"
    inv.write_text("[boards\n")
    r = invoke("board", "list", "--inventory", str(inv))
    assert r.exit_code == 2 and str(inv) in r.output.replace("\n", "")
    assert inv.read_text() == "[boards\n"


def test_workloads_list_and_show():
    r = invoke("workloads", "list", "--json")
    names = [w["name"] for w in json.loads(r.output)]
    assert names[:3] == ["resnet18.C1", "resnet18.C2", "resnet18.C3"] and "resnet18.C11" in names
    r = invoke("workloads", "show", "resnet18.C4", "--json")
    assert json.loads(r.output)["out"] == "28x28"


def test_real_subprocess(tmp_path):
    env = dict(os.environ, EDGETUNE_INVENTORY=str(tmp_path / "inv.toml"))
    exe = [sys.executable, "-m", "toolkit"]
    r = subprocess.run(exe + ["--help"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "board" in r.stdout
    r = subprocess.run(exe + ["board", "add", "j", "--type", "jetson-nano", "--host", "192.0.2.7"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(exe + ["board", "show", "missing"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "unknown board 'missing'" in r.stderr


def test_every_help_page_shows_value_names_and_its_brackets(monkeypatch):
    """No ``<bool>``/``<list[str]>`` labels, flags without a value name, ``[vta]`` printed as written."""
    from typer.main import get_command

    monkeypatch.setenv("COLUMNS", "200")
    pages = []

    def walk(command, path):
        pages.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(get_command(app), [])
    assert len(pages) > 30
    for path in pages:
        r = runner.invoke(app, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        for label in ("<bool>", "<str>", "<int>", "<list[", "<path>", "<float>", "``"):
            assert label not in r.output, (path, label)
    compile_help = runner.invoke(app, ["vta", "compile", "--help"]).output
    assert "its [vta] preset gives" in " ".join(compile_help.split()).replace("│ ", "")


def test_tables_off_a_terminal_keep_every_cell_whole_on_one_line(capsys):
    from toolkit import console

    spec = "conv2d:N=1,H=56,W=56,CI=64,CO=64,K=1,S=1,P=0," + "x" * 80 + "_END"
    console.table("tasks", ["task", "spec"], [("resnet50.L2", spec)])
    assert any(spec in line for line in capsys.readouterr().out.splitlines())
