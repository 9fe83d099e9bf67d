"""The README sections of TVM exports: how to call a kernel library, and how to run a whole model, with TVM's
runtime alone (no edgetune on the board)."""

from __future__ import annotations

from typing import Any

from toolkit.manifest import ExportManifest


def kernel_usage(m: ExportManifest, backend: Any) -> str:
    """How to load and call the export's kernel libraries on the board."""
    k0 = m.kernels[0]
    args = k0.signature["args"]
    return (
        "## Calling a library on the board (needs only the TVM runtime)\n\n"
        "```python\nimport numpy as np, tvm\n"
        f"mod = tvm.runtime.load_module(\"{k0.files['library']}\")\n"
        f"dev = tvm.{backend.device}(0)\n"
        f"data = tvm.runtime.tensor(np.zeros({tuple(args[0]['shape'])}, \"float32\"), dev)     # NCHW\n"
        f"weight = tvm.runtime.tensor(np.zeros({tuple(args[1]['shape'])}, \"float32\"), dev)   "
        f"# {args[1]['layout']}\n"
        f"out = tvm.runtime.tensor(np.zeros({tuple(args[2]['shape'])}, \"float32\"), dev)      # NCHW\n"
        "mod[\"main\"](data, weight, out)\n```\n\n"
        f"Weights are {args[1]['layout']} (`weight_oihw.transpose(1, 2, 3, 0)` for IHWO). "
        "Over RPC: `remote.upload(path)`, then `remote.load_module(name)`.\n")


def model_usage(m: ExportManifest, backend: Any) -> str:
    """How to load and run the exported model on the board with TVM's runtime alone."""
    model = m.model or {}
    spec = model["inputs"][0]
    return (
        "## Running the model on the board (needs only the TVM runtime and numpy)\n\n"
        "```python\nimport numpy as np, tvm\n"
        "from tvm.runtime.vm import VirtualMachine   # in TVM's runtime (tvm.relax needs the compiler)\n"
        f"lib = tvm.runtime.load_module(\"{model['files']['model']}\")\n"
        f"dev = tvm.{backend.device}(0)\nvm = VirtualMachine(lib, dev)\n"
        f"x = np.zeros({tuple(spec['shape'])}, \"{spec['dtype']}\")   # the input, NCHW\n"
        "out = vm[\"main\"](tvm.runtime.tensor(x, dev))\n"
        "print(out.numpy().shape)   # a model of several outputs returns a tuple of tensors\n```\n\n"
        "The weights are inside the library. Over RPC: `remote.upload(path)`, `lib = remote.load_module(name)`, "
        f"then `VirtualMachine(lib, remote.{backend.device}())`.\n")
