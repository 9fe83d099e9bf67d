"""CUDA conv2d template (``cuda-conv2d``): AutoTVM's direct NCHW conv2d schedule for Jetson GPUs.

Grouped, depthwise and dilated convs share it: the reduction splits one group's input channels, and a block
stages the inputs of every group its output channels span.

Knobs as in AutoTVM's ``conv2d_nchw.cuda`` (``topi/cuda/conv2d_direct.py``): 4-way splits
``tile_f``/``tile_y``/``tile_x`` of output channels, rows and columns
(``[block, vthread, thread, inner]``), 2-way splits ``tile_rc``/``tile_ry``/``tile_rx`` of the
reduction, ``auto_unroll_max_step`` in {0, 512, 1500} and ``unroll_explicit`` in {0, 1}. The
padded input and the weights are staged in shared memory per reduction step and fetched
cooperatively by the block's threads; accumulators live in registers.

A config whose block would exceed the board's threads per block, shared memory per block or
registers (``max_threads_per_block``, ``max_shared_memory_per_block``, ``registers_per_block``
of the profile target) is rejected before building with the reason, and the lowered kernel is
checked with TVM's ``verify_gpu_code``.

Building cross-links a host library for the board that embeds the generated CUDA C source:
apache-tvm 0.27 compiles it with NVRTC when the board loads the library (so no CUDA toolkit is
needed on the host, and sm_53 works although CUDA 13's nvcc dropped it). The board's TVM
runtime must be built with CUDA (and NVRTC).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from toolkit.backends.tvm.cpu import ConvTemplateBase, new_schedule
from toolkit.backends.tvm.epilogue import Epilogue
from toolkit.tuning.core.result import ErrorClass
from toolkit.tuning.core.space import CategoricalKnob, Config, Knob, SplitKnob
from toolkit.tuning.core.template import BuildError

MAX_THREADS_XYZ = (1024, 1024, 64)
"""CUDA's per-dimension block limits (x, y, z)."""
MAX_REGISTERS_PER_THREAD = 255
REGISTER_OVERHEAD = 16
"""Registers assumed per thread beyond the accumulators (indices, addresses, loads)."""


