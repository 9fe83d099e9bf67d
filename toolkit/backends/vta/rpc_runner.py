"""Measure VTA programs on boards through the RPC tracker (agents started by ``board provision``).

Each artifact gets its own RPC session, requested from the tracker by the board's key, so every
board registered under that key takes a share of the measurements. A board lost mid-measurement
(its agent or tunnel dropped) is waited for: the same key must come back (the same board, or
another with that key) within ``wait_s``; the artifact is then measured again. Only when no board
comes back is :class:`~toolkit.tuning.core.runner.BoardLostError` raised (the loop never records it).
"""

from __future__ import annotations

import io
import json
import math
import threading
import time
from collections import Counter
from typing import Any, Sequence

import numpy as np

from toolkit.boards import Board
from toolkit.errors import BoardError, ExportError
from toolkit.rpc.service import board_tracker_address
from toolkit.tuning.core.check import check_output
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.runner import BoardGoneError, BoardLostError, MeasureOptions, Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, Template

INPUT_REGIONS = ("inp", "wgt", "bias")
QUEUED_CHECK_S = 1.0
"""How often a request queued at the tracker checks that a board with the key is still registered."""


def _text(a: np.ndarray) -> str:
    return bytes(np.asarray(a, dtype=np.uint8)).decode(errors="replace")


