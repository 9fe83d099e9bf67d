# edgetune: two commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
APT_PACKAGES := openssh-server openssh-client gcc-aarch64-linux-gnu g++-aarch64-linux-gnu \
                gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf chromium chromium-driver
DEMO_DIR ?= demo-out

EMULATION_PACKAGES := qemu-user-static mmdebstrap iproute2

.PHONY: demo test install system-deps emulated-boards test-emulated bench pretrained gpu-check clean \
        dashboard-screenshot

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# System packages the tests need (sshd for the SSH tests, cross compilers for exports, Chromium and its driver for
# the dashboard's browser tests).
# Installed with apt when run as root; otherwise only checked.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (tests needing them are skipped)"; fi; \
	fi

test: install system-deps
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist loadscope -m "not emulated" --durations=20

# Emulated boards (Debian arm64 and armhf under qemu-user) and the armv7 TVM runtime a Pynq is provisioned with:
# built once per machine and cached outside the repository (`python -m toolkit.testing.emulated_board path [--arch
# armv7]` and `edgetune runtime info` say where). Needs root.
emulated-boards: install
	@$(MAKE) --no-print-directory system-deps APT_PACKAGES="$(EMULATION_PACKAGES)"
	$(PY) -m toolkit.testing.emulated_board build
	$(PY) -m toolkit.testing.emulated_board build --arch armv7
	$(VENV)/bin/edgetune runtime build --arch armv7

test-emulated: install system-deps emulated-boards
	$(PY) -m pytest -q -m emulated tests/emulated

demo: install
	$(PY) -m toolkit.demo --out $(DEMO_DIR)

# The dashboard's picture in the docs: the demo's run page in headless Chromium (runs the demo first if needed).
dashboard-screenshot: install system-deps
	@[ -d $(DEMO_DIR)/logs ] || $(PY) -m toolkit.demo --out $(DEMO_DIR)
	$(PY) -m toolkit.testing.browser screenshot docs/img/dashboard.png $(DEMO_DIR)/logs

# The benchmarks that take minutes (the reliability benchmark, and the headline tables rebuilt from the committed
# runs); each bench/*.py script runs one benchmark in full (see docs/benchmarks.md for their commands).
bench: install
	$(PY) -m bench.bench_reliability --write-docs
	$(PY) -m bench.headline --doc-only

# The transfer models shipped in toolkit/backends/vta/pretrained/, one per VTA preset, trained on the development
# set (ResNet-18 C2-C11) only; builds the exhaustive simulator logs they learn from first (resumable, ~1 h).
pretrained: install
	$(PY) -m bench.pretrain

# What a GPU machine needs to run edgetune's CUDA kernels and a whole-model export beside torch (docs/boards.md).
gpu-check: install
	rm -rf .gpu-check
	$(PY) -m bench.gpu_check prepare .gpu-check

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
