"""What the dashboard may read: the folders and logs it was given, and the files found under them.

Every path a page asks for is resolved (links followed) and served only when it lies inside a given folder or is a
given file; anything else is refused. Files are found by name: tuning logs (``*.jsonl`` whose first line is an
edgetune header), export folders (``manifest.json``) and bench results (``*.json`` holding ``runs`` and
``settings``). The dashboard opens them read-only.
"""

from __future__ import annotations

import json
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import ConfigError
from toolkit.tuning.records import HEADER_KEY

MAX_BENCH_BYTES = 64 << 20
RESCAN_S = 1.0
"""How often the folders are walked again for new files."""
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache"}


class OutsideError(ConfigError):
    """A path outside the folders the dashboard was given."""


def check_roots(paths: list[Path]) -> list[Path]:
    """The folders and logs to serve, resolved; :class:`ConfigError` for one that does not exist or is neither a
    folder nor a regular file (a device, a pipe)."""
    roots = []
    for p in paths or [Path(".")]:
        try:
            st = p.stat()
        except FileNotFoundError:
            raise ConfigError(f"{p} does not exist; give a folder of tuning logs or a log file") from None
        except OSError as exc:
            raise ConfigError(f"cannot read {p}: {exc.strerror or exc}; give a folder or a log file") from None
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise ConfigError(f"{p} is not a folder or a regular file (a device or a pipe); give a folder of "
                              "tuning logs or a log file")
        roots.append(p.resolve())
    return roots


@dataclass
class Sources:
    """The given roots and what was found under them (rescanned at most every :data:`RESCAN_S`)."""

    roots: list[Path]
    logs: list[Path] = field(default_factory=list)
    export_logs: list[Path] = field(default_factory=list)
    exports: list[Path] = field(default_factory=list)
    benches: list[Path] = field(default_factory=list)
    _scanned: float = 0.0

    def inside(self, raw: str) -> Path:
        """``raw`` resolved; :class:`OutsideError` unless it is a root file or lies inside a root folder."""
        try:
            path = Path(raw).resolve()
        except (OSError, RuntimeError, ValueError):
            raise OutsideError(f"{raw[:200]} is not a readable path") from None
        for root in self.roots:
            if path == root or (root.is_dir() and path.is_relative_to(root)):
                return path
        raise OutsideError(f"{raw[:200]} is outside the folders this dashboard serves")

    def scan(self, force: bool = False) -> None:
        """Walk the roots again when :data:`RESCAN_S` has passed (or ``force``)."""
        if not force and time.monotonic() - self._scanned < RESCAN_S:
            return
        logs, exports, benches = [], [], []
        for root in self.roots:
            files = [root] if root.is_file() else _walk(root)
            for f in files:
                if f.suffix == ".jsonl" and _is_log(f):
                    logs.append(f)
                elif f.name == "manifest.json":
                    exports.append(f.parent)
                elif f.suffix == ".json" and _is_bench(f):
                    benches.append(f)
        folders = set(exports)      # an export's copy of its log shows on the export's page, not as a run
        self.logs = _unique([p for p in logs if p.parent not in folders])
        self.export_logs = _unique([p for p in logs if p.parent in folders])
        self.exports, self.benches = _unique(exports), _unique(benches)
        self._scanned = time.monotonic()


def _walk(root: Path) -> list[Path]:
    """Regular files under ``root`` (links to places outside it skipped), in name order."""
    out = []
    for p in sorted(root.rglob("*")):
        if any(part in SKIP_DIRS for part in p.relative_to(root).parts):
            continue
        try:
            if p.is_file() and p.resolve().is_relative_to(root):
                out.append(p.resolve())
        except OSError:
            continue
    return out


def _unique(paths: list[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


def _is_log(path: Path) -> bool:
    """Whether the file starts like an edgetune log (a corrupt one still counts: its card shows the error)."""
    try:
        with path.open("rb") as f:
            first = f.read(4096)
    except OSError:
        return False
    return f'"{HEADER_KEY}"'.encode() in first or not first.strip()


def _is_bench(path: Path) -> bool:
    """Whether the file is a bench result (``BenchResult`` JSON)."""
    try:
        if path.stat().st_size > MAX_BENCH_BYTES:
            return False
        with path.open("rb") as f:
            head = f.read(4096)
        if b'"environment"' not in head and b'"settings"' not in head:
            return False
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and isinstance(obj.get("runs"), list) and "settings" in obj