class CUDAConv2dTemplate(ConvTemplateBase):
    """AutoTVM's direct CUDA conv2d: float32 NCHW data, OIHW weights, NCHW output."""

    name: ClassVar[str] = "cuda-conv2d"
    weight_layout: ClassVar[str] = "OIHW"
    device: ClassVar[str] = "cuda"

    def knobs(self) -> list[Knob]:
        wl = self.workload
        return [
            SplitKnob("tile_f", wl.co, 4),
            SplitKnob("tile_y", wl.oh, 4),
            SplitKnob("tile_x", wl.ow, 4),
            SplitKnob("tile_rc", wl.ci_per_group, 2),
            SplitKnob("tile_ry", wl.kh, 2),
            SplitKnob("tile_rx", wl.kw, 2),
            CategoricalKnob("auto_unroll_max_step", [0, 512, 1500]),
            CategoricalKnob("unroll_explicit", [0, 1]),
        ]

    # -- limits ------------------------------------------------------------------------
    def limits(self) -> dict[str, int]:
        """The board's per-block limits, from the profile target."""
        t = self.profile.target
        return {
            "max_threads_per_block": int(t.get("max_threads_per_block", 1024)),
            "max_shared_memory_per_block": int(t.get("max_shared_memory_per_block", 49152)),
            "registers_per_block": int(t.get("registers_per_block", 65536)),
        }

    def usage(self, config: Config) -> dict[str, int]:
        """Threads, shared bytes and estimated registers one block of ``config`` needs."""
        c, wl = config.values, self.workload
        f, y, x = c["tile_f"], c["tile_y"], c["tile_x"]
        rc, ry, rx = c["tile_rc"][1], c["tile_ry"][1], c["tile_rx"][1]
        threads = f[2] * y[2] * x[2]
        ft, yt, xt = math.prod(f[1:]), math.prod(y[1:]), math.prod(x[1:])
        rows = (yt - 1) * wl.sh + (ry - 1) * wl.dh + 1
        cols = (xt - 1) * wl.sw + (rx - 1) * wl.dw + 1
        groups = -(-ft // (wl.co // wl.g))   # the groups a block's output channels span read their own inputs
        shared = 4 * (groups * rc * rows * cols + ft * rc * ry * rx)
        acc = f[1] * f[3] * y[1] * y[3] * x[1] * x[3]
        regs = acc + REGISTER_OVERHEAD
        return {"threads": threads, "threads_z": f[2], "threads_y": y[2], "threads_x": x[2],
                "shared_bytes": shared, "registers_per_thread": regs, "registers": regs * threads}

    def check(self, config: Config) -> None:
        use, lim = self.usage(config), self.limits()
        board = self.profile.name
        if use["threads"] > lim["max_threads_per_block"]:
            reason = (f"{use['threads']} threads per block (tile_f/y/x thread factors "
                      f"{use['threads_z']}x{use['threads_y']}x{use['threads_x']}) exceed {board}'s "
                      f"max_threads_per_block {lim['max_threads_per_block']}")
        elif use["threads_z"] > MAX_THREADS_XYZ[2]:
            reason = f"threadIdx.z extent {use['threads_z']} exceeds CUDA's limit {MAX_THREADS_XYZ[2]}"
        elif use["shared_bytes"] > lim["max_shared_memory_per_block"]:
            reason = (f"shared-memory tiles need {use['shared_bytes']} B per block, above {board}'s "
                      f"max_shared_memory_per_block {lim['max_shared_memory_per_block']} B")
        elif use["registers_per_thread"] > MAX_REGISTERS_PER_THREAD:
            reason = (f"~{use['registers_per_thread']} registers per thread (accumulators + "
                      f"{REGISTER_OVERHEAD}) exceed CUDA's {MAX_REGISTERS_PER_THREAD}")
        elif use["registers"] > lim["registers_per_block"]:
            reason = (f"~{use['registers']} registers per block ({use['threads']} threads x "
                      f"{use['registers_per_thread']}) exceed {board}'s registers_per_block "
                      f"{lim['registers_per_block']}")
        else:
            return
        raise BuildError(f"invalid config: {reason}", ErrorClass.INVALID_CONFIG)

    def fallback_config(self) -> Config:
        """The untuned config a whole-model export uses for a shape without a record: blocks of up to 4 x 8 x 8
        threads (output channels x rows x columns), 2 output channels per thread, the whole kernel window
        and up to 8 input channels staged in shared memory per step, unrolled to 512. Not measured on a GPU:
        within every limit of both Jetson profiles on the ResNet-18 and MobileNet convs (tested)."""
        wl = self.workload

        def divisor(n: int, cap: int) -> int:
            return max(d for d in range(1, cap + 1) if n % d == 0)

        f_inner = divisor(wl.co, 2)
        f_threads = divisor(wl.co // f_inner, 4)
        y_threads, x_threads, rc = divisor(wl.oh, 8), divisor(wl.ow, 8), divisor(wl.ci_per_group, 8)
        values = {"tile_f": [wl.co // (f_threads * f_inner), 1, f_threads, f_inner],
                  "tile_y": [wl.oh // y_threads, 1, y_threads, 1], "tile_x": [wl.ow // x_threads, 1, x_threads, 1],
                  "tile_rc": [wl.ci_per_group // rc, rc], "tile_ry": [1, wl.kh], "tile_rx": [1, wl.kw],
                  "auto_unroll_max_step": 512, "unroll_explicit": 1}
        return self.space().get(self.space().index_of(values))

    # -- schedule ----------------------------------------------------------------------
    def schedule(self, config: Config, epilogue: Epilogue | None = None) -> Any:
        """The scheduled module of ``config``; an ``epilogue`` is computed where each thread writes its outputs
        back from registers (a kernel for a model's conv; tuning measures the plain conv)."""

        c, wl = config.values, self.workload
        sch = new_schedule(self._compute(epilogue))
        conv = sch.get_sblock("conv")
        out = sch.cache_write(conv, 0, "local")  # `conv` accumulates in registers, `out` writes back
        padded = wl.ph or wl.pw
        AA = sch.cache_read(conv, 0, "shared")
        WW = sch.cache_read(conv, 1, "shared")
        if padded:
            sch.compute_inline(sch.get_sblock("pad"))    # the shared stage computes the padding

        n, f, y, x, rc, ry, rx = sch.get_loops(conv)
        bf, vf, tf, fi = sch.split(f, c["tile_f"])
        by, vy, ty, yi = sch.split(y, c["tile_y"])
        bx, vx, tx, xi = sch.split(x, c["tile_x"])
        rco, rci = sch.split(rc, c["tile_rc"])
        ryo, ryi = sch.split(ry, c["tile_ry"])
        rxo, rxi = sch.split(rx, c["tile_rx"])
        sch.reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, rco, ryo, rxo, rci, ryi, rxi, fi, yi, xi)
        bf = sch.fuse(n, bf)
        for loop, tag in ((bf, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                          (vf, "vthread.z"), (vy, "vthread.y"), (vx, "vthread.x"),
                          (tf, "threadIdx.z"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
            sch.bind(loop, tag)
        sch.reverse_compute_at(out, tx)
        sch.compute_at(AA, rxo)
        sch.compute_at(WW, rxo)
        nthreads = (c["tile_f"][2], c["tile_y"][2], c["tile_x"][2])
        depth = 12  # bf by bx, 3 vthreads, 3 threads, rco ryo rxo
        for load in (AA, WW):                          # cooperative fetching
            own = sch.get_loops(load)[depth:]
            fused = sch.fuse(*own) if len(own) > 1 else own[0]
            tz_, ty_, tx_, _ = sch.split(fused, [*nthreads, None])
            sch.bind(tz_, "threadIdx.z")
            sch.bind(ty_, "threadIdx.y")
            sch.bind(tx_, "threadIdx.x")
        sch.decompose_reduction(conv, rco)
        sch.annotate(bf, "pragma_auto_unroll_max_step", c["auto_unroll_max_step"])
        sch.annotate(bf, "pragma_unroll_explicit", c["unroll_explicit"])
        if epilogue:
            sch.reverse_compute_inline(sch.get_sblock("epilogue"))
        return sch.mod

    def verify(self, lowered: Any) -> None:
        from tvm.s_tir.analysis import verify_gpu_code

        lim = self.limits()
        constraints = {
            "max_shared_memory_per_block": lim["max_shared_memory_per_block"],
            "max_threads_per_block": lim["max_threads_per_block"],
            "max_thread_x": MAX_THREADS_XYZ[0],
            "max_thread_y": MAX_THREADS_XYZ[1],
            "max_thread_z": MAX_THREADS_XYZ[2],
        }
        for _, func in lowered.functions.items():
            if not verify_gpu_code(func, constraints):
                raise BuildError("invalid config: TVM's verify_gpu_code rejects the lowered kernel "
                                 f"for {self.profile.name} ({constraints})", ErrorClass.INVALID_CONFIG)

    def lower(self, config: Config) -> Any:
        """The checked, scheduled and lowered kernel IR of ``config`` (no CUDA compiler needed)."""
        from toolkit.backends.tvm import tir_features

        self.check(config)
        lowered = tir_features.lower(self.schedule(config), self.target())
        self.verify(lowered)
        return lowered

    def cuda_source(self, config: Config) -> str:
        """The generated CUDA C source of ``config`` (what the board's NVRTC compiles at load)."""
        import tvm

        self.check(config)
        target = self.target()
        with target:
            executable = tvm.compile(self.schedule(config), target=target)
        return "\n".join(m.inspect_source() for m in executable.mod.imports if m.kind == "cuda")