class VTARPCRunner(Runner):
    """Runs VTA program binaries on every agent registered under ``board``'s RPC key.

    ``tracker``: ``(host, port)`` or ``"HOST:PORT"``; default: where the board was provisioned, else
    the tracker ``edgetune tracker start`` runs. ``wait_s``: how long to wait for a lost board's key
    to come back. ``max_lost``: how many times one artifact may lose its board before giving up.
    ``served`` counts measurements per board name.
    """

    def __init__(self, board: Board, tracker: tuple[str, int] | str | None = None, *, seed: int = 0,
                 wait_s: float = 120.0, max_lost: int = 5, priority: int = 1) -> None:
        self.board, self.key, self.seed = board, board.rpc_key, seed
        self.wait_s, self.max_lost, self.priority = wait_s, max_lost, priority
        self.tracker = board_tracker_address(board.name, tracker)
        self.served: Counter[str] = Counter()
        self.lost = 0
        self._seen = False

    # -- sessions ---------------------------------------------------------------------------------
    def _registered(self) -> bool:
        from toolkit.rpc.tracker import tracker_summary

        try:
            info = tracker_summary(*self.tracker)
        except BoardError:
            return False
        return any(s.get("key") == f"server:{self.key}" for s in info.get("server_info", []))

    def _request(self, timeout_s: float) -> Any:
        """A session from the tracker, or ``None`` when the key left the tracker while the request was queued (the
        tracker holds a request for a server that died mid-session forever: it is given up, not waited on)."""
        from tvm import rpc

        box: dict[str, Any] = {}
        try:
            tracker = rpc.connect_tracker(*self.tracker)
        except Exception:  # noqa: BLE001 - the tracker itself is gone: as if the board were
            return None

        def request() -> None:
            try:
                box["session"] = tracker.request(self.key, priority=self.priority, session_timeout=timeout_s,
                                                 max_retry=1)
            except Exception:  # noqa: BLE001 - the board vanished between summary and request
                pass

        thread = threading.Thread(target=request, name="edgetune-vta-request", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(QUEUED_CHECK_S)
            if thread.is_alive() and not self._registered():
                tracker.close()          # ends the queued request
                thread.join(QUEUED_CHECK_S)
                return None
        return box.get("session")

    def _session(self, timeout_s: float) -> Any:
        """A session with some board registered under the key, waiting up to ``wait_s`` for one."""
        deadline = time.monotonic() + self.wait_s
        said = False
        while True:
            if self._registered():
                session = self._request(timeout_s)
                if session is not None:
                    return session
            if not said:
                said = True
                self.waiting(f"no board with RPC key {self.key!r} is registered: waiting up to {self.wait_s:.0f} s "
                             f"for one (`edgetune board provision {self.board.name}` restores it)")
            if time.monotonic() > deadline:
                raise BoardGoneError(
                    f"no board with RPC key {self.key!r} registered with the tracker "
                    f"{self.tracker[0]}:{self.tracker[1]} within {self.wait_s:.0f}s; every finished trial is in the "
                    f"log: check `edgetune board status`, re-provision the board and rerun with --resume")
            time.sleep(0.5)

    def reach(self) -> None:
        """A board registered under the key (fails fast: it waits at most ``NEVER_SEEN_S`` for a board never seen)."""
        if not self._seen:
            from toolkit.rpc.tracker import NEVER_SEEN_S, require_server

            require_server(*self.tracker, self.key, self.board.name, grace_s=min(self.wait_s, NEVER_SEEN_S),
                           on_wait=self.waiting)
            self._seen = True

    # -- measuring --------------------------------------------------------------------------------
    def run(self, template: Template, items: Sequence[tuple[Config, Artifact]],
            options: MeasureOptions) -> list[MeasureResult]:
        self.reach()
        return [self._run_one(template, config, artifact, options) for config, artifact in items]

    def _run_one(self, template: Template, config: Config, artifact: Artifact,
                 options: MeasureOptions) -> MeasureResult:
        rng = np.random.default_rng([self.seed, config.index])
        inputs = template.make_inputs(rng)
        number, repeat = max(1, options.number), max(1, options.repeat)
        base = dict(index=config.index, config=config.values, features=dict(artifact.features),
                    build_s=artifact.build_s)
        t0 = time.perf_counter()
        try:
            out = self.call_agent(artifact.payload, dict(zip(INPUT_REGIONS, inputs)), number * repeat,
                                  options.timeout_s * repeat + 30)
        except TimeoutError:
            return MeasureResult(**base, error=ErrorClass.TIMEOUT, run_s=time.perf_counter() - t0,
                                 message=f"the run exceeded {options.timeout_s:.0f}s per repeat")
        except BoardLostError:
            raise BoardLostError(f"config {config.index} lost its board {self.max_lost + 1} times (key {self.key!r}); "
                                 "check `edgetune board status`") from None
        board = _text(out.pop("__board__"))
        run_s = time.perf_counter() - t0
        if "__error__" in out:
            return MeasureResult(**base, error=ErrorClass.RUNTIME_ERROR, message=_text(out["__error__"]),
                                 run_s=run_s)
        seconds = out.pop("__seconds__").reshape(repeat, number).mean(axis=1)
        counters = json.loads(_text(out.pop("__counters__")) or "{}")
        if options.check:
            expected = template.reference(inputs)
            correct, verdict = check_output(out.get("out", np.zeros(0)), expected, exact=True)
            if not correct:
                return MeasureResult(**base, error=ErrorClass.WRONG_ANSWER, run_s=run_s,
                                     message=f"output differs from the reference on board {board}: {verdict}")
        features = {**base.pop("features"), **{f"sim.{k}": float(v) for k, v in counters.items()}}
        return MeasureResult(**base, features=features, costs=[float(s) for s in seconds if math.isfinite(s)],
                             run_s=run_s)

    def call_agent(self, program: bytes, arrays: dict[str, np.ndarray], runs: int,
                   timeout_s: float) -> dict[str, np.ndarray]:
        """Run a VTA program ``runs`` times on some board with the key, through its agent's
        ``edgetune.vta.run``, and return the agent's arrays (``out``, ``__seconds__``, ``__counters__``,
        ``__board__``, or ``__error__`` for a failing program). A lost board is waited for and the call
        repeated (:class:`BoardLostError` after ``max_lost``); a session past ``timeout_s``:
        :class:`TimeoutError`. Tuning measures and exports run through here."""
        return self.call("edgetune.vta.run", program, arrays, runs, timeout_s=timeout_s)

    def call(self, function: str, payload: bytes, arrays: dict[str, np.ndarray], *args: Any,
             timeout_s: float) -> dict[str, np.ndarray]:
        """Call the agent's ``function(payload, arrays as .npz bytes, *args)`` on some board with the key and
        return the ``.npz`` it answers, as :meth:`call_agent` does (lost boards waited for, then retried)."""
        self.reach()
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        for _attempt in range(self.max_lost + 1):
            session = self._session(timeout_s)
            try:
                raw = session.get_function(function)(payload, buf.getvalue(), *args)
            except Exception as exc:  # noqa: BLE001 - TVM raises plain errors on a dropped connection
                if "RPCSessionTimeoutError" in str(exc):
                    raise TimeoutError(f"the agent did not answer within {timeout_s:.0f} s") from None
                self.lost += 1
                continue
            finally:
                del session
            out = dict(np.load(io.BytesIO(bytes(raw)), allow_pickle=False))
            self.served[_text(out["__board__"])] += 1
            return out
        raise BoardLostError(f"the board with key {self.key!r} was lost {self.max_lost + 1} times; check "
                             "`edgetune board status`")


def run_on_agent(board: Board, program: bytes, named: dict[str, np.ndarray], shape: tuple, repeat: int,
                 runner: Any) -> tuple[dict[str, np.ndarray], float]:
    """Run a program through the board agent's ``edgetune.vta.run`` with tuning's :class:`VTARPCRunner`."""
    try:
        out = runner.call_agent(program, named, max(1, repeat), 300.0)
    except TimeoutError as exc:
        raise BoardError(f"running on board {board.name} (key {board.rpc_key!r}) failed: {exc}; check "
                         "`edgetune board status`") from None
    if "__error__" in out:
        msg = bytes(np.asarray(out["__error__"], dtype=np.uint8)).decode(errors="replace")
        raise ExportError(f"the program failed on board {board.name}: {msg}")
    seconds = [float(s) for s in out["__seconds__"].reshape(-1) if math.isfinite(s)]
    return {"out": out["out"].reshape(shape)}, sum(seconds) / max(1, len(seconds))
