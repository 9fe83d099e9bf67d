"""The steps of a provisioning plan (:class:`Step`) that bring the TVM runtime onto a board and check it has room
for the agent: :func:`runtime_steps` (a wheel, an uploaded runtime, or the armv7 bundle cross-built here) and
:func:`memory_step`. :mod:`toolkit.rpc.provision` composes them with the agent, bitstream and start steps."""

from __future__ import annotations

import io
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from toolkit.boards import BoardEntry
from toolkit.errors import BoardError
from toolkit.rpc.agent_control import agent_running
from toolkit.rpc.ssh import SSHSession, quote

DEFAULT_RUNTIME = "apache-tvm==0.27.0.post1"
RUNTIME_DEPS = ("apache-tvm-ffi==0.1.14.post1", "numpy", "tornado", "psutil", "cloudpickle")
DEFAULT_AGENT_MEMORY_MB = 96
"""Free memory an agent needs where its profile does not say (``[limits] agent_memory_mb``)."""


@dataclass
class Step:
    """One idempotent step: skipped when ``check`` exits 0; ``upload`` is ``(bytes, remote path)``."""

    name: str
    command: str | None = None
    check: str | None = None
    upload: tuple[bytes, str] | None = None
    local: Callable[[SSHSession], str] | None = None
    note: str = ""

    def describe(self) -> list[str]:
        """Lines printed by ``--dry-run``."""
        lines = [f"# {self.name}" + (f"  ({self.note})" if self.note else "")]
        if self.check:
            lines.append(f"  check: {self.check}")
        if self.upload:
            lines.append(f"  upload: {len(self.upload[0])} bytes -> {self.upload[1]}")
        if self.command:
            lines.append(f"  run:   {self.command}")
        if self.local:
            lines.append("  local: " + (self.local.__doc__ or self.name).strip().splitlines()[0])
        return lines


def fail(message: str) -> str:
    """Shell: print ``message`` (any characters, quoted) to stderr and fail the step."""
    return f"printf '%s\\n' {shlex.quote(message)} >&2; exit 1"


def runtime_steps(entry: BoardEntry, python: str | None, runtime_path: Path | None, py: str,
                  p: dict[str, str]) -> list[Step]:
    """How the TVM runtime gets onto the board: the board's own ``python``, ``runtime_path`` uploaded, the
    runtime bundle cross-built here (armv7), or the profile's wheel."""
    profile = entry.profile
    q = quote
    has_tvm = (f"{q(py)} -c 'import importlib.util as u, sys; "
               f"sys.exit(not (u.find_spec(\"tvm\") and u.find_spec(\"numpy\")))'")
    if python:
        return [Step("check the board's python", check=has_tvm,
                     command=fail(f"the python {python} on the board cannot import tvm and numpy: install "
                                   "them there or drop --python"))]
    if runtime_path is not None:
        rp = Path(runtime_path).expanduser()
        if not rp.exists():
            raise BoardError(f"--runtime-path {rp} does not exist; give a TVM wheel or a runtime directory")
        if rp.is_file():
            remote = f"{p['root']}/{rp.name}"
            return [Step("upload TVM runtime wheel", check=f"test -f {q(remote)}", upload=(rp.read_bytes(), remote)),
                     Step("install TVM runtime wheel", check=has_tvm,
                          command=f"{q(py)} -m pip install {q(remote)} numpy")]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(rp), arcname="tvm")
        site = f"$({q(py)} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
        return [Step("upload TVM runtime", check=f"test -d {q(p['tvm'])}/python",
                     upload=(buf.getvalue(), f"{p['root']}/tvm-runtime.tar.gz"),
                     command=f"tar -xzf {q(p['root'])}/tvm-runtime.tar.gz -C {q(p['root'])} && "
                             f"rm {q(p['root'])}/tvm-runtime.tar.gz"),
                Step("link TVM runtime into the venv", check=has_tvm,
                     command=f"{q(py)} -m pip install numpy cloudpickle psutil tornado && "
                             f"echo {q(p['tvm'])}/python > {site}/tvm-runtime.pth")]
    method = profile.runtime.get("method", "wheel")
    if method == "bundle":
        return bundle_steps(entry, py, p, has_tvm)
    package = profile.runtime.get("package", DEFAULT_RUNTIME)
    note = profile.runtime.get("notes", "")
    return [Step(f"install TVM runtime ({package})", check=has_tvm,
                 command=f"{q(py)} -m pip install {shlex.quote(package)} "
                         f"{' '.join(shlex.quote(d) for d in RUNTIME_DEPS)}", note=note)]


