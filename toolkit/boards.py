"""Board profiles (``boards/*.toml``) and the board inventory (a user's TOML file).

A *profile* describes a board type: architecture, TVM target, RPC key, VTA hardware,
how the runtime gets onto it and which cross compiler links its libraries.
The *inventory* lists the user's boards: name, type, host, SSH details, RPC key, tags.

>>> from toolkit.boards import load_profile
>>> load_profile("vta-fsim").family
'vta'
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterator

import tomli_w

from toolkit.errors import BoardError, InventoryError
from toolkit.files import atomic_write_text

PROFILE_DIR = Path(os.environ.get("EDGETUNE_BOARDS_DIR", Path(__file__).resolve().parent.parent / "boards"))
BUILTIN_BOARDS = ("vta-fsim", "local")
"""Boards that need no registration: the simulator and this machine's CPU."""

FAMILIES: dict[str, tuple[str, ...]] = {"vta": ("vta",), "cpu": (), "cuda": ()}
"""Board families, each with the profile tables its boards need (its backend: :mod:`toolkit.backends`)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""Board, board type and tag names (matched whole: ``fullmatch``)."""
HINT_BOARDS = 10
"""How many registered boards an unknown-board error names."""
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,31}")
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]{0,252})|\[?[0-9A-Fa-f:.]{2,45}\]?")
"""A host name or an IPv4/IPv6 address; never an option (leading ``-``), a space or shell syntax."""


@dataclass(frozen=True)
class BoardProfile:
    """One board type, loaded from ``boards/<name>.toml``."""

    name: str
    description: str
    arch: str
    family: str
    rpc_key: str
    target_spec: dict[str, Any]
    """The profile's ``[target]`` table as written (``mcpu = "auto"`` unresolved); :attr:`target` resolves it."""
    executor: str
    vta: dict[str, Any] | None
    runtime: dict[str, Any]
    cross_compiler: str | None
    ssh: dict[str, Any]
    limits: dict[str, Any]
    roofline: dict[str, Any] = field(default_factory=dict)
    """The ``[roofline]`` table: ``peak_gflops``, ``bandwidth_gbs`` and their ``source`` (empty: not known)."""

    @cached_property
    def target(self) -> dict[str, Any]:
        """The TVM target as a dict, ``mcpu = "auto"`` replaced by this machine's CPU (imports TVM then, on
        first use, so listing boards stays fast)."""
        return _resolve_auto(self.target_spec)

    @property
    def is_simulator(self) -> bool:
        """True for the in-process VTA simulator board."""
        return self.executor == "fsim"

    def tvm_target(self) -> "Any":
        """The profile's target as a ``tvm.target.Target`` (imports TVM)."""
        import tvm

        return tvm.target.Target(self.target)


def _resolve_auto(target: dict[str, Any]) -> dict[str, Any]:
    """Replace ``mcpu = "auto"`` by this machine's CPU as LLVM detects it."""
    out = dict(target)
    if out.get("mcpu") == "auto":
        from tvm.target import codegen

        out["mcpu"] = codegen.llvm_get_system_cpu()
    if isinstance(out.get("host"), dict):
        out["host"] = _resolve_auto(out["host"])
    return out


