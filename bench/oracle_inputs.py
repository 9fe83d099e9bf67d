"""An int8 VTA model export's programs with their inputs, for the real TVM v0.18 fsim.

    python -m bench.oracle_inputs EXPORT OUT [--seed 0]

Writes each segment's program (``vta<k>.vtaprog``) and a same-named ``.npz`` of its arena's arrays (every layer's
packed constants and the tensors it reads from before it, from the int8 reference run on one seeded input) into
OUT, where ``../shared/tools/fsim_oracle/run.py CHECKOUT --programs OUT`` runs them on the real fsim and compares
output bytes, counters and encodings with edgetune's simulator.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def write(export: Path, out: Path, seed: int = 0) -> list[str]:
    """Write the programs and their ``.npz`` inputs; the segment names."""
    from toolkit.backends.vta.model import load_vta_model
    from toolkit.vta.graph import execute
    from toolkit.vta.reference import pack_input
    from toolkit.vta.segments import arena_inputs, vta_segments

    if not (export / "manifest.json").is_file():
        raise SystemExit(f"{export} is not an export folder (no manifest.json); give an int8 VTA model export")
    manifest = json.loads((export / "manifest.json").read_text())
    vm = load_vta_model(export, manifest["model"], manifest["hardware"])
    x = np.random.default_rng(seed).standard_normal(vm.graph.input_shape).astype(np.float32)
    tensors = execute(vm.graph, vm.arrays, x).tensors
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for segment in vta_segments(vm.graph):
        external = {n: tensors[n].data if tensors[n].packed else pack_input(tensors[n].data, vm.hw)
                    for n in segment.external()}
        vm.programs[segment.name].save(out / f"{segment.name}.vtaprog")
        np.savez(out / f"{segment.name}.npz", **arena_inputs(segment, external, vm.packed))
        names.append(segment.name)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", type=Path, help="an int8 VTA model export folder")
    parser.add_argument("out", type=Path, help="where the programs and their .npz go")
    parser.add_argument("--seed", type=int, default=0, help="the seeded input the tensors come from")
    args = parser.parse_args(argv)
    for name in write(args.export, args.out, args.seed):
        print(f"{args.out / name}.vtaprog")
    return 0


if __name__ == "__main__":
    sys.exit(main())
