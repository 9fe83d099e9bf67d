"""A whole-model build checked against PyTorch before it is exported, and the first op where it differs.

:func:`check_build` runs the built library once on a seeded input with the Relax VM, here, when the board's
code runs on this machine (its architecture, a CPU target this CPU has), else on the board the export is for
when it is provisioned (over TVM RPC: an emulated board in the tests), and compares the outputs with
PyTorch's (:func:`~toolkit.tuning.core.check.compare_model_outputs`, the tolerance ``edgetune run`` uses).
Where they differ, :func:`first_difference` bisects the model's graph: each candidate prefix (the graph cut
after one op) is exported, built with the same conv plans and compared with that op's PyTorch value, so the
error names the first op whose output is wrong (a conv kernel, or an operator TVM's importer got wrong).
"""

from __future__ import annotations

import copy
import platform
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from toolkit.boards import Board, BoardProfile
from toolkit.errors import BoardError, ExportError
from toolkit.manifest import ConvPlan

ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def why_not_here(profile: BoardProfile) -> str | None:
    """Why a model built for ``profile`` cannot run on this machine (``None``: it can)."""
    if profile.family != "cpu":
        return f"{profile.name} runs it on a {profile.family.upper()} GPU, which this machine lacks"
    here = ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())
    arch = ARCH_ALIASES.get(profile.arch.lower(), profile.arch.lower())
    if arch != here:
        return f"it is built for {profile.arch}, this machine is {here}"
    import tvm

    mcpu = str(profile.target.get("mcpu", ""))
    if mcpu and mcpu != tvm.target.codegen.llvm_get_system_cpu():
        return f"it is built for CPU {mcpu}, this machine's is {tvm.target.codegen.llvm_get_system_cpu()}"
    return None


def run_library(library: bytes, x: np.ndarray) -> list[np.ndarray]:
    """The outputs of a built Relax model (a shared library's bytes) on ``x``, run here."""
    import tvm
    from tvm import relax

    with tempfile.TemporaryDirectory(prefix="edgetune-check-") as tmp:
        path = Path(tmp) / "model.so"
        path.write_bytes(library)
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
        return flatten(vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu())))


