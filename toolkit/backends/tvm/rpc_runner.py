"""Measure TVM libraries on boards through a TVM RPC tracker (or one server, directly).

For each artifact the runner uploads the library to a session on a board of its key, checks
one run's output against the template's numpy reference and times it with ``time_evaluator``.
One session (with the inputs already on the board) serves the items of a :meth:`RPCRunner.run`
call one after another while it is young enough that the server's ``session_timeout`` cannot
end it mid-item; any failure drops it and the next item gets a fresh session. A session that
dies mid-measurement (the board rebooted, the server was killed) is not a result: the runner
waits up to ``wait_s`` for a server of the same key to come back and measures again;
only if none returns is the item ``BOARD_LOST``.

>>> from toolkit.rpc.tracker import ensure_local_rpc
>>> host, port, stop = ensure_local_rpc("local")          # doctest: +SKIP
>>> runner = RPCRunner(host, port, "local")               # doctest: +SKIP
>>> results = runner.run(template, [(config, artifact)], MeasureOptions())  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from toolkit.boards import Board
from toolkit.errors import BoardError, EdgetuneError, error_line
from toolkit.tuning.core.check import check_output
from toolkit.tuning.core.result import ErrorClass, MeasureResult
from toolkit.tuning.core.runner import BoardGoneError, MeasureOptions, Runner
from toolkit.tuning.core.space import Config
from toolkit.tuning.core.template import Artifact, Template
from toolkit.backends.tvm.rpc_session import (LiveSession, SessionLost, answers, board_tracker, looks_lost,
                                              rpc_error_line, upload)

LEFT_CHECK_S = 2.0
"""How often a run waiting for a session of its own loopback board (``local``) checks the server is still there."""


class RPCRunner(Runner):
    """A :class:`Runner` for TVM RPC boards (executor ``tvm``).

    ``key=None`` is direct mode: ``tracker_host:tracker_port`` is then one RPC server
    (``python -m tvm.exec.rpc_server --host H --port P``), with no tracker.
    ``session_timeout`` bounds one session on the server, which then kills it (a hung kernel);
    default: the run's ``timeout_s`` + 30 s, so a timed-out run frees the board soon;
    ``wait_s`` is how long a lost board may take to come back (a slow board re-provisions in a minute);
    ``max_crashes`` is how often a session may die while its server stays registered before
    the kernel is blamed (``RUNTIME_ERROR``).
    """

    def __init__(self, tracker_host: str | Board, tracker_port: int | None = None, key: str | None = None, *,
                 tracker: tuple[str, int] | str | None = None, session_timeout: float | None = None,
                 wait_s: float = 120.0, priority: int = 1, max_crashes: int = 2, seed: int = 0) -> None:
        self._release: Callable[[], None] | None = None
        self._restart: Callable[[], tuple[tuple[str, int], Callable[[], None] | None]] | None = None
        self.board_name = key or ""
        if isinstance(tracker_host, Board):   # make_runner(board): the board's tracker, or a local one
            board = tracker_host
            (tracker_host, tracker_port), self._release = board_tracker(board, tracker)
            key, self.board_name = board.rpc_key, board.name
            if self._release is not None:     # edgetune started them: it starts them again if they die
                self._restart = lambda: board_tracker(board, tracker)
        self._seen = False
        if tracker_port is None:
            raise BoardError("RPCRunner needs a tracker port (or a board)")
        self.host = tracker_host
        self.port = int(tracker_port)
        self.key = key
        self.session_timeout = session_timeout
        self.wait_s = wait_s
        self.priority = priority
        self.max_crashes = max_crashes
        self.seed = seed
        self._waited = False
        self.lost_sessions = 0
        """Sessions that died mid-measurement and were measured again."""
        self._data: tuple[int, list[np.ndarray], np.ndarray | None] | None = None
        self._live: LiveSession | None = None
        self.sessions = 0
        """Sessions opened so far (one per item without reuse)."""

    def close(self) -> None:
        """Stop the loopback tracker and server this runner started for the ``local`` board."""
        self._live = None
        if self._release is not None:
            self._release()
            self._release = None

    @classmethod
    def direct(cls, address: str, **kwargs: Any) -> "RPCRunner":
        """A runner for one server at ``host:port`` (no tracker)."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise BoardError(f"RPC address {address!r} must be host:port, e.g. 127.0.0.1:9090")
        return cls(host, int(port), None, **kwargs)

    @property
    def where(self) -> str:
        """Human description of what this runner talks to."""
        if self.key is None:
            return f"RPC server {self.host}:{self.port}"
        return f"key {self.key!r} at tracker {self.host}:{self.port}"

    # -- sessions ----------------------------------------------------------------------
    def _connect(self, timeout: float) -> Any:
        from tvm import rpc

        session_timeout = self.session_timeout or timeout + 30.0
        if self.key is None:
            return rpc.connect(self.host, self.port, session_timeout=session_timeout)
        return rpc.connect_tracker(self.host, self.port).request(
            self.key, priority=self.priority, session_timeout=session_timeout, max_retry=1)

    def board_present(self) -> bool:
        """True when the tracker lists a server of this key (direct mode: the port accepts)."""
        if self.key is None:
            import socket

            try:
                with socket.create_connection((self.host, self.port), timeout=2.0):
                    return True
            except OSError:
                return False
        from toolkit.rpc.tracker import tracker_summary

        try:
            info = tracker_summary(self.host, self.port)
        except BoardError:
            return False
        return any(s.get("key", "").split(":", 1)[-1] == self.key for s in info.get("server_info", []))

    def wait_for_board(self, timeout: float) -> bool:
        """Poll until a board of this key is registered again (or ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.board_present():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    # -- measurement -------------------------------------------------------------------
    def _inputs(self, template: Template, check: bool) -> tuple[list[np.ndarray], np.ndarray | None]:
        if self._data is None or self._data[0] != id(template) or (check and self._data[2] is None):
            inputs = template.make_inputs(np.random.default_rng(self.seed))
            ref = template.reference(inputs) if check else None
            self._data = (id(template), inputs, ref)
        return self._data[1], self._data[2]

    def reach(self) -> None:
        """A board registered under the key (fails fast: it waits at most ``NEVER_SEEN_S`` for a board never seen)."""
        if not self._seen and self.key is not None:
            from toolkit.rpc.tracker import NEVER_SEEN_S, require_server

            require_server(self.host, self.port, self.key, self.board_name or self.key,
                           grace_s=min(self.wait_s, NEVER_SEEN_S), on_wait=self.waiting)
            self._seen = True

    def run(self, template: Template, items: Sequence[tuple[Config, Artifact]],
            options: MeasureOptions) -> list[MeasureResult]:
        self.reach()
        inputs, ref = self._inputs(template, options.check)
        try:
            return [self._measure(template, config, artifact, options, inputs, ref) for config, artifact in items]
        finally:
            self._live = None   # the board is free between batches (other users of the tracker)

    def _measure(self, template: Template, config: Config, artifact: Artifact, options: MeasureOptions,
                 inputs: list[np.ndarray], ref: np.ndarray | None) -> MeasureResult:
        def result(**kw: Any) -> MeasureResult:
            return MeasureResult(index=config.index, config=dict(config.values), features=dict(artifact.features),
                                 build_s=artifact.build_s, run_s=time.perf_counter() - started, **kw)

        started = time.perf_counter()
        crashes = 0
        lost = "it was not registered"
        while True:
            if self._live is None and not self.board_present() and not self._restart_local():
                self._say_wait(lost)
                if not self.wait_for_board(self.wait_s):
                    raise BoardGoneError(f"{self.board_name or self.where} did not come back within "
                                         f"{self.wait_s:.0f} s ({lost}); every finished trial is in the log: "
                                         f"{self._restore_hint()}, then rerun with --resume")
            try:
                costs, wrong, note = self._attempt(template, artifact, options, inputs, ref)
            except TimeoutError as exc:
                if not self.board_present():
                    lost = f"lost during the run: {exc}"
                    self.lost_sessions += 1
                    continue
                return result(error=ErrorClass.TIMEOUT, message=str(exc))
            except SessionLost as exc:
                lost = str(exc)
                self.lost_sessions += 1
                if self.board_present():
                    crashes += 1
                    if crashes > self.max_crashes:
                        return result(error=ErrorClass.RUNTIME_ERROR,
                                      message=f"the session died {crashes} times while the board stayed up: {exc}")
                continue
            except RuntimeError as exc:
                return result(error=ErrorClass.RUNTIME_ERROR, message=rpc_error_line(exc))
            self._waited = False
            if wrong:
                return result(error=ErrorClass.WRONG_ANSWER, message=wrong)
            return result(costs=costs, message=note)

    def _say_wait(self, why: str) -> None:
        """Say once per outage that the run waits for the board, for how long and what restores it."""
        if not self._waited:
            self._waited = True
            name = self.board_name or self.where
            self.waiting(f"{name} is not registered ({why}): waiting up to {self.wait_s:.0f} s for it to come "
                         f"back ({self._restore_hint()} restores it)")

    def _restore_hint(self) -> str:
        return f"`edgetune board provision {self.board_name or 'NAME'}`"

    def _restart_local(self) -> bool:
        """For a board whose loopback tracker and server this runner started (``local``): start them again when
        they died; ``True`` once the board is back."""
        if self._restart is None:
            return False
        if self._release is not None:
            self._release()
        (self.host, self.port), self._release = self._restart()
        self.waiting(f"{self.board_name}'s loopback RPC tracker or server had stopped: started them again")
        return self.board_present()

    def _attempt(self, template: Template, artifact: Artifact, options: MeasureOptions,
                 inputs: list[np.ndarray], ref: np.ndarray | None) -> tuple[list[float], str, str]:
        """One item in a session (the kept one, or a new one): upload, check, time.

        Runs in a thread so a hung kernel times out. ``timeout_s`` counts from the first run on
        the board; getting a session (queued at the tracker behind other users) and uploading
        have ``wait_s`` + 60 s. The session is kept only when the item finished cleanly.
        """
        live, self._live = self._live, None
        if live is not None and not live.usable(id(inputs), options.timeout_s):
            live = None
        box: dict[str, Any] = {"live": live}

        def work() -> None:
            try:
                box["value"] = self._session_measure(template, artifact, options, inputs, ref, box)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=work, name="edgetune-rpc-measure", daemon=True)
        begun = checked = time.monotonic()
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            now = time.monotonic()
            if "run_started" in box:
                if now - box["run_started"] > options.timeout_s:
                    raise TimeoutError(f"the run did not finish within {options.timeout_s:g} s")
            elif now - begun > self.wait_s + 60.0:
                raise SessionLost(f"no session and upload within {self.wait_s + 60.0:.0f} s")
            elif self._restart is not None and box.get("stage") == "session" and now - checked >= LEFT_CHECK_S:
                # the tracker queues a request for a server that left; this runner's own (``local``) is
                # started again at once instead of waiting out the queue
                checked = now
                if not self.board_present():
                    raise SessionLost("the server left the tracker while this run waited for a session")
        if "error" in box:
            raise box["error"]
        self._live = box.get("live")
        return box["value"]

    def _session_measure(self, template: Template, artifact: Artifact, options: MeasureOptions,
                         inputs: list[np.ndarray], ref: np.ndarray | None,
                         box: dict[str, Any]) -> tuple[list[float], str, str]:
        if artifact.kind != "tvm-library":
            raise RuntimeError(f"RPCRunner measures TVM libraries, not {artifact.kind!r} artifacts")
        live: LiveSession | None = box.pop("live", None)
        stage, failure = "upload", None
        try:
            if live is None:
                box["stage"] = "session"
                live = self._open(template, options, inputs, ref)
            value = self._run_in_session(live, template, artifact, options, ref, box)
            box["live"] = live
            return value
        except SessionLost:
            raise
        except Exception as exc:  # noqa: BLE001
            stage = box.get("stage", stage)
            # TVM words a dropped connection differently depending on where the call was cut: a session
            # that no longer answers is lost whatever the message said
            failure = (looks_lost(exc) or (live is not None and not answers(live)), rpc_error_line(exc))
        finally:
            # drop a failed session now (not when a traceback cycle is collected): the board is
            # busy until its session closes
            live = None
        if failure[0]:
            raise SessionLost(f"session lost during {stage}: {failure[1]}")
        raise RuntimeError(f"{stage} failed on {self.where}: {failure[1]}")

    def _open(self, template: Template, options: MeasureOptions, inputs: list[np.ndarray],
              ref: np.ndarray | None) -> LiveSession:
        """A new session with the inputs and an output tensor on the board."""
        import tvm

        session_timeout = self.session_timeout or options.timeout_s + 30.0
        if self.key is not None and not self.board_present():   # the tracker queues the request until it is back
            self._say_wait("it is not registered")
        try:
            sess = self._connect(options.timeout_s)
        except Exception as exc:  # noqa: BLE001 - TVM raises plain errors for refused sessions
            raise SessionLost(f"no session from {self.where}: {rpc_error_line(exc)}") from None
        self.sessions += 1
        dev = sess.device(template.device, 0)
        args = [tvm.runtime.tensor(x, dev) for x in inputs]
        out_shape = ref.shape if ref is not None else template.output_shape()  # type: ignore[attr-defined]
        out = tvm.runtime.tensor(np.zeros(out_shape, dtype=np.float32), dev)
        return LiveSession(sess, dev, id(inputs), args, out, session_timeout)

    @contextlib.contextmanager
    def session(self, timeout_s: float = 120.0) -> Iterator[tuple[Any, Callable[[str], None]]]:
        """One RPC session on the board, and a function that names the stage under way (its name is in the
        :class:`BoardError` raised when a stage fails); fails fast when no board of the key ever registered."""
        self.reach()
        stage = ["connect"]

        def at(name: str) -> None:
            stage[0] = name

        try:
            if self.key is not None and not self.board_present():
                self._say_wait("it is not registered")
            sess = self._connect(timeout_s)
            yield sess, at
        except EdgetuneError:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM raises plain errors for refused sessions, failed loads
            raise BoardError(f"{stage[0]} on {self.board_name or self.where} ({self.where}) failed: "
                             f"{error_line(exc)}") from None

    def execute(self, artifact: Artifact, inputs: list[np.ndarray], output: np.ndarray, device: str, *,
                repeat: int = 3, timeout_s: float = 120.0) -> tuple[np.ndarray, list[float]]:
        """Run one library on ``inputs`` in a new session: its output once, then ``repeat`` timed runs
        (exports run here); :class:`BoardError` naming the stage that failed."""
        import tvm

        with self.session(timeout_s) as (sess, at):
            at("upload")
            name = f"edgetune-export-{uuid.uuid4().hex[:12]}.so"
            upload(sess, artifact, name)
            at("load")
            mod = sess.load_module(name)
            dev = sess.device(device, 0)
            args = [tvm.runtime.tensor(x, dev) for x in inputs]
            out = tvm.runtime.tensor(output, dev)
            at("run")
            mod["main"](*args, out)
            got = out.numpy()
            costs = [float(c) for c in mod.time_evaluator("main", dev, number=1, repeat=repeat)(*args, out).results]
        return got, costs

    @staticmethod
    def _run_in_session(live: LiveSession, template: Template, artifact: Artifact, options: MeasureOptions,
                        ref: np.ndarray | None, box: dict[str, Any]) -> tuple[list[float], str, str]:
        box["stage"] = "upload"
        name = f"edgetune-{uuid.uuid4().hex[:12]}.so"
        upload(live.sess, artifact, name)
        box["stage"] = "load"
        mod = live.sess.load_module(name)
        dev, args, out = live.dev, live.args, live.out
        box["stage"] = "run"
        box["run_started"] = time.monotonic()
        if ref is not None:
            out.copyfrom(np.full(ref.shape, np.nan, dtype=np.float32))  # no stale output from an earlier item
            mod["main"](*args, out)
            got = out.numpy()
            correct, message = check_output(got, ref, exact=False)
            if not correct:
                return [], message, ""
        cutoff = options.hopeless_after()
        if math.isfinite(cutoff):
            first = float(mod.time_evaluator("main", dev, number=1, repeat=1)(*args, out).results[0])
            if first > cutoff:
                return [first], "", (f"hopeless: one run took {first:.3g} s, over {options.hopeless_factor:g}x "
                                     "the best so far; not timed further")
        timer = mod.time_evaluator("main", dev, number=options.number, repeat=options.repeat,
                                   min_repeat_ms=int(math.ceil(options.min_repeat_ms)))
        return [float(c) for c in timer(*args, out).results], "", ""
