"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from toolkit.errors import ConfigError

InventoryOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--inventory",
        envvar="EDGETUNE_INVENTORY",
        show_envvar=True,
        help="Board inventory file (default: ~/.config/edgetune/inventory.toml).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]


def check_folder(path: Path, flag: str) -> None:
    """Refuse a folder option that names a file, or lies under one (:class:`ConfigError` naming ``flag``)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{flag} {path}: {probe} is a file, not a folder; choose another {flag}")
