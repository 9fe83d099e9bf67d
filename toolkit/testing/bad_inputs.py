"""A table of bad inputs for the real CLI, each with the answer a user must get.

Every case runs ``python -m toolkit ARGS`` in a fresh folder holding the case's ``files``, with its own
inventory, state and cache folders. The right answer to a bad input is one line on stderr starting with
``error:`` that names the problem (``says``; beside it only warnings and the ``wait:`` lines that say what the
command waited for), exit code 2, no traceback, and every file in ``keep`` unchanged; a case with
``expect="ok"`` must succeed. The test suite runs every case; so does the reliability benchmark, which reports
tracebacks and silent successes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import WAIT

SMALL = "conv2d:H=14,W=14,CI=32,CO=32,K=3,S=1,P=1"
HEADER = json.dumps({"edgetune_log": 1, "edgetune": "0.1.0", "tvm": "0.27", "created": 0.0,
                     "task": {"workload": {"n": 1, "h": 14, "w": 14, "ci": 32, "co": 32, "kh": 3, "kw": 3, "sh": 1,
                                           "sw": 1, "ph": 1, "pw": 1, "name": None}, "board": "vta-fsim",
                              "board_type": "vta-fsim"}})
RECORD = {"workload": {"n": 1, "h": 14, "w": 14, "ci": 32, "co": 32, "kh": 3, "kw": 3, "sh": 1, "sw": 1, "ph": 1,
                       "pw": 1, "name": None}, "board": "vta-fsim", "tuner": "random", "trial": 0, "config": {},
          "index": 0, "costs": [1e-3]}
INVENTORY = "config/edgetune/inventory.toml"
PI = '[boards.p]\ntype = "rpi4"\nhost = "10.0.0.2"\n'
CONFIG = json.dumps({"tile_b": [1, 1], "tile_h": [14, 1], "tile_w": [14, 1], "tile_ci": [2, 1], "tile_co": [2, 1],
                     "oc_nthread": 1, "h_nthread": 1})
"""A valid VTA schedule of :data:`SMALL` on the Pynq preset."""
EMPTY_ZIP = b"PK\x05\x06" + bytes(18)
"""A zip archive with no member (what ``zipfile.ZipFile(path, "w").close()`` writes)."""


def _checkpoint() -> bytes:
    """The layout ``torch.save`` writes (a zip of ``NAME/data.pkl``, ``NAME/version``), without torch."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("sd/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("sd/version", b"3\n")
    return buf.getvalue()


@dataclass(frozen=True)
class Case:
    """One bad input and the answer it must get."""

    name: str
    argv: tuple[str, ...]
    says: str = ""
    files: dict[str, str | bytes] = field(default_factory=dict)
    keep: tuple[str, ...] = ()
    expect: str = "error"


@dataclass
class Outcome:
    """What the CLI did with one case."""

    case: Case
    rc: int
    stdout: str
    stderr: str
    seconds: float
    changed: list[str]

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stdout + self.stderr

    @property
    def errors(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if ln.startswith("error:")]

    @property
    def right(self) -> bool:
        """The answer the case asks for."""
        if self.traceback or self.changed:
            return False
        if self.case.expect == "ok":
            return self.rc == 0
        return (self.rc == 2 and len(self.errors) == 1 and self.case.says.lower() in self.errors[0].lower()
                and not [ln for ln in self.stderr.splitlines() if ln.strip() and not ln.startswith(("error:",
                                                                                                    "warning:", WAIT))])

    @property
    def silent_success(self) -> bool:
        return self.case.expect == "error" and self.rc == 0


def run_case(case: Case, folder: Path, timeout: float = 300.0) -> Outcome:
    """Run ``case`` in ``folder`` (made empty by the caller) through a fresh ``python -m toolkit``."""
    for rel, content in case.files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = {rel: (folder / rel).read_bytes() for rel in case.keep if (folder / rel).is_file()}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "XDG_STATE_HOME": str(folder / "state"),
           "XDG_CONFIG_HOME": str(folder / "config"), "XDG_CACHE_HOME": str(folder / "cache"),
           "EDGETUNE_INVENTORY": str(folder / INVENTORY), "EDGETUNE_BITSTREAM_CACHE": str(folder / "bits"),
           "EDGETUNE_KNOWN_HOSTS": str(folder / "known_hosts"), "COLUMNS": "200"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "toolkit", *case.argv], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    changed = [rel for rel, data in before.items()
               if not (folder / rel).is_file() or (folder / rel).read_bytes() != data]
    return Outcome(case, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0, changed)


