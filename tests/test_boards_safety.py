"""The inventory under a lock and validated on every read; stored pids signalled only when they are ours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from toolkit.boards import BoardEntry, Inventory
from toolkit.errors import BoardError, InventoryError
from toolkit import procs
from toolkit.rpc.agent_control import stop_command
from toolkit.rpc.service import running_tracker, stop_service
from toolkit.state import write_state

ROOT = Path(__file__).resolve().parents[1]


def test_concurrent_board_adds_all_land(tmp_path):
    inv = tmp_path / "inv.toml"
    code = ("import sys; from toolkit.boards import BoardEntry, Inventory; "
            "Inventory(sys.argv[1]).add(BoardEntry(sys.argv[2], 'vta-fsim'))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [subprocess.Popen([sys.executable, "-c", code, str(inv), f"sim{i}"], env=env) for i in range(12)]
    assert [w.wait(timeout=120) for w in workers] == [0] * 12
    assert sorted(b.name for b in Inventory(inv).load()) == sorted(f"sim{i}" for i in range(12))


@pytest.mark.parametrize("entry,what", [
    (BoardEntry("pynq1\n", "pynq-z1", host="10.0.0.2"), "board name"),
    (BoardEntry("pynq1", "pynq-z1", host=""), "host"),
    (BoardEntry("pynq1", "pynq-z1", host="-oProxyCommand=sh"), "host"),
    (BoardEntry("pynq1", "pynq-z1", host="a b"), "host"),
    (BoardEntry("pynq1", "pynq-z1", host="x;reboot"), "host"),
    (BoardEntry("pynq1", "pynq-z1", host="10.0.0.2", tags=["lab\n"]), "tag"),
    (BoardEntry("pynq1", "pynq-z1", host="10.0.0.2", port=99999), "port"),
])
def test_bad_entries_are_refused_on_add(tmp_path, entry, what):
    with pytest.raises(BoardError, match=what):
        Inventory(tmp_path / "inv.toml").add(entry)
    assert not (tmp_path / "inv.toml").exists()


def test_hosts_that_are_names_or_addresses_are_taken(tmp_path):
    inv = Inventory(tmp_path / "inv.toml")
    for i, host in enumerate(("192.168.2.99", "pynq1.local", "fe80::1", "[::1]", "board_7")):
        inv.add(BoardEntry(f"b{i}", "pynq-z1", host=host))
    assert len(inv.load()) == 5


@pytest.mark.parametrize("text,what", [
    ('[boards.vta-fsim]\ntype = "vta-fsim"\n', "built-in"),
    ('[boards.p]\ntype = "pynq-z1"\nhost = "10.0.0.2"\nport = 99999\n', "port"),
    ('[boards.p]\ntype = "pynq-z1"\nhost = "10.0.0.2"\nport = "22"\n', "port must be a number"),
    ('[boards.p]\ntype = "pynq-z1"\nhost = ""\n', "host"),
])
def test_a_hand_edited_inventory_is_validated_on_read(tmp_path, text, what):
    path = tmp_path / "inv.toml"
    path.write_text(text)
    with pytest.raises(InventoryError, match=what):
        Inventory(path).load()
    assert path.read_text() == text


def test_an_inventory_path_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(InventoryError, match="not a regular file"):
        Inventory(tmp_path).load()
    folder = tmp_path / "inv"
    folder.mkdir()
    with pytest.raises(InventoryError, match="not a regular file"):
        Inventory(folder).add(BoardEntry("p1", "pynq-z1", host="127.0.0.1"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inv"]       # no lock file left beside it


@pytest.fixture
def bystander():
    """An unrelated process in its own group, as a stale state file might name."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_stale_tracker_state_never_signals_the_process_reusing_its_pid(bystander):
    write_state("tracker", {"pid": bystander.pid, "create_time": procs.identity(bystander.pid)["create_time"] - 5,
                            "host": "127.0.0.1", "port": 9190})
    assert running_tracker() is None and not stop_service(timeout=1)
    write_state("tracker", {"pid": bystander.pid, "host": "127.0.0.1", "port": 9190})   # no identity at all
    assert not stop_service(timeout=1)
    time.sleep(0.2)
    assert bystander.poll() is None and psutil.Process(bystander.pid).status() != psutil.STATUS_ZOMBIE


def test_the_identity_of_a_live_process_checks_out(bystander):
    assert procs.is_running(procs.identity(bystander.pid))
    bystander.send_signal(signal.SIGKILL)
    bystander.wait()
    assert not procs.is_running({"pid": bystander.pid, "create_time": 1.0})


def test_the_board_side_stop_leaves_a_process_that_is_not_the_agent(bystander, tmp_path):
    pid_file = tmp_path / "agent.pid"
    pid_file.write_text(f"{bystander.pid}\n")
    cmd = stop_command({"pid": str(pid_file)})
    subprocess.run(["bash", "-c", cmd], check=True, timeout=30)
    assert bystander.poll() is None and not pid_file.exists()
    pid_file.write_text("-1\n")                      # garbage never reaches kill
    subprocess.run(["bash", "-c", cmd], check=True, timeout=30)
    assert bystander.poll() is None


def test_the_board_side_stop_ends_a_real_agent_group(tmp_path):
    pid_file = tmp_path / "agent.pid"
    agent = subprocess.Popen([sys.executable, "-c", "import time, sys; time.sleep(120)", "toolkit.rpc.agent"],
                             start_new_session=True)
    pid_file.write_text(f"{agent.pid}\n")
    subprocess.run(["bash", "-c", stop_command({"pid": str(pid_file)})], check=True, timeout=30)
    assert agent.wait(timeout=10) != 0 and not pid_file.exists()


def test_the_agent_adds_only_what_tuning_and_runs_need():
    from toolkit.rpc import agent

    assert sorted(agent.FUNCTIONS) == ["edgetune.board_info", "edgetune.health", "edgetune.vta.run",
                                       "edgetune.vta.run_model"]
