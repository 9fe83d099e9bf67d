"""A provisioned board's agent on the board: where it keeps its files, whether it runs, waiting for it to
start and register, stopping it, its log, and what provisioning recorded here about the board.

Provisioning (:mod:`toolkit.rpc.provision`) plans and runs the steps that start an agent; this module is
what every later command (``board status``, ``board stop``, ``board logs``, ``board remove``) uses.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from toolkit.errors import BoardError
from toolkit.rpc.ssh import SSHSession, quote
from toolkit.state import read_state, remove_state

DEFAULT_REMOTE_DIR = "~/.edgetune"


def agent_paths(name: str, remote_dir: str = DEFAULT_REMOTE_DIR) -> dict[str, str]:
    """Where board ``name``'s agent and its environment live on the board under ``remote_dir``.

    >>> agent_paths("rpi")["pid"]
    '~/.edgetune/agents/rpi/agent.pid'
    """
    r = remote_dir.rstrip("/")
    agent_dir = f"{r}/agents/{name}"
    return {"root": r, "code": f"{r}/agent", "venv": f"{r}/venv", "agent_dir": agent_dir,
            "pid": f"{agent_dir}/agent.pid", "log": f"{agent_dir}/agent.log", "state": f"{agent_dir}/agent.json",
            "args": f"{agent_dir}/agent.args", "bits": f"{r}/bitstreams", "tvm": f"{r}/tvm",
            "runtime": f"{r}/runtime"}


AGENT_MODULE = "toolkit.rpc.agent"
"""What an agent's command line holds: a pid from a pid file is signalled only when its process runs it."""

def agent_running(pid_file: str) -> str:
    """Shell test: the pid file names a number whose process runs the agent (not a recycled pid)."""
    return (f"g=$(cat {pid_file} 2>/dev/null); case \"$g\" in ''|*[!0-9]*) false;; *) tr '\\0' ' ' "
            f"< /proc/$g/cmdline 2>/dev/null | grep -q {AGENT_MODULE};; esac")

def stop_command(p: dict[str, str], sudo: bool = False) -> str:
    """Shell: end the agent's process group (TERM, then KILL) and remove its pid file; a pid file whose
    process is not the agent (stale, the pid reused) is removed without signalling anything."""
    s = "sudo -n " if sudo else ""
    pid = quote(p["pid"])
    return (f"if [ -f {pid} ]; then if {agent_running(pid)}; then {s}kill -TERM -- -$g 2>/dev/null; "
            f"for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /proc/$g/status ] || break; sleep 0.3; done; "
            f"{s}kill -KILL -- -$g 2>/dev/null; fi; rm -f {pid}; fi; true")

def _alive_cmd(session: SSHSession, p: dict[str, str]) -> bool:
    """Is the agent in the pid file running (works for a root agent seen by its non-root user)."""
    pid = quote(p["pid"])
    return session.run(f"[ -f {pid} ] && {agent_running(pid)}").ok

def wait_agent_state(session: SSHSession, p: dict[str, str], timeout: float) -> dict:
    """The agent's state file once it has bound its port."""
    deadline = time.monotonic() + timeout
    while True:
        r = session.run(f"cat {quote(p['state'])} 2>/dev/null")
        if r.ok and r.stdout.strip():
            return json.loads(r.stdout)
        alive = _alive_cmd(session, p)
        if not alive and time.monotonic() > deadline - timeout + 3:
            tail = session.run(f"tail -n 3 {quote(p['log'])}").stdout.strip().replace("\n", " | ")
            raise BoardError(f"the agent exited at start: {tail or 'no log'}; see `edgetune board logs`")
        if time.monotonic() > deadline:
            raise BoardError(f"the agent did not start within {timeout:.0f}s; see `edgetune board logs`")
        time.sleep(0.3)

def wait_registered(tracker: tuple[str, int], key: str, port: int, timeout: float,
                    log: Callable[[], str] | None = None) -> None:
    """Wait until the tracker lists a server under ``key`` reporting ``port``."""
    from toolkit.rpc.tracker import tracker_summary

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = tracker_summary(*tracker)
        if any(s.get("key") == f"server:{key}" and int(s["addr"][1]) == port for s in info.get("server_info", [])):
            return
        time.sleep(0.3)
    tail = " | ".join((log() if log else "").strip().splitlines()[-2:])
    raise BoardError(f"the agent did not register with the tracker {tracker[0]}:{tracker[1]} under key {key!r} "
                     f"within {timeout:.0f}s (can the board reach the tracker?) {tail}")

def call_health(tracker: tuple[str, int], key: str, name: str | None, timeout: float) -> dict:
    """Ask an agent with ``key`` for ``edgetune.health``; with ``name``, retry until that board answers."""
    from tvm import rpc

    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        remote = rpc.connect_tracker(*tracker).request(key, priority=1, session_timeout=30)
        last = json.loads(remote.get_function("edgetune.health")())
        del remote
        if name is None or last.get("name") == name:
            return last
        time.sleep(0.2)
    raise BoardError(f"board {name} did not answer through the tracker (last answer from {last.get('name')})")

def board_state(name: str) -> dict | None:
    """What the last provisioning of board ``name`` recorded locally (remote dir, python, tracker)."""
    return read_state(f"boards/{name}")

def _state_or_fail(name: str) -> dict:
    state = board_state(name)
    if state is None:
        raise BoardError(f"board {name} was never provisioned from here; run `edgetune board provision {name}`")
    return state

def remote_paths(name: str) -> dict[str, str]:
    """Remote paths of a provisioned board's agent."""
    state = _state_or_fail(name)
    d = state["agent_dir"]
    return {"pid": f"{d}/agent.pid", "log": f"{d}/agent.log", "state": f"{d}/agent.json", "agent_dir": d}

def stop_agent(name: str, session: SSHSession) -> bool:
    """Stop a board's agent; ``True`` if one was running."""
    state = _state_or_fail(name)
    p = remote_paths(name)
    was = _alive_cmd(session, p)
    session.run(stop_command(p, bool(state.get("sudo"))), check=True)
    session.run(f"rm -f {quote(p['state'])} {quote(p['agent_dir'])}/agent.args")
    return was

def agent_log(name: str, session: SSHSession, lines: int = 50) -> str:
    """The last ``lines`` lines of a board's agent log."""
    p = remote_paths(name)
    r = session.run(f"tail -n {int(lines)} {quote(p['log'])}")
    if not r.ok:
        raise BoardError(f"board {name} has no agent log yet; run `edgetune board provision {name}`")
    return r.stdout

def agent_status(name: str, session: SSHSession) -> dict:
    """Is the agent running, with which pid/port (from its state file)."""
    p = remote_paths(name)
    alive = _alive_cmd(session, p)
    info: dict = {}
    if alive:
        r = session.run(f"cat {quote(p['state'])} 2>/dev/null")
        info = json.loads(r.stdout) if r.ok and r.stdout.strip() else {}
    return {"agent_up": alive, **{k: info.get(k) for k in ("pid", "port", "report_port", "key", "tracker")}}

def forget(name: str) -> None:
    """Drop the local provisioning record of a board."""
    remove_state(f"boards/{name}")
