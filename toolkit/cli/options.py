"""Options shared by several commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

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
