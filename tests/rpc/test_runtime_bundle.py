"""Runtime bundles for armv7 boards: what provisioning refuses before it touches a board, and the C++ headers
edgetune writes for TVM's runtime sources, compiled and exercised here with the host's g++."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tvm_ffi

from toolkit.cli.app import app
from toolkit.errors import BoardError
from toolkit.rpc import runtime_build
from toolkit.rpc.runtime_bundle import SUPPORT_DIR, TARGETS, bundle_dir, elf_kind, require, verify

runner = CliRunner()
HOST_LIB = Path(tvm_ffi.__file__).parent / "lib" / "libtvm_ffi.so"


def _fake_bundle(folder: Path, lib: Path) -> None:
    """A bundle laid out as ``edgetune runtime build`` lays it out, holding ``lib`` as its library."""
    (folder / "python/tvm_ffi/lib").mkdir(parents=True)
    shutil.copy(lib, folder / "python/tvm_ffi/lib/libtvm_ffi.so")
    (folder / "python/tvm_ffi/__init__.py").write_text("")
    files = {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(folder.rglob("*")) if p.is_file()}
    with tarfile.open(folder / "runtime.tar.gz", "w:gz") as tar:
        tar.add(folder / "python", arcname="python")
    archive = hashlib.sha256((folder / "runtime.tar.gz").read_bytes()).hexdigest()
    (folder / "bundle.json").write_text(json.dumps({"python": "3.11", "tvm": "0.27", "archive_sha256": archive,
                                                    "files": files}))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGETUNE_RUNTIME_CACHE", str(tmp_path / "runtime"))
    return tmp_path / "runtime"


def test_elf_kind_reads_class_and_machine(tmp_path):
    assert elf_kind(HOST_LIB) == (2, 62)                      # this machine's x86_64 build
    (tmp_path / "text.so").write_text("not an ELF file")
    assert elf_kind(tmp_path / "text.so") is None


def test_a_bundle_of_another_architecture_or_tampered_is_refused(cache):
    folder = bundle_dir(TARGETS["armv7"])
    _fake_bundle(folder, HOST_LIB)
    with pytest.raises(BoardError, match=r"libtvm_ffi.so is 64-bit x86_64, not 32-bit ARM for armv7; rebuild it "
                                         r"with `edgetune runtime build --arch armv7`"):
        require("armv7")
    lib = folder / "python/tvm_ffi/lib/libtvm_ffi.so"
    data = lib.read_bytes()
    lib.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(BoardError, match="differs from its recorded sha256"):
        verify(folder, TARGETS["armv7"])
    (folder / "bundle.json").write_text("{")
    with pytest.raises(BoardError, match="no runtime bundle"):
        verify(folder, TARGETS["armv7"])


def test_provisioning_an_armv7_board_needs_its_runtime_first(cache):
    assert runner.invoke(app, ["board", "add", "pz", "--type", "pynq-z1", "--host", "10.0.0.9"]).exit_code == 0
    r = runner.invoke(app, ["board", "provision", "pz"])       # stops before it connects or needs a tracker
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "edgetune runtime build --arch armv7" in r.output and len(r.output.strip().splitlines()) == 1
    _fake_bundle(bundle_dir(TARGETS["armv7"]), HOST_LIB)
    r = runner.invoke(app, ["board", "provision", "pz"])
    assert r.exit_code == 2 and "not 32-bit ARM" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = runner.invoke(app, ["runtime", "info"])
    assert r.exit_code == 2 and "not 32-bit ARM" in r.output
    assert runner.invoke(app, ["runtime", "build", "--arch", "sparc"]).exit_code == 2


def test_the_32_bit_layout_fix_still_applies_to_the_installed_tvm_ffi():
    header = (Path(tvm_ffi.__file__).parent / "cython" / "tvm_ffi_python_object.h").read_text()
    assert runtime_build.PY_HEADER_PATCH[0] in header


def test_python_version_of_a_sysroot(tmp_path):
    inc = tmp_path / "usr/include/python3.10"
    inc.mkdir(parents=True)
    (inc / "patchlevel.h").write_text("#define PY_MAJOR_VERSION\t3\n#define PY_MINOR_VERSION\t10\n")
    assert runtime_build.python_of(tmp_path) == "3.10"
    with pytest.raises(BoardError, match="no Python headers"):
        runtime_build.python_of(tmp_path / "usr")


SUPPORT_CHECK = r'''
#include <tvm/support/io.h>
#include <tvm/support/serializer.h>
#include "support/arena.h"
#include "support/base64.h"
#include "support/bytes_io.h"
#include "support/ring_buffer.h"
#include "support/utils.h"
#include <cstdio>
#include <string>
#include <vector>
using namespace tvm::support;
int main() {
  std::string bytes;
  BytesOutStream out(&bytes);
  out.Write(std::string("pynq"));
  out.Write(std::vector<int64_t>{1, -2, 3});
  out.Write(static_cast<uint32_t>(0xDEADBEEF));
  BytesInStream in(bytes);
  std::string s; std::vector<int64_t> v; uint32_t u = 0;
  if (!in.Read(&s) || !in.Read(&v) || !in.Read(&u) || in.Read(&u)) return 1;
  if (s != "pynq" || v.size() != 3 || v[1] != -2 || u != 0xDEADBEEF) return 2;
  if (bytes.size() != 8 + 4 + 8 + 24 + 4) return 3;          // uint64 counts, raw little-endian values
  for (size_t n = 0; n < 7; ++n) {                           // base64 of every padding case, and back
    std::string text, raw = std::string("edgetune").substr(0, n);
    BytesOutStream sink(&text);
    Base64OutStream enc(&sink);
    enc.Write(raw.data(), raw.size());
    enc.Finish();
    BytesInStream src(text);
    Base64InStream dec(&src);
    dec.InitPosition();
    std::string back(n + 3, '\0');
    if (dec.Read(&back[0], n + 3) != n || back.substr(0, n) != raw) return 10 + static_cast<int>(n);
    if (n == 6) std::printf("%s\n", text.c_str());
  }
  RingBuffer ring;
  std::string got;
  for (int round = 0; round < 50; ++round) {
    std::string chunk(37 + round, static_cast<char>('a' + round % 26));
    ring.Write(chunk.data(), chunk.size());
    size_t n = ring.ReadWithCallback([&](const void* p, size_t k) { got.append(static_cast<const char*>(p), k / 2);
                                                                   return k / 2; }, ring.bytes_available());
    (void)n;
  }
  while (ring.bytes_available()) {
    char c; ring.Read(&c, 1); got.push_back(c);
  }
  size_t total = 0;
  for (int round = 0; round < 50; ++round) total += 37 + round;
  if (got.size() != total || got[0] != 'a' || got.back() != static_cast<char>('a' + 49 % 26)) return 4;
  size_t wrote = ring.WriteWithCallback([](void* p, size_t k) { static_cast<char*>(p)[0] = 'z'; return size_t(1); }, 8);
  if (wrote != 1 || ring.bytes_available() != 1) return 5;
  Arena arena;
  int* xs = arena.allocate_<int>(100);
  xs[99] = 7;
  arena.RecycleAll();
  if (!StartsWith(std::string("RPCSessionTimeoutError: x"), "RPCSessionTimeoutError: ")) return 6;
  if (!IsNumber(std::string("12")) || IsNumber(std::string("1a")) || IsNumber(std::string(""))) return 7;
  std::printf("ok\n");
  return 0;
}
'''


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_the_support_headers_round_trip_streams_base64_and_the_ring_buffer(tmp_path):
    """The headers TVM's runtime sources get from edgetune, compiled for this machine and run."""
    src = tmp_path / "check.cc"
    src.write_text(SUPPORT_CHECK)
    ffi = Path(tvm_ffi.__file__).parent
    build = subprocess.run(["g++", "-std=c++17", "-O1", f"-I{SUPPORT_DIR / 'include'}", f"-I{SUPPORT_DIR / 'src'}",
                            f"-I{ffi / 'include'}", f"-I{ffi / '3rdparty/dlpack/include'}", str(src), "-o",
                            str(tmp_path / "check"), f"-L{ffi / 'lib'}", "-ltvm_ffi", f"-Wl,-rpath,{ffi / 'lib'}"],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True)
    assert run.returncode == 0, (run.returncode, run.stdout)
    assert run.stdout.split() == ["ZWRnZXR1", "ok"]              # base64 of "edgetu", as Python's base64 says
