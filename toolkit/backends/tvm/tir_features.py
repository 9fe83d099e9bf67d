"""Hidden features of a scheduled kernel: what lowering reveals (ML2Tuner's ModelA inputs).

The scheduled module is lowered through the first part of TVM's s_tir pipeline (blocks
removed, buffers compacted and flattened, virtual threads injected, loops not yet unrolled
or vectorised, so their kinds are still visible), then walked once; the conv's kind (groups, the
reduction each output sums, dilation: :data:`KIND_FEATURES`) is added from its workload. Every template
returns the same keys (:data:`FEATURE_NAMES`), all floats.

>>> import tvm
>>> from tvm import te
>>> a = te.placeholder((64,), name="a")
>>> b = te.compute((64,), lambda i: a[i] * 2.0, name="b")
>>> feats = extract(lower(tvm.IRModule({"main": te.create_prim_func([a, b])})))
>>> feats["loop_count"], feats["store_count"]
(1.0, 1.0)
"""

from __future__ import annotations

import math
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.tirx import stmt as S

FEATURE_NAMES: tuple[str, ...] = (
    "loop_count",                 # For loops
    "loop_extent_sum",            # sum of constant extents
    "loop_extent_product_log2",   # log2 of the product of constant extents
    "max_loop_depth",             # deepest loop nest
    "serial_count",
    "parallel_count",
    "parallel_extent",            # product of parallel loop extents (CPU tasks)
    "vectorized_count",
    "vector_width",               # widest vectorised loop
    "unrolled_count",
    "unroll_product",             # product of explicitly unrolled extents
    "auto_unroll_max_step",       # pragma value, 0 if none
    "branch_count",               # IfThenElse statements + if_then_else / Select expressions
    "nonconst_extent_count",      # loops whose extent is not a constant (partial tiles)
    "store_count",                # BufferStore statements
    "load_count",                 # BufferLoad expressions
    "main_trip_count_log2",       # log2 of the iterations around the deepest store
    "main_inner_tile",            # product of unrolled/vectorised/vthread extents around it
    "main_innermost_extent",      # extent of the loop directly around it
    "main_vector_width",          # vectorised extent around it
    "alloc_bytes_global",         # intermediate buffers (e.g. the padded input)
    "alloc_bytes_local",          # registers / stack (accumulators)
    "alloc_bytes_shared",         # GPU shared memory (staged tiles)
    "threads_per_block",          # product of threadIdx extents (GPU)
    "blocks",                     # product of blockIdx extents (GPU)
    "vthreads",                   # product of virtual thread extents (GPU)
    "conv_groups_log2",           # log2 of the conv's groups (depthwise: log2 of its channels)
    "conv_reduction_per_output",  # multiply-adds each output sums: CI/G x KH x KW
    "conv_dilation",              # the larger of the two dilations
)
KIND_FEATURES = FEATURE_NAMES[-3:]
"""The features of the conv's kind, from its workload (0 for a module that is no conv)."""

_LOWER_PASSES = (
    s_tir.transform.CanonicalizeLoop,
    s_tir.transform.LowerCrossThreadReduction,
    s_tir.transform.LowerInitBlock,
    s_tir.transform.PlanAndUpdateBufferAllocationLocation,
    s_tir.transform.ConvertBlocksToOpaque,
    s_tir.transform.LiftThreadBinding,
    s_tir.transform.CompactBufferAllocation,
    s_tir.transform.UnifyThreadBinding,
    s_tir.transform.LowerMatchBuffer,
    s_tir.transform.StmtSimplify,
    s_tir.transform.LowerOpaqueBlock,
    tirx.transform.FlattenBuffer,
    lambda: tirx.transform.NarrowDataType(32),
    s_tir.transform.InjectVirtualThread,
    tirx.transform.StmtSimplify,
)


def lower(mod: tvm.IRModule, target: Any | None = None) -> tvm.IRModule:
    """Lower a scheduled module far enough for features and GPU verification (no codegen)."""
    seq = tvm.ir.transform.Sequential([p() for p in _LOWER_PASSES])
    if target is not None:
        with tvm.target.Target(target):
            return seq(mod)
    return seq(mod)


def _int(expr: Any) -> int | None:
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


