"""The ``edgetune`` command line: a thin typer layer over the Python API."""

from toolkit.cli.app import app, main

__all__ = ["app", "main"]