def _log(*lines: object) -> str:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in (HEADER, *lines))


HOSTILE_LINES: dict[str, tuple[str, str]] = {
    "deep nesting": ("[" * 100000 + "]" * 100000, "nested too deeply"),
    "a 5000-digit integer": ('{"trial": ' + "9" * 5000 + "}", "corrupt"),
    "a NaN cost": (json.dumps({**RECORD, "costs": [float("nan")]}), "every cost must be between"),
    "a zero cost": (json.dumps({**RECORD, "costs": [0]}), "every cost must be between"),
    "a negative cost": (json.dumps({**RECORD, "costs": [-1]}), "every cost must be between"),
    "a string trial": (json.dumps({**RECORD, "trial": "x"}), "trial"),
    "a list config": (json.dumps({**RECORD, "config": []}), "config"),
    "an unknown error class": (json.dumps({**RECORD, "error": "melted"}), "unknown error"),
    "binary garbage": ("\x00\x01\x02 garbage", "not valid JSON"),
    "a JSON list": ("[1, 2, 3]", "JSON object"),
    "string features": (json.dumps({**RECORD, "features": {"f": "x"}}), "features"),
    "a negative index": (json.dumps({**RECORD, "index": -4}), "negative"),
}
BAD_WORKLOADS: dict[str, tuple[str, str]] = {
    "empty": ("", "unknown workload"),
    "no fields": ("conv2d:", "no fields"),
    "a field without value": ("conv2d:H=,W=7,CI=16,CO=16,K=3", "non-negative integer"),
    "a letter": ("conv2d:H=a,W=7,CI=16,CO=16,K=3", "non-negative integer"),
    "a negative field": ("conv2d:H=-1,W=7,CI=16,CO=16,K=3", "non-negative integer"),
    "a zero field": ("conv2d:H=0,W=7,CI=16,CO=16,K=3", "H must be >= 1"),
    "a float": ("conv2d:H=5.5,W=7,CI=16,CO=16,K=3", "non-negative integer"),
    "hex": ("conv2d:H=0x10,W=7,CI=16,CO=16,K=3", "non-negative integer"),
    "20 digits": ("conv2d:H=99999999999999999999,W=7,CI=16,CO=16,K=3", "at most 9 digits"),
    "Arabic-Indic digits": ("conv2d:H=٥٦,W=56,CI=64,CO=64,K=3", "non-negative integer"),
    "out of range": ("conv2d:N=720720,H=720720,W=720720,CI=720720,CO=720720,K=1", "must be <="),
    "a missing field": ("conv2d:H=7,W=7,CI=16,K=3", "missing field"),
    "a repeated field": ("conv2d:H=7,H=7,W=7,CI=16,CO=16,K=3", "given twice"),
    "an unknown field": ("conv2d:H=7,W=7,CI=16,CO=16,K=3,Z=1", "unknown workload field"),
    "no key=value": ("conv2d:H7,W=7,CI=16,CO=16,K=3", "KEY=VALUE"),
    "an empty output": ("conv2d:H=2,W=2,CI=16,CO=16,K=5,P=0", "empty output"),
    "an unknown layer": ("resnet18.C99", "resnet18"),
    "an unknown network": ("nosuchnet.L1", "unknown workload"),
    "an unknown network layer": ("resnet50.L999", "L999"),
    "a depthwise layer on VTA": ("mobilenet_v1.L2", "VTA runs dense convs; tune it on a CPU or GPU board"),
    "groups that do not divide the channels": ("conv2d:H=7,W=7,CI=16,CO=16,K=3,G=3", "not a multiple of the groups"),
    "semicolons": ("conv2d:H=7;W=7;CI=16;CO=16;K=3", "non-negative integer"),
}
TUNER_OPTIONS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "plan_size=0": ("xgb", ("plan_size=0",), "plan_size"),
    "plan_size=-5": ("xgb", ("plan_size=-5",), "plan_size"),
    "plan_size=abc": ("xgb", ("plan_size=abc",), "plan_size"),
    "epsilon=2.5": ("xgb", ("epsilon=2.5",), "epsilon"),
    "epsilon=nan": ("xgb", ("epsilon=nan",), "epsilon"),
    "precision=nan": ("ml2tuner", ("precision=nan",), "precision"),
    "precision=0": ("ml2tuner", ("precision=0",), "precision"),
    "alpha=-1": ("ml2tuner", ("alpha=-1",), "alpha"),
    "k_min > k_max": ("chameleon", ("k_min=64", "k_max=8"), "k_min"),
    "k_step=0": ("chameleon", ("k_step=0",), "k_step"),
    "episodes=0": ("chameleon", ("episodes=0",), "episodes"),
    "lr=-1": ("chameleon", ("lr=-1",), "lr"),
    "gamma=2": ("chameleon", ("gamma=2",), "gamma"),
    "rl_elite=1.5": ("chameleon+", ("rl_elite=1.5",), "rl_elite"),
    "an unknown option": ("xgb", ("nosuch=1",), "no option"),
    "no '='": ("xgb", ("plan_size",), "KEY=VALUE"),
    "a bad choice": ("xgb", ("loss=hinge",), "loss"),
    "a bad boolean": ("xgb", ("sa_persistent=maybe",), "sa_persistent"),
    "pop_size=1": ("ga", ("pop_size=1",), "pop_size"),
    "sa_steps=-1": ("xgb", ("sa_steps=-1",), "sa_steps"),
}

