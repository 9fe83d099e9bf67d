"""Every ``edgetune ...`` example in README.md and docs/*.md runs as written (Typer's practice).

Extraction: fenced code blocks (```, ```bash, ```console, ```sh, ```shell). A command is a line starting
with ``edgetune ``, ``$ edgetune `` or ``.venv/bin/edgetune `` (backslash continuations joined, ``#``
comments dropped, ``;``-separated commands run in order). In a ``$``-prompt block, the lines after a
command are its documented output: when that output starts with ``error:`` the example must exit 2 with
that one-line message; otherwise it must exit 0. Shell commands before an ``edgetune`` command on the
same line (``: > empty.jsonl; edgetune ...``) are its setup, run with bash; other shell lines are not run.

Each doc gets one temp environment (cwd, inventory, XDG dirs, bitstream cache, known_hosts): its examples
run in order there, so an example may use what an earlier one made (``board add`` then ``board show``, a
log then ``export``). Running one example alone first replays the doc's earlier ones.

Skips are explicit: ``<!-- docs-test: skip (reason) -->`` on the line before a code block skips its
commands (real boards, serial devices, the network, long benchmarks). A skipped command is still parsed
against the real CLI (command names, option names, option types), so a wrong flag fails even there.

Budget rule (the only rewrite): ``--trials N`` / ``-n N`` becomes ``min(N, 4)`` and ``--seeds K``
becomes ``1``; every other argument runs as written.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from toolkit.cli.app import _COMMANDS, app

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_FENCES = {"", "bash", "console", "sh", "shell"}
PREFIXES = ("edgetune ", ".venv/bin/edgetune ")
BUDGET = {"--trials": 4, "-n": 4, "--seeds": 1}  # flag -> the most this test runs
MARKER = re.compile(r"^<!--\s*docs-test:\s*skip\s*\((?P<reason>.+)\)\s*-->$")


@dataclass
class Example:
    """One ``edgetune`` command of a doc, in doc order."""

    doc: str  # path relative to the repo
    line: int  # 1-based line of the command in the doc
    text: str  # the command as written (continuations joined)
    argv: list[str]  # arguments after ``edgetune``, budget rule applied
    setup: list[str] = field(default_factory=list)  # shell commands on the same line, run first
    expect_error: str | None = None  # documented one-line error (exit 2), else exit 0
    skip: str | None = None  # reason from the doc's marker


def _split_commands(line: str) -> list[str]:
    """Split a shell line on ``;`` outside quotes."""
    parts, buf, quote = [], [], None
    for ch in line:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ";":
            parts.append("".join(buf).strip())
            buf = []
            continue
        buf.append(ch)
    parts.append("".join(buf).strip())
    return [p for p in parts if p]


def budget(argv: list[str]) -> list[str]:
    """Apply the budget rule: ``--trials/-n N`` -> ``min(N, 4)``, ``--seeds K`` -> 1.

    >>> budget(["tune", "-n", "64", "--seeds", "5", "--seed", "3", "--trials=200"])
    ['tune', '-n', '4', '--seeds', '1', '--seed', '3', '--trials=4']
    """
    out = list(argv)
    for i, arg in enumerate(out):
        flag, eq, value = arg.partition("=")
        if flag not in BUDGET:
            continue
        if eq and value.isdigit():
            out[i] = f"{flag}={min(int(value), BUDGET[flag])}"
        elif not eq and i + 1 < len(out) and out[i + 1].isdigit():
            out[i + 1] = str(min(int(out[i + 1]), BUDGET[flag]))
    return out


def _argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    return budget([os.path.expanduser(w) if w.startswith("~/") else w for w in words[1:]])


def _logical_lines(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join backslash continuations; keep the first line's number."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for no, text in lines:
        if pending is not None:
            no, text = pending[0], pending[1] + " " + text.strip()
        if text.rstrip().endswith("\\"):
            pending = (no, text.rstrip()[:-1].rstrip())
            continue
        pending = None
        out.append((no, text))
    if pending is not None:
        out.append(pending)
    return out


def _block_examples(doc: str, body: list[tuple[int, str]], skip: str | None) -> list[Example]:
    """The commands of one block; in a ``$``-prompt block only ``$`` lines, the rest is their output."""
    examples: list[Example] = []
    console = any(raw.strip().startswith("$ ") for _, raw in body)
    last: Example | None = None  # a ``$`` command whose documented output has not started yet
    for no, raw in _logical_lines(body):
        text = raw.strip()
        prompt = text.startswith("$ ")
        if console and not prompt:  # output; its first line may be the documented error
            if last is not None and text.startswith("error:"):
                last.expect_error = text.removeprefix("error:").strip()
            last = None
            continue
        text = text[2:].strip() if prompt else text
        last = None
        commands = _split_commands(text)
        if not any(c.startswith(PREFIXES) for c in commands):
            continue
        setup: list[str] = []
        for command in commands:
            if not command.startswith(PREFIXES):
                setup.append(command)
                continue
            ex = Example(doc, no, command, _argv(command), setup, skip=skip)
            setup = []
            examples.append(ex)
            last = ex if prompt else None
    return examples


def extract(path: Path) -> list[Example]:
    """All ``edgetune`` examples of one markdown file, in order."""
    doc = str(path.relative_to(REPO))
    lines = path.read_text().splitlines()
    examples: list[Example] = []
    fence: str | None = None
    body: list[tuple[int, str]] = []
    skip: str | None = None
    prev = ""  # the last non-blank line outside a block
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is None:
            if stripped.startswith("```"):
                fence = stripped[3:].strip().lower()
                body = []
                marker = MARKER.match(prev)
                skip = marker.group("reason").strip() if marker else None
                if "docs-test" in prev and not marker:
                    raise ValueError(f"{doc}:{no - 1}: malformed marker {prev!r}; "
                                     "write <!-- docs-test: skip (reason) -->")
            elif stripped:
                prev = stripped
        elif stripped.startswith("```"):
            if fence in SHELL_FENCES:
                examples += _block_examples(doc, body, skip)
            fence, prev = None, ""
        else:
            body.append((no, line))
    return examples


EXAMPLES = [ex for path in DOCS for ex in extract(path)]


def _id(ex: Example) -> str:
    return f"{ex.doc}:{ex.line}:{' '.join(ex.argv[:2])}"


class DocSession:
    """One doc's temp environment; runs its examples in order, each at most once."""

    def __init__(self, root: Path) -> None:
        self.cwd = root / "cwd"
        self.cwd.mkdir(parents=True)
        (self.cwd / "examples").symlink_to(REPO / "examples")   # examples run from a checkout, as a user's do
        home = root / "home"
        self.env = {
            "EDGETUNE_INVENTORY": str(home / "inventory.toml"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "EDGETUNE_BITSTREAM_CACHE": str(home / "bitstreams"),
            "EDGETUNE_KNOWN_HOSTS": str(home / "known_hosts"),
            "COLUMNS": "200",
        }
        self.done: dict[int, str | None] = {}  # index in the doc -> failure message or None

    def run(self, ex: Example) -> str | None:
        """Run ``ex``; return why it failed, or None."""
        for cmd in ex.setup:
            proc = subprocess.run(["bash", "-c", cmd], cwd=self.cwd, env={**os.environ, **self.env},
                                  capture_output=True, text=True)
            if proc.returncode:
                return f"setup `{cmd}` exited {proc.returncode}: {proc.stderr.strip()}"
        old = Path.cwd()
        os.chdir(self.cwd)
        try:
            result = CliRunner().invoke(app, ex.argv, env=self.env)
        finally:
            os.chdir(old)
        want = 0 if ex.expect_error is None else 2
        where = f"{ex.doc}:{ex.line}: `edgetune {shlex.join(ex.argv)}`"
        if result.exit_code != want:
            exc = result.exception if not isinstance(result.exception, SystemExit) else None
            return (f"{where} exited {result.exit_code}, the doc implies {want}\n{result.output[-3000:]}"
                    + (f"\nexception: {exc!r}" if exc else ""))
        if ex.expect_error is not None:
            got = " ".join(result.stderr.split())
            if " ".join(ex.expect_error.split()) not in got:
                return f"{where}: documented error\n  {ex.expect_error}\nbut the CLI says\n  {got}"
        return None


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> dict[str, DocSession]:
    return {doc: DocSession(tmp_path_factory.mktemp(Path(doc).stem)) for doc in {ex.doc for ex in EXAMPLES}}


def _parse_only(argv: list[str]) -> None:
    """Parse ``argv`` against the real CLI without running any command (option names, types, arity)."""
    root = get_command(app)
    stack = [root]
    while stack:
        cmd = stack.pop()
        cmd.callback = lambda *a, **k: None
        stack += list(getattr(cmd, "commands", {}).values())
    root.main(args=argv, prog_name="edgetune", standalone_mode=False)


def _run_example(example: Example, sessions: dict[str, DocSession]) -> None:
    if example.skip is not None:
        _parse_only(example.argv)
        pytest.skip(f"{example.doc}:{example.line}: {example.skip}")
    session = sessions[example.doc]
    same_doc = [ex for ex in EXAMPLES if ex.doc == example.doc]
    mine = same_doc.index(example)
    for i, ex in enumerate(same_doc[: mine + 1]):
        if ex.skip is None and i not in session.done:
            session.done[i] = session.run(ex)
        if i < mine and session.done.get(i):
            pytest.fail(f"an earlier example of {ex.doc} failed, so this one cannot run:\n{session.done[i]}")
    if session.done[mine]:
        pytest.fail(session.done[mine])


def _doc_class(doc: str) -> type:
    """A test class of one doc's examples: with ``--dist loadscope`` each doc is one unit of work, so the docs
    run on several workers while a doc's examples stay in order on one."""
    examples = [ex for ex in EXAMPLES if ex.doc == doc]

    class DocExamples:
        @pytest.mark.parametrize("example", examples, ids=[_id(ex) for ex in examples])
        def test_doc_example_runs(self, example: Example, sessions: dict[str, DocSession]) -> None:
            _run_example(example, sessions)

    DocExamples.__name__ = DocExamples.__qualname__ = "TestDoc_" + re.sub(r"\W", "_", Path(doc).stem)
    return DocExamples


for _doc in dict.fromkeys(ex.doc for ex in EXAMPLES):
    _cls = _doc_class(_doc)
    globals()[_cls.__name__] = _cls


def test_extraction_finds_the_documented_commands() -> None:
    """The extractor sees the known examples (a change in the parser cannot silently drop them)."""
    texts = {(ex.doc, ex.text) for ex in EXAMPLES}
    assert ("README.md", ".venv/bin/edgetune workloads list") in texts
    assert ("docs/export.md", "edgetune export --log empty.jsonl --out x") in texts
    errors = [ex for ex in EXAMPLES if ex.expect_error]
    assert errors and all(ex.doc == "docs/export.md" for ex in errors)
    assert [ex.setup for ex in EXAMPLES if ex.text == "edgetune export --log empty.jsonl --out x"] == [
        [": > empty.jsonl"]]
    assert len({ex.doc for ex in EXAMPLES}) >= 3


def test_help_lists_every_command_group() -> None:
    """``.venv/bin/edgetune --help`` names every module of ``_COMMANDS`` and every top-level command."""
    exe = Path(sys.executable).parent / "edgetune"
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True,
                          env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    listed = set(re.findall(r"^[│|]?\s*([a-z][\w-]*)\s{2,}", proc.stdout, flags=re.M))
    top = set(get_command(app).commands)  # type: ignore[attr-defined]
    assert set(_COMMANDS) <= listed, f"missing from --help: {set(_COMMANDS) - listed}"
    assert top <= listed, f"missing from --help: {top - listed}"


def test_readme_quick_start_is_make_demo_and_make_test() -> None:
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert section, "README.md has no '## Quick start' section"
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", section.group(1), flags=re.M | re.S)
    assert [[ln.strip() for ln in b.splitlines() if ln.strip()] for b in blocks] == [["make demo", "make test"]]


TVM_SOURCES = ("topi/", "pkg_config.py")
"""Files of TVM's and VTA's own trees that the docs cite (not files of this repository)."""


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_python_file_a_doc_names_exists(doc: Path) -> None:
    """A backticked ``dir/file.py`` is a file of the repository (from its root, ``toolkit/`` or ``toolkit/tuning/``,
    where docs/tuners.md's table points); a bare ``file.py`` is the name of one."""
    names = {p.name for p in REPO.glob("[!.]*/**/*.py")} | {p.name for p in REPO.glob("*.py")}
    missing = [path for path in re.findall(r"`([\w./-]+\.py)`", doc.read_text())
               if not path.startswith(TVM_SOURCES) and path not in names
               and not any((base / path).is_file() for base in (REPO, REPO / "toolkit", REPO / "toolkit/tuning"))]
    assert not missing, f"{doc.name} names files that do not exist: {missing}"