def bundle_steps(entry: BoardEntry, py: str, p: dict[str, str], has_tvm: str) -> list[Step]:
    """Upload the runtime bundle cross-built here (``edgetune runtime build``) and put it on the venv's path."""
    from toolkit.rpc.runtime_bundle import require

    arch = entry.profile.runtime.get("bundle", "armv7")
    try:
        folder, info = require(arch)
    except BoardError as exc:  # a dry run shows it; a real run stops before connecting (preflight)
        return [Step(f"upload TVM runtime ({arch} bundle)", note=f"NOT READY: {exc}", check=has_tvm,
                     command=fail(str(exc)))]
    q = quote
    archive = (folder / "runtime.tar.gz").read_bytes()
    digest = info["archive_sha256"][:16]
    version = tuple(int(v) for v in info["python"].split("."))
    site = f"$({q(py)} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    runtime = p["runtime"]
    return [
        Step(f"the board's python is {info['python']}", check=f"{q(py)} -c 'import sys; sys.exit(sys.version_info[:2] "
             f"!= {version})'", command=fail(
                 f"the {arch} runtime bundle is built for Python {info['python']} but {entry.name}'s python is "
                 f"another: build one for it with `edgetune runtime build --arch {arch} --sysroot DIR` (DIR: the "
                 "board's /usr/include/python3.X copied here; docs/boards.md)")),
        Step("numpy from the board's image", check=f"{q(py)} -c 'import numpy'", command=fail(
            f"numpy is not importable by {py} on {entry.name}: install the image's numpy (`sudo apt install "
            "python3-numpy`) and provision with --system-site-packages")),
        Step(f"upload TVM runtime ({arch} bundle, {len(archive) / 2**20:.1f} MiB)",
             check=f"test \"$(cat {q(runtime)}/.digest 2>/dev/null)\" = {digest}",
             upload=(archive, f"{p['root']}/runtime.tar.gz"),
             command=f"rm -rf {q(runtime)} && mkdir -p {q(runtime)} && tar -xzf {q(p['root'])}/runtime.tar.gz -C "
                     f"{q(runtime)} && echo {digest} > {q(runtime)}/.digest && rm {q(p['root'])}/runtime.tar.gz",
             note=f"tvm {info['tvm']}, cross-built here, sha256 {digest}"),
        Step("link TVM runtime into the venv", check=has_tvm,
             command=f"echo {q(runtime)}/python > {site}/edgetune-runtime.pth"),
    ]


MEMORY_PROBE = ("import sys; m = dict(l.split(':', 1) for l in open('/proc/meminfo')); "
                "free = int(m.get('MemAvailable', m['MemFree']).split()[0]) // 1024\n"
                "for lim, use in (('/sys/fs/cgroup/memory/memory.limit_in_bytes', "
                "'/sys/fs/cgroup/memory/memory.usage_in_bytes'), ('/sys/fs/cgroup/memory.max', "
                "'/sys/fs/cgroup/memory.current')):\n"
                " try: cap = open(lim).read().strip(); used = int(open(use).read())\n"
                " except OSError: continue\n"
                " if cap.isdigit() and int(cap) < 1 << 50: free = min(free, (int(cap) - used) >> 20)\n"
                "print(free); sys.exit(free < {need})")
"""Python run on the board: its free memory in MiB (``MemAvailable``, or what its memory cgroup leaves, whichever
is less); exits 1 below ``need``."""


def memory_step(entry: BoardEntry, p: dict[str, str]) -> Step:
    """Refuse a board with too little free memory for the agent (skipped while its agent runs)."""
    need = int(entry.profile.limits.get("agent_memory_mb", DEFAULT_AGENT_MEMORY_MB))
    probe = shlex.quote(MEMORY_PROBE.format(need=need))
    pid = quote(p["pid"])
    return Step(f"free memory for the agent ({need} MiB)",
                check=f"{{ [ -f {pid} ] && {agent_running(pid)}; }} || python3 -c {probe} >/dev/null",
                command=f"free=$(python3 -c {probe}); printf '%s\\n' \"{entry.name} has $free MiB of memory free but "
                        f"the agent needs {need} MiB: stop what else runs there (or free memory) and provision "
                        "again\" >&2; exit 1")