CASES: list[Case] = [
    # -- workloads -----------------------------------------------------------------------------------------------
    *[Case(f"tune: workload with {what}", ("tune", "-w", spec, "-n", "1", "--log", "L.jsonl"), says)
      for what, (spec, says) in BAD_WORKLOADS.items()],
    *[Case(f"space: workload with {what}", ("space", "-w", spec), says)
      for what, (spec, says) in list(BAD_WORKLOADS.items())[:8]],
    Case("tune: a VTA workload whose channels are not a multiple of 16",
         ("tune", "-w", "conv2d:H=14,W=14,CI=3,CO=16,K=3,S=1,P=1", "-n", "4"), "multiple of 16"),
    # -- tuners and their options --------------------------------------------------------------------------------
    *[Case(f"tune: option {what}", ("tune", "-w", SMALL, "-n", "2", "-t", tuner,
                                    *[a for o in opts for a in ("-o", o)]), says)
      for what, (tuner, opts, says) in TUNER_OPTIONS.items()],
    Case("tune: an unknown tuner", ("tune", "-w", SMALL, "-n", "1", "-t", "nosuch"), "unknown tuner"),
    Case("tune: a negative seed", ("tune", "-w", SMALL, "-n", "1", "--seed", "-1", "--log", "L.jsonl"), "seed"),
    Case("tune: a negative budget", ("tune", "-w", SMALL, "-n", "-1"), "trials"),
    Case("tune: --early-stopping 0", ("tune", "-w", SMALL, "-n", "4", "--early-stopping", "0"), "early"),
    Case("tune: --tvm-compat on a CPU board", ("tune", "-w", SMALL, "-n", "1", "-b", "local", "--tvm-compat"),
         "tvm-compat"),
    Case("tune: --vta-config on a CPU board", ("tune", "-w", SMALL, "-n", "1", "-b", "local", "--vta-config",
                                               "zcu102"), "vta-config"),
    Case("tune: an unknown VTA config", ("tune", "-w", SMALL, "-n", "1", "--vta-config", "nosuch"), "nosuch"),
    Case("tune: an unknown board", ("tune", "-w", SMALL, "-n", "1", "-b", "nosuch"), "unknown board"),
    Case("tune: a log of another workload", ("tune", "-w", "resnet18.C11", "-n", "4", "--log", "L.jsonl",
                                             "--resume"), "another task", files={"L.jsonl": _log(RECORD)},
         keep=("L.jsonl",)),
    Case("tune: an existing log without --resume", ("tune", "-w", SMALL, "-n", "4", "--log", "L.jsonl"),
         "already exists", files={"L.jsonl": _log(RECORD)}, keep=("L.jsonl",)),
    # -- logs ------------------------------------------------------------------------------------------------------
    *[Case(f"{cmd}: a log with {what}", (*argv,), says, files={"L.jsonl": _log(RECORD, line)}, keep=("L.jsonl",))
      for what, (line, says) in HOSTILE_LINES.items()
      for cmd, argv in (("report", ("report", "L.jsonl", "--out", "r.png")),
                        ("export", ("export", "--log", "L.jsonl", "--out", "x")),
                        ("tune --resume", ("tune", "-w", SMALL, "-n", "4", "--log", "L.jsonl", "--resume")))],
    Case("report: a header-only log", ("report", "L.jsonl", "--out", "r.png"), "no records",
         files={"L.jsonl": _log()}),
    Case("export: a header-only log", ("export", "--log", "L.jsonl", "--out", "x"), "no records",
         files={"L.jsonl": _log()}),
    Case("report: a missing log", ("report", "nosuch.jsonl", "--out", "r.png"), "does not exist"),
    Case("report: a log with a bad header", ("report", "L.jsonl", "--out", "r.png"), "header",
         files={"L.jsonl": '{"a": 1}\n'}),
    Case("report: an empty log", ("report", "L.jsonl", "--out", "r.png"), "empty", files={"L.jsonl": ""}),
    # -- paths -----------------------------------------------------------------------------------------------------
    Case("tune: --log is a folder", ("tune", "-w", SMALL, "-n", "1", "--log", "."), "folder"),
    Case("tune: --log /dev/null", ("tune", "-w", SMALL, "-n", "1", "--log", "/dev/null", "--resume"),
         "regular file"),
    Case("tune: --log /dev/full", ("tune", "-w", SMALL, "-n", "1", "--log", "/dev/full", "--resume"),
         "regular file"),
    Case("tune: --log under a file", ("tune", "-w", SMALL, "-n", "1", "--log", "f/L.jsonl"), "is a file",
         files={"f": "x"}, keep=("f",)),
    Case("tune: --resume on a text file", ("tune", "-w", SMALL, "-n", "1", "--log", "t.txt", "--resume"),
         "not an edgetune tuning log", files={"t.txt": "my notes"}, keep=("t.txt",)),
    Case("tune: --resume on a text file with lines", ("tune", "-w", SMALL, "-n", "1", "--log", "t.txt",
                                                      "--resume"), "not an edgetune tuning log",
         files={"t.txt": "my\nnotes\n"}, keep=("t.txt",)),
    Case("export: --out under a file", ("export", "--log", "L.jsonl", "--out", "f/x"), "f",
         files={"L.jsonl": _log(), "f": "x"}, keep=("f",)),
    Case("export: --out is a file", ("export", "--log", "L.jsonl", "--out", "f"), "file",
         files={"L.jsonl": _log(RECORD), "f": "x"}, keep=("f",)),
    Case("board list: --inventory under a file", ("board", "list", "--inventory", "f/inv.toml"), "inventory",
         files={"f": "x"}, keep=("f",)),
    Case("board list: a mistyped --inventory", ("board", "list", "--inventory", "nosuch.toml"), "does not exist"),
    Case("vta compile: --out is a folder", ("vta", "compile", "-w", SMALL, "--config", CONFIG, "--out", "."),
         "directory"),
    # -- exports ---------------------------------------------------------------------------------------------------
    Case("run: a folder that is no export", ("run", ".", "-b", "vta-fsim"), "not an edgetune export"),
    Case("run: a missing folder", ("run", "nosuch", "-b", "vta-fsim"), "not an edgetune export folder"),
    Case("run: a manifest that is a list", ("run", "e", "-b", "vta-fsim"), "JSON object",
         files={"e/manifest.json": "[]"}),
    Case("run: a deep manifest", ("run", "e", "-b", "vta-fsim"), "nested too deeply",
         files={"e/manifest.json": "[" * 100000 + "]" * 100000}),
    Case("run: a manifest with bad JSON", ("run", "e", "-b", "vta-fsim"), "unreadable", files={"e/manifest.json": "{"}),
    Case("run: a manifest without kernels", ("run", "e", "-b", "vta-fsim"), "missing key",
         files={"e/manifest.json": "{}"}),
    # -- boards and the inventory ----------------------------------------------------------------------------------
    Case("board add: a name with a newline", ("board", "add", "b\n", "--type", "rpi4", "--host", "10.0.0.2"),
         "board name"),
    Case("board add: a name of dots", ("board", "add", "..", "--type", "rpi4", "--host", "10.0.0.2"),
         "must start with a letter or digit"),
    Case("board add: a name with a slash", ("board", "add", "a/b", "--type", "rpi4", "--host", "10.0.0.2"),
         "board name"),
    Case("board add: a built-in name", ("board", "add", "vta-fsim", "--type", "vta-fsim"), "built-in"),
    Case("board add: an empty host", ("board", "add", "b", "--type", "rpi4", "--host", ""), "host"),
    Case("board add: a host with spaces", ("board", "add", "b", "--type", "rpi4", "--host", "a b"), "host"),
    Case("board add: a user with a space", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2", "--user",
                                            "a b"), "not a login name"),
    Case("board add: a public key as --key", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2", "--key",
                                              "id.pub"), "is a public key",
         files={"id.pub": "ssh-ed25519 AAAAC3Nz x\n"}),
    Case("board add: a private key others can read", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2",
                                                      "--key", "id"), "chmod 600",
         files={"id": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbg==\n-----END OPENSSH PRIVATE KEY-----\n"}),
    Case("board add: a file that is no key as --key", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2",
                                                       "--key", "notes.txt"), "not an SSH private key",
         files={"notes.txt": "hello\n"}),
    Case("board add: a host that is an option", ("board", "add", "b", "--type", "rpi4", "--host",
                                                 "-oProxyCommand=sh"), "host"),
    Case("board add: an unknown type", ("board", "add", "b", "--type", "nosuch", "--host", "10.0.0.2"),
         "unknown board type"),
    Case("board add: port 99999", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2", "--port",
                                   "99999"), "port"),
    Case("board add: port 0", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2", "--port", "0"), "port"),
    Case("board add: a missing key file", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2", "--key",
                                           "nosuch"), "key"),
    Case("board add: a tag with a space", ("board", "add", "b", "--type", "rpi4", "--host", "10.0.0.2", "--tag",
                                           "a b"), "tag"),
    Case("board add: twice", ("board", "add", "p", "--type", "rpi4", "--host", "10.0.0.2"), "already registered",
         files={INVENTORY: PI}, keep=(INVENTORY,)),
    Case("board show: an unknown board", ("board", "show", "nosuch"), "unknown board"),
    Case("board remove: an unknown board", ("board", "remove", "nosuch"), "unknown board"),
    Case("board list: a corrupt inventory", ("board", "list"), "corrupt", files={INVENTORY: "[boards\n"},
         keep=(INVENTORY,)),
    Case("board list: an inventory with port 99999", ("board", "list"), "port",
         files={INVENTORY: PI + "port = 99999\n"}, keep=(INVENTORY,)),
    Case("board list: an inventory naming vta-fsim", ("board", "list"), "built-in",
         files={INVENTORY: '[boards.vta-fsim]\ntype = "vta-fsim"\n'}, keep=(INVENTORY,)),
    Case("board list: an inventory with a string port", ("board", "list"), "port",
         files={INVENTORY: PI + 'port = "22"\n'}, keep=(INVENTORY,)),
    Case("board list: an inventory with an empty host", ("board", "list"), "host",
         files={INVENTORY: '[boards.p]\ntype = "rpi4"\nhost = ""\n'}, keep=(INVENTORY,)),
    Case("board list: an inventory with an unknown key", ("board", "list"), "unknown key",
         files={INVENTORY: PI + 'colour = "red"\n'}, keep=(INVENTORY,)),
    Case("board check: a board on a closed port", ("board", "check", "p"), "connection refused",
         files={INVENTORY: '[boards.p]\ntype = "rpi4"\nhost = "127.0.0.1"\nport = 1\n'}),
    Case("board provision: --remote-dir with shell syntax", ("board", "provision", "p", "--dry-run", "--remote-dir",
                                                             "~/x';id"), "--remote-dir", files={INVENTORY: PI}),
    Case("board provision: --python with shell syntax", ("board", "provision", "p", "--dry-run", "--python",
                                                          "python3;id"), "--python", files={INVENTORY: PI}),
    Case("board provision: a relative --remote-dir", ("board", "provision", "p", "--dry-run", "--remote-dir",
                                                      "rel/dir"), "--remote-dir", files={INVENTORY: PI}),
    Case("board provision: an unknown board", ("board", "provision", "nosuch", "--dry-run"), "unknown board"),
    # -- tracker, cluster, bitstreams ------------------------------------------------------------------------------
    Case("tune: --cluster that is no HOST:PORT", ("tune", "-w", SMALL, "-n", "1", "--cluster", "nohost"),
         "HOST:PORT"),
    Case("tune: --cluster where no head answers", ("tune", "-w", SMALL, "-n", "1", "--cluster", "127.0.0.1:1"),
         "no Ray head answers"),
    Case("cluster join: an address that is no HOST:PORT", ("cluster", "join", "host:port", "--expose"), "HOST:PORT"),
    Case("tracker start: port 70000", ("tracker", "start", "--port", "70000"), "port"),
    Case("dashboard: a folder that does not exist", ("dashboard", "nosuch"), "does not exist"),
    Case("dashboard: a device", ("dashboard", "/dev/null"), "not a folder or a regular file"),
    Case("dashboard: port 70000", ("dashboard", ".", "--port", "70000"), "port"),
    Case("tracker start: port -1", ("tracker", "start", "--port", "-1"), "port"),
    Case("bitstream add: a missing file", ("bitstream", "add", "nosuch.bit", "--target", "pynq", "--hw-ver",
                                           "0.0.2"), "does not exist"),
    Case("bitstream add: --target ../..", ("bitstream", "add", "1x16_i8w8a32_15_15_18_17.bit", "--target", "../..",
                                           "--hw-ver", "0.0.2"), "target",
         files={"1x16_i8w8a32_15_15_18_17.bit": b"\0bits"}),
    Case("bitstream add: a bad hardware version", ("bitstream", "add", "1x16_i8w8a32_15_15_18_17.bit", "--target",
                                                   "pynq", "--hw-ver", "1.0"), "hardware version",
         files={"1x16_i8w8a32_15_15_18_17.bit": b"\0bits"}),
    Case("bitstream add: a name that is no bitstream name", ("bitstream", "add", "my.bit", "--target", "pynq",
                                                             "--hw-ver", "0.0.2"), "my", files={"my.bit": b"\0"}),
    # -- vta, space, bench -----------------------------------------------------------------------------------------
    Case("vta compile: a config that is no JSON", ("vta", "compile", "-w", SMALL, "--config", "{tile"), "config"),
    Case("vta compile: a config with Infinity", ("vta", "compile", "-w", SMALL, "--config", '{"tile_h": Infinity}'),
         "tile_h"),
    Case("vta compile: an unknown knob", ("vta", "compile", "-w", SMALL, "--config", '{"nosuch": 1}'), "nosuch"),
    Case("vta compile: a CPU board", ("vta", "compile", "-w", SMALL, "--config", "{}", "--board", "local"),
         "not a VTA board"),
    Case("vta run: --shift 99", ("vta", "run", "-w", SMALL, "--config", CONFIG, "--shift", "99"), "shift"),
    Case("space: --exhaustive on a CPU board", ("space", "-w", SMALL, "--board", "local", "--exhaustive"),
         "builds"),
    Case("space: an unknown board", ("space", "-w", SMALL, "--board", "nosuch"), "unknown board"),
    Case("space: a huge VTA space", ("space", "-w", "conv2d:H=4096,W=4096,CI=1024,CO=1024,K=3,S=1,P=1"),
         expect="ok"),
    Case("bench: a tuner twice", ("bench", "-w", "resnet18.C11", "-t", "xgb,xgb", "-n", "4", "--out", "b.json"),
         "twice"),
    Case("bench: an unknown tuner", ("bench", "-w", "resnet18.C11", "-t", "xgb,nosuch", "-n", "4", "--out",
                                     "b.json"), "unknown tuner"),
    Case("bench: a reference not among the tuners", ("bench", "-w", "resnet18.C11", "-t", "random", "-n", "4",
                                                     "--out", "b.json"), "reference"),
    Case("bench: zero trials", ("bench", "-w", "resnet18.C11", "-t", "xgb", "-n", "0", "--out", "b.json"),
         "trials"),
    Case("bench: --cache-dir under a file", ("bench", "-w", "resnet18.C11", "-t", "xgb", "-n", "4", "--out",
                                             "b.json", "--cache-dir", "f/c"), "f", files={"f": "x"}, keep=("f",)),
    Case("bench: no --out", ("bench", "-w", "resnet18.C11", "-t", "xgb", "-n", "4"), "give --out"),
    Case("tune-model: --more (a network has one budget)", ("tune-model", "resnet18", "--more", "2"), "--more"),
    Case("export: -w a label the log does not have", ("export", "--log", "L.jsonl", "-w", "nosuch.L9", "--out", "x"),
         "has no workload 'nosuch.L9'", files={"L.jsonl": _log(RECORD)}, keep=("L.jsonl",)),
    Case("tuners: an unknown tuner", ("tuners", "nosuch"), "unknown tuner"),
    # -- import-autotvm ------------------------------------------------------------------------------------------
    Case("import-autotvm: a missing file", ("import-autotvm", "nosuch.log", "--out", "o"), "nosuch.log"),
    Case("import-autotvm: a folder", ("import-autotvm", "d", "--out", "o"), "d", files={"d/x": "x"}),
    Case("import-autotvm: a line that is no JSON", ("import-autotvm", "a.log", "--out", "o"), "not JSON",
         files={"a.log": "garbage\n"}),
    Case("import-autotvm: an edgetune log", ("import-autotvm", "L.jsonl", "--out", "o"), "neither an AutoTVM",
         files={"L.jsonl": _log(RECORD)}, keep=("L.jsonl",)),
    Case("import-autotvm: a CPU board", ("import-autotvm", "a.log", "--board", "local", "--out", "o"),
         "imported for VTA boards", files={"a.log": ""}),
    Case("import-autotvm: a log of another target", ("import-autotvm", "a.log", "--out", "o"),
         "nothing of a.log imports",
         files={"a.log": json.dumps({"input": ["llvm -keys=cpu", "conv2d_NCHWc.x86", [], {}], "config": {
             "index": 1, "entity": []}, "result": [[0.001], 0, 1.0, 1], "version": 0.2}) + "\n"}),
    Case("export: --out inside an export", ("export", "--log", "L.jsonl", "--out", "ex/inner"), "lies inside",
         files={"L.jsonl": _log(RECORD), "ex/manifest.json": "{}"}, keep=("ex/manifest.json",)),
    Case("import-autotvm: --out is a file", ("import-autotvm", "a.log", "--out", "f"), "is a file",
         files={"a.log": "", "f": "x"}, keep=("f",)),
    # -- model files ---------------------------------------------------------------------------------------------
    *[Case(f"{' '.join(cmd[:2])}: {what} .pt2", (*cmd, "m.pt2", *rest), "not a torch.export archive",
           files={"m.pt2": content}, keep=("m.pt2",))
      for what, content in (("an empty", b""), ("a garbage", b"garbage\n"), ("an empty-zip", EMPTY_ZIP))
      for cmd, rest in ((("workloads", "extract"), ()), (("tune", "--model"), ("-n", "1", "--log", "L.jsonl")))],
    Case("workloads extract: a torch.save state_dict", ("workloads", "extract", "sd.pt"), "torch.save checkpoint",
         files={"sd.pt": _checkpoint()}),
    Case("workloads extract: a Python file without its factory", ("workloads", "extract", "net.py"),
         "name the function", files={"net.py": "def make():\n    pass\n"}),
    Case("workloads extract: a text file as a model", ("workloads", "extract", "m.txt"), "not a model file",
         files={"m.txt": "hello\n"}, keep=("m.txt",)),
    Case("workloads extract: a Conv3d model given an NCHW input", ("workloads", "extract", "c3.py:make",
                                                                   "--input-shape", "1,3,8,8"),
         "Conv3d is not supported", files={"c3.py": "import torch\n\n\ndef make():\n    return "
                                                   "torch.nn.Sequential(torch.nn.Conv3d(3, 8, 3))\n"}),
    Case("export: a one-channel model traced at the default input shape", ("export", "--model", "one.py:make", "-b",
                                                                           "local", "--out", "o"),
         "pass the --input-shape", files={"one.py": "import torch\n\n\ndef make():\n    return "
                                                    "torch.nn.Conv2d(1, 16, 3)\n"}),
    Case("export: --out where no folder can be created", ("export", "--model", "resnet18", "-b", "local", "--out",
                                                         "/proc/edgetune-export"), "takes no new folders"),
    Case("workloads extract: file.py:factory importing its sibling module", ("workloads", "extract",
                                                                         "pkg/net.py:make", "--input-shape",
                                                                         "1,3,16,16"),
         files={"pkg/net.py": "import torch\nfrom helper import block\n\n\ndef make():\n    return block()\n",
                "pkg/helper.py": "import torch\n\n\ndef block():\n    return torch.nn.Conv2d(3, 8, 3)\n"},
         expect="ok"),
    *[Case(f"tracker {cmd}: XDG_STATE_HOME is a file", ("tracker", cmd), "is not a folder", files={"state": "x"},
           keep=("state",)) for cmd in ("status", "start")],
    Case("board list: an inventory that is not text", ("board", "list"), "not a text (TOML) file",
         files={INVENTORY: b"\xb6\x00\xff binary"}, keep=(INVENTORY,)),
]
"""Every case of the bad-input suite."""
