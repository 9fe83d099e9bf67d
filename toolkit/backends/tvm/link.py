"""Linking a compiled TVM module into a shared library for a board, and reading it back."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from toolkit.errors import error_line
from toolkit.tuning.core.template import BuildError


def link_library(executable: Any, compiler: str | None) -> bytes:
    """``executable`` (what ``tvm.compile`` returns, or a runtime module) as a shared library linked by
    ``compiler`` (a board profile's cross compiler; ``None``: TVM's default, this machine's), read back;
    :class:`BuildError` with the compiler's error line when linking fails."""
    from tvm.support import cc

    options = {"fcompile": cc.cross_compiler(compiler)} if compiler else {}
    with tempfile.TemporaryDirectory(prefix="edgetune-link-") as tmp:
        path = os.path.join(tmp, "library.so")
        try:
            executable.export_library(path, **options)
        except Exception as exc:  # noqa: BLE001 - compiler errors come back as RuntimeError
            raise BuildError(f"linking with {compiler or 'the default compiler'} failed: "
                             f"{error_line(exc, first=True)}") from None
        return Path(path).read_bytes()
