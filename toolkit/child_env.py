"""The environment of the TVM processes edgetune starts: :func:`lean_env`."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping


@functools.cache
def _no_torch_dir() -> str:
    """A private folder (removed at exit) holding a ``torch`` package that raises ImportError when imported."""
    folder = Path(tempfile.mkdtemp(prefix="edgetune-no-torch-"))
    (folder / "torch").mkdir()
    (folder / "torch" / "__init__.py").write_text(
        'raise ImportError("PyTorch is not loaded in the TVM worker processes edgetune starts")\n')
    atexit.register(shutil.rmtree, folder, True)
    return str(folder)


def lean_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a TVM process that needs no PyTorch (RPC tracker and server, their workers, build workers),
    with ``PYTHONSAFEPATH=1`` (the working folder stays off its ``sys.path``).

    apache-tvm-ffi imports PyTorch whenever it is installed, seconds of start-up per process. With a folder
    first on ``PYTHONPATH`` whose ``torch`` raises ImportError, TVM starts as without PyTorch. Processes that
    outlive this one lose only the speed-up: the folder is removed at exit and ``torch`` imports again.
    """
    paths = [_no_torch_dir(), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**env, "PYTHONSAFEPATH": "1", "PYTHONPATH": os.pathsep.join(paths)}
