"""``board status``: for every board, is it reachable, is its agent up, is it registered, its queue."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from toolkit.boards import BoardEntry
from toolkit.errors import EdgetuneError
from toolkit.rpc.agent_control import agent_status, board_state
from toolkit.rpc.ssh import connect_board
from toolkit.rpc.tracker import tracker_summary


def _one(entry: BoardEntry, summaries: dict[tuple[str, int], dict | None]) -> dict:
    row = {"name": entry.name, "type": entry.type, "key": entry.effective_rpc_key, "reachable": None,
           "agent_up": None, "registered": None, "queue": "", "note": ""}
    state = board_state(entry.name)
    try:
        with connect_board(entry, timeout=5.0) as session:
            row["reachable"] = True
            if state is None:
                row["note"] = f"not provisioned (`edgetune board provision {entry.name}`)"
                return row
            agent = agent_status(entry.name, session)
    except EdgetuneError as exc:
        row["reachable"] = False
        row["note"] = str(exc)
        return row
    row["agent_up"] = agent["agent_up"]
    summary = summaries.get(tuple(state["tracker"]))
    if summary is None:
        row["note"] = f"tracker {state['tracker'][0]}:{state['tracker'][1]} unreachable"
        return row
    key = entry.effective_rpc_key
    row["registered"] = bool(agent["agent_up"]) and any(
        s.get("key") == f"server:{key}" and int(s["addr"][1]) == int(agent.get("report_port") or -1)
        for s in summary.get("server_info", []))
    q = summary.get("queue_info", {}).get(key)
    row["queue"] = f"{q.get('free', 0)}/{q.get('pending', 0)}" if q else "-"
    if not agent["agent_up"]:
        row["note"] = f"agent stopped (`edgetune board provision {entry.name}`)"
    return row


def fleet_status(entries: list[BoardEntry]) -> list[dict]:
    """One status row per board (boards are checked in parallel)."""
    trackers = {tuple(s["tracker"]) for e in entries if (s := board_state(e.name))}
    summaries: dict[tuple[str, int], dict | None] = {}
    for t in trackers:
        try:
            summaries[t] = tracker_summary(*t)
        except EdgetuneError:
            summaries[t] = None
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda e: _one(e, summaries), entries))
