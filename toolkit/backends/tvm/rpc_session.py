"""One TVM RPC session to a board, as :class:`~toolkit.backends.tvm.rpc_runner.RPCRunner` keeps it: the tracker a
board is reached through, uploading an artifact, telling a lost session from a failed run, and the line of an
RPC error that says what went wrong."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable

from toolkit.boards import Board
from toolkit.tuning.core.template import Artifact

LOST_HINTS = ("socket", "connection", "connect", "closed", "eof", "peer", "broken pipe",
              "rpcsessiontimeout", "session timeout", "kshutdown", "code == rpccode")
"""Words of an error that mean the session is gone, not that the run failed."""
REUSE_MARGIN_S = 10.0
"""A session is reused only while ``session_timeout`` leaves the run's timeout plus this margin."""


class SessionLost(Exception):
    """The session ended before the measurement finished."""


class LiveSession:
    """A session kept between items: the board's device, the inputs on it and an output tensor."""

    def __init__(self, sess: Any, dev: Any, data_key: int, args: list[Any], out: Any, session_timeout: float) -> None:
        self.sess, self.dev, self.data_key, self.args, self.out = sess, dev, data_key, args, out
        self.opened = time.monotonic()
        self.session_timeout = session_timeout

    def usable(self, data_key: int, run_timeout: float) -> bool:
        """True while it holds these inputs and the server will not end it within one more item."""
        age = time.monotonic() - self.opened
        return self.data_key == data_key and age + run_timeout + REUSE_MARGIN_S < self.session_timeout



def board_tracker(board: Board, tracker: tuple[str, int] | str | None = None
                  ) -> tuple[tuple[str, int], Callable[[], None] | None]:
    """Tracker address of ``board`` and a release function when one was started for it.

    A board without a host (the built-in ``local``) gets a loopback tracker and RPC server
    (:func:`toolkit.rpc.tracker.ensure_local_rpc`); other boards use ``tracker``, else where the
    board was provisioned, else the tracker ``edgetune tracker start`` runs.
    """
    if not isinstance(tracker, tuple) and tracker is None and (board.entry is None or not board.entry.host):
        from toolkit.rpc.tracker import ensure_local_rpc

        host, port, stop = ensure_local_rpc(board.rpc_key)
        return (host, port), stop
    from toolkit.rpc.service import board_tracker_address

    return board_tracker_address(board.name, tracker), None


def upload(sess: Any, artifact: Artifact, name: str) -> None:
    """Upload ``artifact`` (its bytes, or its file) to the session as ``name``."""
    if artifact.payload:
        fd, path = tempfile.mkstemp(suffix=".so", prefix="edgetune-upload-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(artifact.payload)
            sess.upload(path, name)
        finally:
            os.unlink(path)
    elif artifact.path:
        sess.upload(artifact.path, name)
    else:
        raise RuntimeError("the artifact has neither a payload nor a path")


def answers(live: LiveSession) -> bool:
    """Whether a session still answers a round trip (its output tensor read back)."""
    try:
        live.out.numpy()
    except Exception:  # noqa: BLE001 - any failure of the round trip means the session is gone
        return False
    return True


def looks_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the session is gone (the board or its server), not that the run failed."""
    if isinstance(exc, (ConnectionError, EOFError, BrokenPipeError)):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(h in text for h in LOST_HINTS)


def rpc_error_line(exc: BaseException) -> str:
    """The last line of an error, with the line it continues (TVM: "Error caught from RPC call:")."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    msg = lines[-1]
    if len(lines) > 1 and lines[-2].endswith(":"):
        msg = f"{lines[-2]} {msg}"
    return msg[:300]
