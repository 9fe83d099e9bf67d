"""``board check``: what a board has (OS, Python, TVM runtime, GPU, FPGA) and what it is missing.

One shell probe runs over SSH and prints ``key=value`` lines; :func:`assess` turns them into
findings against the board's profile, each missing piece with its fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from toolkit.boards import BoardEntry, BoardProfile
from toolkit.rpc.ssh import SSHSession, quote

_PROBE = r"""
PY={py}
echo "arch=$(uname -m)"
echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -sr)"
echo "kernel=$(uname -r)"
echo "cores=$(nproc 2>/dev/null || grep -c ^processor /proc/cpuinfo)"
echo "mem_mb=$(awk '/MemTotal/{{printf "%d", $2/1024}}' /proc/meminfo)"
echo "disk_free_mb=$(df -Pk "$HOME" | awk 'NR==2{{printf "%d", $4/1024}}')"
if command -v "$PY" >/dev/null 2>&1; then
  echo "python=$("$PY" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)"
  echo "python_path=$(command -v "$PY")"
  echo "tvm=$("$PY" -c 'import tvm; print(tvm.__version__)' 2>/dev/null)"
  echo "numpy=$("$PY" -c 'import numpy; print(numpy.__version__)' 2>/dev/null)"
  echo "pynq=$("$PY" -c 'import pynq; print(pynq.__version__)' 2>/dev/null)"
fi
echo "nvhost=$(ls /dev/nvhost-ctrl* /dev/nvhost-gpu 2>/dev/null | head -1)"
echo "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "tegrastats=$(command -v tegrastats)"
echo "fpga_manager=$(ls /sys/class/fpga_manager 2>/dev/null | head -1)"
echo "fpga_state=$(cat /sys/class/fpga_manager/*/state 2>/dev/null | head -1)"
echo "bitstream=$(ls {remote}/bitstreams/*.bit 2>/dev/null | head -1)"
echo "sudo=$(if [ "$(id -u)" = 0 ]; then echo root; elif sudo -n true 2>/dev/null; then echo yes; else echo no; fi)"
"""


@dataclass
class Finding:
    """One checked item: its value, whether it is fine, and the fix when not."""

    item: str
    value: str
    ok: bool
    fix: str = ""


def probe(session: SSHSession, python: str = "python3", remote_dir: str = "~/.edgetune") -> dict[str, str]:
    """Run the probe on the board; ``{key: value}``."""
    script = _PROBE.format(py=quote(python), remote=quote(remote_dir))
    result = session.run("sh -s", stdin=script.encode(), check=True, timeout=60)
    facts: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            facts[key.strip()] = value.strip()
    return facts


def _arch_ok(profile: BoardProfile, arch: str) -> bool:
    if profile.executor == "fsim":
        return True  # the simulator runs on any CPU
    same = {"armv7l": {"armv7l", "armv7"}, "aarch64": {"aarch64", "arm64"}, "x86_64": {"x86_64", "amd64"}}
    return arch in same.get(profile.arch, {profile.arch})


def assess(entry: BoardEntry, facts: dict[str, str]) -> list[Finding]:
    """Findings for ``facts`` against the board's profile."""
    p = entry.profile
    name = entry.name
    out = [
        Finding("architecture", facts.get("arch", "?"), _arch_ok(p, facts.get("arch", "")),
                f"this board is {facts.get('arch')} but type {p.name} expects {p.arch}; re-add it with "
                f"the right --type (`edgetune board types`)"),
        Finding("os", facts.get("os", "?"), True),
        Finding("cpu cores", facts.get("cores", "?"), True),
        Finding("memory (MiB)", facts.get("mem_mb", "?"), True),
    ]
    disk = int(facts.get("disk_free_mb") or 0)
    out.append(Finding("free disk (MiB)", str(disk), disk >= 300,
                       "free at least 300 MiB in the login user's home (the agent, venv and runtime live there)"))
    py = facts.get("python", "")
    major_minor = tuple(int(x) for x in py.split(".")[:2]) if py else (0, 0)
    out.append(Finding("python", f"{py} ({facts.get('python_path', '')})" if py else "missing",
                       major_minor >= (3, 8), "install Python 3.8+ on the board (e.g. `sudo apt install python3 "
                       "python3-venv`)"))
    tvm = facts.get("tvm", "")
    runtime_fix = (f"run `edgetune board provision {name}`" +
                   (f" (uploads the runtime `edgetune runtime build --arch {p.runtime.get('bundle', 'armv7')}` "
                    "cross-builds here)" if p.runtime.get("method") == "bundle" else ""))
    out.append(Finding("tvm runtime", tvm or "missing", bool(tvm), runtime_fix))
    out.append(Finding("numpy", facts.get("numpy") or "missing", bool(facts.get("numpy")),
                       f"run `edgetune board provision {name}` (installs numpy into the agent's venv)"))
    return out


def findings_json(findings: list[Finding], facts: dict[str, str]) -> dict:
    """JSON form of a check."""
    return {"ok": all(f.ok for f in findings), "facts": facts, "findings": [asdict(f) for f in findings]}
