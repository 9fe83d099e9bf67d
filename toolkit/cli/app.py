"""The root typer app. Each command group lives in its own module and registers itself here."""

from __future__ import annotations

import importlib
import warnings
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from toolkit import console
from toolkit.version import __version__
from toolkit.errors import EdgetuneError


UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
"""click's usage error (typer vendors click in newer releases; its public ``BadParameter`` derives from it)."""


_METAVARS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "int range": "INTEGER",
             "float range": "FLOAT", "list[str]": "TEXT", "list[path]": "PATH", "list[Path]": "PATH",
             "list[int]": "INTEGER"}
"""Typer's ``<type>`` labels as the value names a command-line user reads (flags take no value: none)."""


def _plain_help(command) -> None:  # noqa: ANN001 - a click command of any kind
    """Once per command tree: brackets in help texts printed as written (not read as rich markup), value
    names instead of ``<bool>``/``<list[str]>`` labels."""
    if getattr(command, "_edgetune_plain", False):
        return
    command._edgetune_plain = True
    if command.help:
        command.help = command.help.replace("[", r"\[").replace("``", "`")
    for param in command.params:
        if getattr(param, "help", None):
            param.help = param.help.replace("[", r"\[")
        if param.param_type_name == "argument":
            label = param.display_type(None).strip("<>")
            param.display_type_rich = lambda ctx, shown=_METAVARS.get(label, label): shown
        elif param.metavar is None:
            if param.is_flag:
                param.metavar = ""
            else:
                label = param.display_type(None).strip("<>")
                param.metavar = _METAVARS.get(label, label)
    make_help_option = command.get_help_option

    def help_option(ctx):  # noqa: ANN001, ANN202 - click's signature
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


class _Group(TyperGroup):
    """Root group: turns every :class:`EdgetuneError` into a one-line error and exit code 2."""

    interrupt_said = False

    def main(self, *args, **kwargs):  # type: ignore[override]
        _plain_help(self)
        try:
            return super().main(*args, **kwargs)
        except SystemExit as exc:   # typer turns a Ctrl-C while it parses into a silent exit 130
            if exc.code == 130 and not _Group.interrupt_said:
                console.error("interrupted; nothing was done")
            raise

    def invoke(self, ctx):  # type: ignore[override]
        args = (*(getattr(ctx, "protected_args", None) or getattr(ctx, "_protected_args", ())), *ctx.args)
        as_json = "--json" in args
        try:
            return super().invoke(ctx)
        except EdgetuneError as exc:
            console.error(str(exc), as_json=as_json)
            raise typer.Exit(exc.exit_code) from None
        except UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "edgetune"
            console.error(f"{exc.format_message()} (see `{command} --help`)", as_json=as_json)
            raise typer.Exit(2) from None
        except OSError as exc:
            if getattr(exc, "filename", None):
                console.error(f"{exc.strerror or exc}: {exc.filename}; check the path, its folder and permissions",
                              as_json=as_json)
            else:
                console.error(f"{exc.strerror or exc}; check free space and the permissions of what this command "
                              "writes", as_json=as_json)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            keeps = ("every record written so far is kept (resume with --resume)"
                     if ctx.invoked_subcommand in RESUMABLE else "nothing was left half-written")
            console.error(f"interrupted; {keeps}", as_json=as_json)
            _Group.interrupt_said = True
            raise typer.Exit(130) from None


RESUMABLE = ("tune", "bench")
"""Commands whose interrupted run leaves a log to resume."""

app = typer.Typer(
    cls=_Group,
    name="edgetune",
    help="Tune conv2d kernels on VTA FPGAs, Jetson and Raspberry Pi boards, or the VTA simulator.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        console.info(f"edgetune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """edgetune: kernel tuning for edge boards."""


# Command modules, in help order. Each one adds its commands to ``app`` when imported.
_COMMANDS = [
    "board",
    "tracker",
    "cluster",
    "bitstream",
    "runtime",
    "workloads",
    "tune",
    "vta",
    "space",
    "export",
    "bench",
    "dashboard",
]
for _name in _COMMANDS:
    importlib.import_module(f"toolkit.cli.{_name}")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """edgetune's own warnings (a truncated log line, a stale replay cache) as one line; others as Python prints
    them."""
    if category.__module__.startswith("toolkit."):
        console.warn(str(message))
    else:
        _default_show_warning(message, category, filename, lineno, file, line)


_default_show_warning = warnings.showwarning


def main() -> None:
    """Console-script entry point. A Ctrl-C before a command runs (while Typer builds the command line) is one line
    too: the command's own handler only covers what it runs."""
    warnings.showwarning = _show_warning
    try:
        app()
    except KeyboardInterrupt:
        console.error("interrupted while starting; nothing was done")
        raise SystemExit(130) from None
