"""Micro-op kernels: TVM's ``FoldUopLoop`` + runtime ``UopKernel`` semantics, and the hazard check.

A kernel is built from a loop nest (outermost first) of ``(extent, dst, src, wgt)`` coefficient
tuples. Extent-1 loops vanish (TVM drops them), the two outermost remaining loops become the
instruction's ``iter_out``/``iter_in`` (``FoldUopLoop``: every index is affine), and the remaining
loops are enumerated as explicit micro-ops, innermost fastest.

>>> k = Kernel.build([(56, 1, 1, 0), (3, 0, 1, 1), (3, 0, 58, 3), (2, 448, 0, 9), (8, 56, 58, 0)])
>>> (len(k), k.loops[0], k.loops[1], k.dst[:3].tolist(), k.src[:3].tolist())
(48, (56, 1, 1, 0), (3, 0, 1, 1), [0, 56, 112], [0, 58, 116])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.vta.checks import AccHazardError

Loop = tuple[int, int, int, int]  # extent, dst factor, src factor, wgt factor


@dataclass
class Kernel:
    """Micro-ops (dst/src/wgt arrays) plus at most two folded loops."""

    dst: np.ndarray
    src: np.ndarray
    wgt: np.ndarray
    loops: list[Loop]

    def __len__(self) -> int:
        return len(self.dst)

    @classmethod
    def build(cls, nest: list[Loop], base: tuple[int, int, int] = (0, 0, 0)) -> "Kernel":
        """Fold the two outermost non-unit loops, enumerate the rest (innermost fastest)."""
        loops = [lp for lp in nest if lp[0] > 1]
        folded, rest = loops[:2], loops[2:]
        idx = [np.array([base[j]], dtype=np.int64) for j in range(3)]
        for ext, *coef in rest:
            r = np.arange(ext, dtype=np.int64)
            idx = [(a[:, None] + r[None, :] * c).reshape(-1) for a, c in zip(idx, coef)]
        return cls(idx[0], idx[1], idx[2], [tuple(lp) for lp in folded])

    @classmethod
    def single(cls, loops: list[Loop], dst: int, src: int) -> "Kernel":
        """A one-micro-op ALU kernel over ``loops`` (at most two, already flattened)."""
        one = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
        return cls(one(dst), one(src), one(0), [tuple(lp) for lp in loops])

    def insn_loops(self, alu: bool) -> tuple[int, int, int, int, int, int, int, int]:
        """``(iter_out, iter_in, dst_out, dst_in, src_out, src_in, wgt_out, wgt_in)`` as TVM's runtime fills them.

        GEMM puts a single loop in ``iter_out``, ALU puts it in ``iter_in`` (``PushGEMMOp``/``PushALUUop``).
        """
        lp = list(self.loops)
        if len(lp) == 1 and alu:
            lp = [(1, 0, 0, 0)] + lp
        while len(lp) < 2:
            lp.append((1, 0, 0, 0))
        (eo, do, so, wo), (ei, di, si, wi) = lp
        return eo, ei, do, di, so, si, wo, wi

    def runtime_dep_ok(self) -> bool:
        """TVM's ``UopKernel::VerifyDep``: no micro-op writes the dst of one of the two before it."""
        d = self.dst
        return not (np.any(d[1:] == d[:-1]) or np.any(d[2:] == d[:-2]))

    def hazard(self, across_iterations: bool = False) -> str | None:
        """Why the micro-op stream has a write-after-write hazard at distance <= 2 (or None).

        The HLS GEMM pipelines only the micro-op loop and drains it at every ``iter_out``/``iter_in``
        iteration (``docs/vta.md``), so by default only the kernel itself is checked, as the runtime's
        ``VerifyDep`` does. ``across_iterations=True`` also checks every loop boundary,
        ``(o, i) -> (o, i+1)`` and ``(o, last) -> (o+1, 0)``: the stream a design that flattens the loops sees.
        """
        if not self.runtime_dep_ok():
            return "micro-op kernel writes the same accumulator entry within 2 consecutive micro-ops"
        if not across_iterations:
            return None
        eo, ei, do, di, *_ = self.insn_loops(alu=False)
        deltas = []  # (delta of dst between consecutive iterations, how many in a row are possible)
        if ei > 1:
            deltas.append(di)
        if eo > 1:
            deltas.append(do - (ei - 1) * di)
        d = self.dst
        n = len(d)
        for delta in deltas:
            # distance 1 and 2 across one boundary
            pairs = [(n - 1, 0)]
            if n >= 2:
                pairs += [(n - 2, 0), (n - 1, 1)]
            for a, b in pairs:
                if d[b] + delta == d[a]:
                    return "micro-ops of consecutive loop iterations write the same accumulator entry"
        if n == 1:  # distance 2 spans two boundaries
            seqs = []
            if ei > 2:
                seqs.append(2 * di)
            if ei > 1 and eo > 1:
                seqs.append(di + do - (ei - 1) * di)
            if ei == 1 and eo > 2:
                seqs.append(2 * do)
            if any(s == 0 for s in seqs):
                return "micro-ops two loop iterations apart write the same accumulator entry"
        return None


def check_hazard(kernel: Kernel, name: str) -> None:
    """:class:`AccHazardError` naming ``name`` if :meth:`Kernel.hazard` finds one."""
    why = kernel.hazard()
    if why:
        raise AccHazardError(f"{name}: {why} (the GEMM pipeline would read a stale partial sum); "
                             "use an inner tile of >= 3 rows x output channels",
                             resource="acc_write_hazard", needed=1, available=0)
