"""Tie a process group to its owner: ``python -m toolkit.rpc.guard OWNER_PID COMMAND...``.

Runs COMMAND in the guard's own process group (the caller starts the guard in a new session) and kills
that whole group as soon as OWNER_PID is no longer the guard's parent: the owner died, even by
SIGKILL. A parent-death signal alone does not do this, because it reaches only the process that asked
for it, while TVM's tracker and server run their work in forked workers. Exits with COMMAND's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

POLL_S = 0.2
"""How often the guard looks at its parent."""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    owner, command = int(args[0]), args[1:]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    while True:
        try:
            return child.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            if os.getppid() != owner:
                os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
