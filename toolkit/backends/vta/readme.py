"""The README sections of VTA exports: how to drive a kernel's program, and how to run a whole int8 model."""

from __future__ import annotations

from typing import Any

from toolkit.manifest import ExportManifest


def kernel_usage(m: ExportManifest, backend: Any) -> str:
    """How to drive the export's VTA programs."""
    k0 = m.kernels[0]
    return (
        f"## Driving a VTA program ({m.bitstream})\n\n"
        "Per workload: `.vtaprog` (edgetune's program file: hardware config, DRAM layout, instructions, "
        "micro-ops, crc32), the raw instruction stream `.insns.bin` and micro-op image `.uops.bin` exactly as "
        "the FPGA reads them, and `.json` with the packing layouts, the requantisation (shift, bias, clip) and "
        "the byte offset of each DRAM region.\n\n"
        "```python\nfrom toolkit.vta.program import Program\nfrom toolkit.vta.sim import simulate\n"
        f"prog = Program.load(\"{k0.files['program']}\")\n"
        "res = simulate(prog, {\"inp\": packed_data, \"wgt\": packed_weight})  # or the board agent's "
        "edgetune.vta.run\n"
        "out = res.outputs[\"out\"].reshape(prog.regions[\"out\"].shape)\n```\n\n"
        "Pack with `toolkit.vta.reference.pack_input` / `pack_weight`, unpack with `unpack_output`. Without "
        "edgetune: place each input at its region offset in one DRAM buffer, the micro-ops at the `uop` region, "
        "and run the instruction stream; instruction DRAM addresses are in element units relative to it.\n")


def model_usage(m: ExportManifest, backend: Any) -> str:
    """How to run the exported int8 model (here, in the simulator, or on a board)."""
    model = m.model or {}
    spec = model["inputs"][0]
    return (
        f"## Running the int8 model ({m.bitstream})\n\n"
        f"`{model['files']['model']}` is the int8 graph (layers in order, each tensor's power-of-two scale, "
        f"every conv's shift and ReLU), `{model['files']['weights']}` its arrays (int8 weights, int32 biases at "
        "the accumulator scale, a VTA conv's both stored packed in VTA's layout; the float32 classifier) and "
        "`programs/` one VTA program per run of consecutive VTA layers (one kernel call, one DRAM arena); the "
        "other layers run in numpy on the board's CPU.\n\n"
        "```python\nimport json\nfrom pathlib import Path\nimport numpy as np\nfrom toolkit.backends.vta.model "
        "import load_vta_model, run_vta_model\n"
        "m = json.load(open(\"manifest.json\"))\n"
        "vm = load_vta_model(Path(\".\"), m[\"model\"], m[\"hardware\"])\n"
        f"x = np.zeros({tuple(spec['shape'])}, \"float32\")   # the input, NCHW\n"
        "run = run_vta_model(vm, [x])   # the VTA layers in edgetune's simulator\n"
        "print(run.outputs[0][0].shape, run.bit_exact)\n```\n\n"
        "On a board, `edgetune run FOLDER --board BOARD` sends the graph, arrays and programs to the board "
        "agent's `edgetune.vta.run_model` in one call: the VTA layers run on its device, the rest in numpy on "
        "the board. "
        "`edgetune run FOLDER --board BOARD --check` also compares the output with the PyTorch "
        "model's (top-1 agreement and cosine similarity).\n")
