"""Every script in bench/ (bench/explore/ included) imports and answers --help, and every module the scripts share
imports: none rots unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for p in (ROOT / "bench").rglob("*.py") if p.name != "__init__.py")
SCRIPTS = [p for p in FILES if 'if __name__ == "__main__":' in p.read_text()]
CHECK = """
import contextlib, importlib, io, runpy, sys
failed = []
for module in sys.argv[1:]:
    if module.startswith("import:"):
        try:
            importlib.import_module(module[len("import:"):])
        except Exception as exc:
            failed.append(f"{module}: {type(exc).__name__}: {exc}")
        continue
    out = io.StringIO()
    sys.argv = [module, "--help"]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(module, run_name="__main__")
        failed.append(f"{module}: --help did not exit")
    except SystemExit as exc:
        if exc.code not in (0, None) or "usage" not in out.getvalue().lower():
            failed.append(f"{module}: exit {exc.code}, {out.getvalue()[:200]!r}")
    except Exception as exc:
        failed.append(f"{module}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_script_imports_and_prints_its_help():
    def name(p: Path) -> str:
        return ".".join(p.relative_to(ROOT).with_suffix("").parts)

    modules = [name(p) if p in SCRIPTS else "import:" + name(p) for p in FILES]
    assert len(SCRIPTS) >= 15
    proc = subprocess.run([sys.executable, "-c", CHECK, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "", proc.stdout