def flatten(value: Any) -> list[np.ndarray]:
    """A VM result (a tensor, or a tuple of them) as a list of numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for v in value for a in flatten(v)]


def board_run(board: Board, device: str) -> Callable[[bytes, np.ndarray], list[np.ndarray]]:
    """A function running a built Relax model (a shared library's bytes) on ``board`` over TVM RPC, one session
    per call; :class:`~toolkit.errors.BoardError` naming the stage that failed."""
    def run(library: bytes, x: np.ndarray) -> list[np.ndarray]:
        import tvm
        from tvm import relax

        from toolkit.backends.tvm.rpc_runner import RPCRunner

        runner = RPCRunner(board, session_timeout=600)
        name = f"edgetune-check-{uuid.uuid4().hex[:12]}.so"
        try:
            with runner.session(120) as (sess, at):
                at("upload")
                sess.upload(bytearray(library), name)
                at("load")
                dev = sess.device(device, 0)
                vm = relax.VirtualMachine(sess.load_module(name), dev)
                at("run")
                return flatten(vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x), dev)))
        finally:
            runner.close()
    return run


def check_build(library: bytes, program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], x: np.ndarray,
                reference: list[np.ndarray], *, board: Board | None = None, device: str = "cpu",
                on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The built model against PyTorch's ``reference`` outputs on ``x``: the check's record for the manifest;
    :class:`ExportError` naming the first op that differs when it is wrong. It runs here when this machine runs
    the board's code, else on ``board`` (a provisioned board) over RPC; ``{"checked": False, ...}`` with why when
    it can run in neither place."""
    from toolkit.rpc.agent_control import board_state
    from toolkit.tuning.core.check import compare_model_outputs

    why = why_not_here(profile)
    if why is None:
        run, where_run = run_library, "here"
    elif board is not None and board_state(board.name) is not None:
        run, where_run = board_run(board, device), f"on board {board.name}"
        if on_step is not None:
            on_step(f"the model on board {board.name} over RPC (not here: {why})")
    else:
        return {"checked": False, "why": f"not run here ({why}) and no provisioned board named (export with --board "
                                         "NAME of a provisioned board to check it there); `edgetune run` checks it "
                                         "on the board"}
    try:
        got = run(library, x)
    except BoardError as exc:
        return {"checked": False, "why": f"not run here ({why}); {exc}; `edgetune run` checks it on the board"}
    ok, message = compare_model_outputs([got], [reference])
    if ok:
        return {"checked": True, "where": where_run, "input": "standard normal, seeded", "verdict": message}
    if on_step is not None:
        on_step("prefixes of the model to find the first op that differs from PyTorch")
    where = first_difference(program, profile, plans, x, run=run, on_step=on_step)
    on_board = "" if where_run == "here" else f" {where_run}"
    raise ExportError(f"the built model differs from PyTorch's{on_board} ({message}){where}; nothing was "
                      "exported: the op is computed wrongly by TVM's importer or a kernel (export a model without it, "
                      "or use --no-check to export it anyway)")


def first_difference(program: Any, profile: BoardProfile, plans: Sequence[ConvPlan], x: np.ndarray, *,
                     run: Callable[[bytes, np.ndarray], list[np.ndarray]] = run_library,
                     on_step: Callable[[str], None] | None = None) -> str:
    """``"; the first op whose output differs is OP (MODULE)"`` for the first op of ``program`` whose built
    output differs from PyTorch's (bisected over the ops that depend on the input; ``""`` when no prefix differs,
    e.g. the difference is in how the last op's outputs are packed)"""
    import torch
    from torch.fx import Interpreter

    from toolkit.tuning.core.check import compare_model_outputs
    from toolkit.workloads.aten import is_conv, where

    gm = program.module()
    values: dict[str, Any] = {}

    class Recorder(Interpreter):
        def run_node(self, n: Any) -> Any:
            values[n.name] = result = super().run_node(n)
            return result

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Recorder(gm).run(torch.from_numpy(np.ascontiguousarray(x)))
    user_input = next(n for n in gm.graph.nodes if n.op == "placeholder")
    depends: set[Any] = {user_input}
    for n in gm.graph.nodes:                 # the ops whose value depends on the model's input
        if any(a in depends for a in n.all_input_nodes):
            depends.add(n)
    ops = [n for n in gm.graph.nodes if n.op == "call_function" and n in depends
           and isinstance(values.get(n.name), torch.Tensor) and values[n.name].dtype == torch.float32]

    def differs(k: int) -> bool:
        node = ops[k]
        if on_step is not None:
            on_step(f"the model up to {node.name} ({k + 1} of {len(ops)} ops) to compare it with PyTorch")
        convs = sum(1 for n in gm.graph.nodes if n.op == "call_function" and is_conv(n.target)
                    and _before(gm, n, node))
        try:
            library = _prefix_library(gm, node, x, profile, [copy.copy(p) for p in plans[:convs]])
            got = run(library, x)
        except Exception:  # noqa: BLE001 - a prefix TVM cannot build counts as one that differs
            return True
        return not compare_model_outputs([got[:1]], [[values[node.name].numpy()]])[0]

    low, high = 0, len(ops) - 1
    if not ops or not differs(high):
        return ""
    while low < high:                      # the first prefix that differs, assuming a difference persists
        mid = (low + high) // 2
        if differs(mid):
            high = mid
        else:
            low = mid + 1
    node = ops[low]
    return f"; the first op whose output differs is {node.target} ({where(node)})"


def _before(gm: Any, node: Any, last: Any) -> bool:
    """Whether ``node`` comes no later than ``last`` in graph order."""
    for n in gm.graph.nodes:
        if n is node:
            return True
        if n is last:
            return False
    return False


def _prefix_library(gm: Any, last: Any, x: np.ndarray, profile: BoardProfile, plans: list[ConvPlan]) -> bytes:
    """The model cut after op ``last`` (its output the prefix's), exported again and built with ``plans``."""
    import torch

    from toolkit.backends.tvm.model import compile_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch-internal deprecations, not the user's
        prefix = copy.deepcopy(gm)
    graph = prefix.graph
    keep = next(n for n in graph.nodes if n.name == last.name)
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        graph.output(keep)
    graph.erase_node(output)
    graph.eliminate_dead_code()
    prefix.recompile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.export.export(prefix, (torch.from_numpy(np.ascontiguousarray(x)),))
    return compile_model(program, profile, plans).library