def profile_names() -> list[str]:
    """Names of every shipped profile."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


@lru_cache(maxsize=None)
def load_profile(name: str) -> BoardProfile:
    """Load and validate ``boards/<name>.toml``; :class:`BoardError` if unknown or malformed."""
    path = PROFILE_DIR / f"{name}.toml"
    if not _NAME.fullmatch(name) or not path.is_file():
        raise BoardError(f"unknown board type {name!r}: use one of {', '.join(profile_names())}")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BoardError(f"board profile {path} is malformed: {exc}") from None
    try:
        family = raw["family"]
        if family not in FAMILIES:
            raise BoardError(f"board profile {path}: family must be one of {tuple(FAMILIES)}, got {family!r}")
        vta = raw.get("vta")
        for table in FAMILIES[family]:
            if not raw.get(table):
                raise BoardError(f"board profile {path}: a {family} board needs a [{table}] table")
        return BoardProfile(
            name=name,
            description=raw["description"],
            arch=raw["arch"],
            family=family,
            rpc_key=raw["rpc_key"],
            target_spec=dict(raw["target"]),
            executor=raw["executor"],
            vta=vta,
            runtime=raw.get("runtime", {}),
            cross_compiler=raw.get("cross", {}).get("compiler") or None,
            ssh=raw.get("ssh", {}),
            limits=raw.get("limits", {}),
            roofline=raw.get("roofline", {}),
        )
    except KeyError as exc:
        raise BoardError(f"board profile {path} lacks the key {exc.args[0]!r}") from None


# -- inventory ------------------------------------------------------------------------

@dataclass
class BoardEntry:
    """One registered board."""

    name: str
    type: str
    host: str | None = None
    port: int = 22
    user: str | None = None
    key: str | None = None
    rpc_key: str | None = None
    tags: list[str] = field(default_factory=list)

    @property
    def profile(self) -> BoardProfile:
        """The board's profile."""
        return load_profile(self.type)

    @property
    def effective_rpc_key(self) -> str:
        """The RPC key the board registers under (its own, else the profile's)."""
        return self.rpc_key or self.profile.rpc_key

    def to_toml(self) -> dict[str, Any]:
        """The inventory table of this board (no empty fields)."""
        d: dict[str, Any] = {"type": self.type, "port": self.port}
        for k in ("host", "user", "key", "rpc_key"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.tags:
            d["tags"] = list(self.tags)
        return d


def default_inventory_path() -> Path:
    """``$EDGETUNE_INVENTORY``, else ``$XDG_CONFIG_HOME/edgetune/inventory.toml``."""
    env = os.environ.get("EDGETUNE_INVENTORY")
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "edgetune" / "inventory.toml"


class Inventory:
    """The user's boards, stored in one TOML file written atomically.

    >>> import tempfile, pathlib
    >>> inv = Inventory(pathlib.Path(tempfile.mkdtemp()) / "inv.toml")
    >>> _ = inv.add(BoardEntry("sim1", "vta-fsim"))
    >>> [b.name for b in inv.load()]
    ['sim1']
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_inventory_path()

    def load(self) -> list[BoardEntry]:
        """Every registered board; a missing file is an empty inventory. Every entry is validated as
        ``board add`` validates it (:class:`InventoryError` naming the board)."""
        if not self.path.exists():
            return []
        self._refuse_non_file()
        try:
            text = self.path.read_text()
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InventoryError(
                f"inventory {self.path} is corrupt ({exc}); fix that line or move the file away, "
                "edgetune will not overwrite it"
            ) from None
        except UnicodeDecodeError:
            raise InventoryError(f"inventory {self.path} is not a text (TOML) file; move it away or give another "
                                 "--inventory, edgetune will not overwrite it") from None
        except OSError as exc:
            raise InventoryError(f"cannot read inventory {self.path}: {exc.strerror or exc}; check its permissions "
                                 "or give another --inventory") from None
        boards = raw.get("boards", {})
        if not isinstance(boards, dict):
            raise InventoryError(f"inventory {self.path}: 'boards' must be a table; fix or move the file away")
        out = []
        for name, t in boards.items():
            if not isinstance(t, dict) or "type" not in t:
                raise InventoryError(f"inventory {self.path}: board {name!r} has no type; fix or remove it")
            unknown = set(t) - {"type", "host", "port", "user", "key", "rpc_key", "tags"}
            if unknown:
                raise InventoryError(f"inventory {self.path}: board {name!r} has unknown key(s) {sorted(unknown)}")
            port = t.get("port", 22)
            strings = {k: t.get(k) for k in ("type", "host", "user", "key", "rpc_key")}
            if (not isinstance(port, int) or isinstance(port, bool)
                    or any(v is not None and not isinstance(v, str) for v in strings.values())
                    or not isinstance(t.get("tags", []), list)):
                raise InventoryError(f"inventory {self.path}: board {name!r} is malformed (port must be a number, "
                                     "type/host/user/key/rpc_key strings, tags a list); fix or remove it")
            entry = BoardEntry(name=name, type=t["type"], host=t.get("host"), port=port, user=t.get("user"),
                               key=t.get("key"), rpc_key=t.get("rpc_key"), tags=list(t.get("tags", [])))
            try:
                validate_entry(entry, check_key=False)
            except BoardError as exc:
                raise InventoryError(f"inventory {self.path}: board {name!r}: {exc}; fix or remove it") from None
            out.append(entry)
        return out

    def get(self, name: str) -> BoardEntry:
        """A registered board by name."""
        for b in self.load():
            if b.name == name:
                return b
        known = [b.name for b in self.load()]
        shown = ", ".join(known[:HINT_BOARDS]) + (f" and {len(known) - HINT_BOARDS} more (edgetune board list)"
                                                   if len(known) > HINT_BOARDS else "")
        hint = f"registered: {shown}" if known else "the inventory is empty"
        raise BoardError(f"unknown board {name!r} ({hint}); add it with `edgetune board add {name} --type TYPE`")

    def add(self, entry: BoardEntry, replace: bool = False) -> BoardEntry:
        """Register a board; an existing name is refused unless ``replace``. The read-modify-write holds
        the inventory's lock, so concurrent ``board add`` calls all land."""
        validate_entry(entry)
        with self._locked():
            boards = self.load()
            if any(b.name == entry.name for b in boards) and not replace:
                raise InventoryError(f"board {entry.name!r} is already registered; remove it first or pass --replace")
            boards = [b for b in boards if b.name != entry.name] + [entry]
            self._write(boards)
        return entry

    def remove(self, name: str) -> BoardEntry:
        """Unregister a board (under the inventory's lock)."""
        with self._locked():
            entry = self.get(name)
            self._write([b for b in self.load() if b.name != name])
        return entry

    def _refuse_non_file(self) -> None:
        if self.path.exists() and not self.path.is_file():
            raise InventoryError(f"inventory {self.path} is not a regular file; give a file path with --inventory")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on ``<inventory>.lock`` (the inventory itself is replaced on every write)."""
        self._refuse_non_file()      # before a lock file is left beside a folder or a device
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise InventoryError(f"cannot write inventory {self.path}: {exc.strerror or exc}; give another "
                                 "--inventory") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, boards: list[BoardEntry]) -> None:
        data = {"boards": {b.name: b.to_toml() for b in boards}}
        text = "# edgetune board inventory (edit with `edgetune board add/remove`)\n" + tomli_w.dumps(data)
        atomic_write_text(self.path, text)


def check_private_key(path: Path) -> None:
    """Refuse an SSH key file that is missing, a public key, or readable by other users (as ssh does)."""
    if not path.is_file():
        raise BoardError(f"SSH key file {path} does not exist or is not a file; give the path of a private key")
    try:
        head = path.read_bytes()[:200]
    except OSError as exc:
        raise BoardError(f"cannot read SSH key file {path}: {exc.strerror}") from None
    if head.startswith((b"ssh-", b"ecdsa-", b"sk-")) or path.suffix == ".pub":
        raise BoardError(f"{path} is a public key; give the private key (the same path without .pub)")
    if b"PRIVATE KEY-----" not in head:
        raise BoardError(f"{path} is not an SSH private key (no PRIVATE KEY block); give the key ssh-keygen wrote")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise BoardError(f"the SSH key {path} is readable by other users (mode {mode:o}); `chmod 600 {path}`, as "
                         "ssh itself requires")


def validate_entry(entry: BoardEntry, check_key: bool = True) -> None:
    """Check a board entry before it is stored (``check_key``: its SSH key file exists)."""
    if not _NAME.fullmatch(entry.name):
        raise BoardError(f"board name {entry.name!r} must start with a letter or digit, then letters, digits, '.', "
                         "'_' or '-' (at most 64 in all)")
    if entry.host is not None and not _HOST.fullmatch(entry.host):
        raise BoardError(f"host {entry.host!r} is not a host name or an IP address; give one such as "
                         "192.168.2.99 or pynq1.local")
    if entry.name in BUILTIN_BOARDS:
        raise BoardError(f"{entry.name!r} is a built-in board; choose another name")
    load_profile(entry.type)
    if not 0 < entry.port < 65536:
        raise BoardError(f"port {entry.port} is out of range 1..65535")
    if entry.user is not None and not _USER.fullmatch(entry.user):
        raise BoardError(f"user {entry.user!r} is not a login name (letters, digits, '.', '_' or '-', starting with "
                         "a letter or '_', at most 32)")
    if check_key and entry.key:
        check_private_key(Path(entry.key).expanduser())
    for tag in entry.tags:
        if not isinstance(tag, str) or not _NAME.fullmatch(tag):
            raise BoardError(f"tag {tag!r} must start with a letter or digit, then letters, digits, '.', '_' or '-'")


@dataclass(frozen=True)
class Board:
    """A board ready to use: its entry (``None`` for built-ins) and its profile."""

    name: str
    profile: BoardProfile
    entry: BoardEntry | None = None

    @property
    def rpc_key(self) -> str:
        """RPC key of the board."""
        return self.entry.effective_rpc_key if self.entry else self.profile.rpc_key


def resolve_board(name: str, inventory: Inventory | None = None) -> Board:
    """A registered board by name, or a built-in one (``vta-fsim``, ``local``)."""
    inventory = inventory or Inventory()
    if name in BUILTIN_BOARDS:
        return Board(name, load_profile(name))
    entry = inventory.get(name)
    return Board(name, entry.profile, entry)