class _Walker:
    def __init__(self) -> None:
        self.f = dict.fromkeys(FEATURE_NAMES, 0.0)
        self.f["parallel_extent"] = self.f["threads_per_block"] = self.f["blocks"] = self.f["vthreads"] = 1.0
        self.f["unroll_product"] = 1.0
        self.main: tuple[int, float, float, float, float] = (-1, 0.0, 1.0, 0.0, 1.0)  # depth trip tile inner vec

    def stmt(self, s: Any, loops: list[tuple[int, int]]) -> None:
        f = self.f
        if isinstance(s, S.For):
            ext = _int(s.extent)
            kind = int(s.kind)
            f["loop_count"] += 1
            if ext is None:
                f["nonconst_extent_count"] += 1
                ext = 1
            f["loop_extent_sum"] += ext
            f["loop_extent_product_log2"] += math.log2(max(ext, 1))
            name = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled"}.get(kind)
            if name:
                f[f"{name}_count"] += 1
            if kind == 1:
                f["parallel_extent"] *= ext
            elif kind == 2:
                f["vector_width"] = max(f["vector_width"], ext)
            elif kind == 3:
                f["unroll_product"] *= ext
            elif kind == 4 and s.thread_binding is not None:
                self._thread(str(s.thread_binding.thread_tag), ext)
            for key, val in dict(s.annotations).items():
                if key == "pragma_auto_unroll_max_step":
                    f["auto_unroll_max_step"] = max(f["auto_unroll_max_step"], float(_int(val) or 0))
            f["max_loop_depth"] = max(f["max_loop_depth"], len(loops) + 1)
            self.stmt(s.body, loops + [(kind, ext)])
        elif isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x, loops)
        elif isinstance(s, S.AttrStmt):
            key = str(s.attr_key)
            val = _int(s.value)
            if key in ("thread_extent", "virtual_thread") and val is not None:
                tag = str(s.node.thread_tag) if hasattr(s.node, "thread_tag") else "vthread"
                self._thread(tag if key == "thread_extent" else "vthread", val)
                loops = loops + [(5 if key == "virtual_thread" or tag.startswith("vthread") else 4, val)]
            elif key == "pragma_auto_unroll_max_step" and val is not None:
                f["auto_unroll_max_step"] = max(f["auto_unroll_max_step"], float(val))
            self.stmt(s.body, loops)
        elif isinstance(s, S.IfThenElse):
            f["branch_count"] += 1
            self.expr(s.condition)
            self.stmt(s.then_case, loops)
            if s.else_case is not None:
                self.stmt(s.else_case, loops)
        elif isinstance(s, S.AllocBuffer):
            self._alloc(s.buffer)
        elif isinstance(s, S.BufferStore):
            f["store_count"] += 1
            self.expr(s.value)
            for i in s.indices:
                self.expr(i)
            depth = len(loops)
            if depth >= self.main[0]:
                trip = sum(math.log2(max(e, 1)) for _, e in loops)
                tile = math.prod(e for k, e in loops if k in (2, 3, 5))
                inner = float(loops[-1][1]) if loops else 1.0
                vec = math.prod(e for k, e in loops if k == 2)
                self.main = (depth, trip, float(tile), inner, float(vec))
        elif isinstance(s, (S.Bind, S.Evaluate)):
            self.expr(s.value)
        elif isinstance(s, S.While):
            self.stmt(s.body, loops)
        elif hasattr(s, "body"):
            self.stmt(s.body, loops)

    def _thread(self, tag: str, ext: int) -> None:
        if tag.startswith("threadIdx"):
            self.f["threads_per_block"] *= ext
        elif tag.startswith("blockIdx"):
            self.f["blocks"] *= ext
        elif tag.startswith("vthread"):
            self.f["vthreads"] *= ext

    def _alloc(self, buf: Any) -> None:
        n = math.prod(_int(d) or 1 for d in buf.shape) * tvm.DataType(buf.dtype).bits // 8
        scope = str(buf.scope())
        key = "alloc_bytes_shared" if scope.startswith("shared") else (
            "alloc_bytes_local" if scope.startswith("local") else "alloc_bytes_global")
        self.f[key] += n

    def expr(self, e: Any) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, tvm.ir.TensorLoad):
                self.f["load_count"] += 1
                stack.extend(x.indices)
            elif isinstance(x, tirx.Select):
                self.f["branch_count"] += 1
                stack.extend((x.condition, x.true_value, x.false_value))
            elif isinstance(x, tvm.ir.Call):
                if str(getattr(x.op, "name", "")).endswith("if_then_else"):
                    self.f["branch_count"] += 1
                stack.extend(x.args)
            else:
                for attr in ("a", "b", "value", "base", "stride", "condition"):
                    child = getattr(x, attr, None)
                    if isinstance(child, tvm.ir.Expr):
                        stack.append(child)


def extract(mod: tvm.IRModule, workload: Any = None) -> dict[str, float]:
    """Features of a lowered module (see :func:`lower`), keyed by :data:`FEATURE_NAMES`; ``workload``: the
    :class:`~toolkit.workloads.Conv2dWorkload` it computes, for :data:`KIND_FEATURES`."""
    w = _Walker()
    if workload is not None:
        w.f.update(zip(KIND_FEATURES, (math.log2(workload.g), workload.ci_per_group * workload.kh * workload.kw,
                                       max(workload.dh, workload.dw))))
    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            w.stmt(func.body, [])
    _, trip, tile, inner, vec = w.main
    w.f["main_trip_count_log2"] = trip
    w.f["main_inner_tile"] = tile
    w.f["main_innermost_extent"] = inner
    w.f["main_vector_width"] = vec
    return {k: float(w.f[k]) for k in FEATURE_NAMES}
