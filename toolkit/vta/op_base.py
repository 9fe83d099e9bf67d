"""What every op of the int8 graph builds on: the activation (:class:`Tensor`), exponents, array checks, and the
:class:`Op` base class whose lifecycle :mod:`toolkit.vta.ops` describes. Board-side code imports it: numpy only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from toolkit.errors import ExportError

if TYPE_CHECKING:
    from toolkit.vta.graph import Layer

Shape = tuple[int, ...]

EXP_LIMIT = 32
"""Exponents stay within [-EXP_LIMIT, EXP_LIMIT]."""
ACC_EXP_MAX = 30
"""Largest accumulator exponent (input exp + weight exp) a conv may get: bias values stay within int32."""


@dataclass
class Tensor:
    """An activation: int8 ``data`` at scale ``2**-exp`` (``exp`` ``None``: float32), NCHW or VTA-packed."""

    data: np.ndarray
    exp: int | None
    packed: bool = False

    def nchw(self, hw: Any) -> np.ndarray:
        from toolkit.vta.reference import unpack_output

        return unpack_output(self.data, hw) if self.packed else self.data

    def real(self, hw: Any) -> np.ndarray:
        """The values as float32."""
        x = self.nchw(hw)
        return x if self.exp is None else (x.astype(np.float32) * np.float32(2.0 ** -self.exp))


def exponent(max_abs: float) -> int:
    """The largest ``e`` with ``max_abs * 2**e <= 127`` (int8), within [-EXP_LIMIT, EXP_LIMIT].

    >>> exponent(1.0), exponent(127.0), exponent(128.0), exponent(0.0)
    (6, 0, -1, 0)
    """
    if not max_abs > 0 or not math.isfinite(max_abs):
        return 0 if not max_abs > 0 else -EXP_LIMIT
    return int(min(EXP_LIMIT, max(-EXP_LIMIT, math.floor(math.log2(127.0 / max_abs)))))


def need_array(arrays: dict[str, np.ndarray], name: str, dtype: str, ndim: int) -> np.ndarray:
    """``arrays[name]``, non-empty, of ``dtype`` and ``ndim`` dimensions (else :class:`ExportError`)."""
    a = arrays.get(name)
    if a is None or a.dtype != np.dtype(dtype) or a.ndim != ndim or not a.size:
        raise ExportError(f"the model's weights have no {name} as a {ndim}-D {dtype} array; re-export the model")
    return a


def window_shape(s: Shape, kernel: Any, stride: Any, pad: Any) -> Shape:
    """NCHW output shape of a sliding window (floor mode) over NCHW ``s``."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    return (s[0], s[1], (s[2] + 2 * ph - kh) // sh + 1, (s[3] + 2 * pw - kw) // sw + 1)


def oihw_shape(shape: Shape) -> Shape:
    """A conv weight's OIHW shape, whether stored OIHW or packed ``(O/BO, I/BI, KH, KW, BO, BI)``."""
    if len(shape) == 6:
        ob, ib, kh, kw, bo, bi = shape
        return (ob * bo, ib * bi, kh, kw)
    return tuple(shape)


def elements(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def rounding_offset(shift: Any) -> np.ndarray:
    """The offset a bias carries so that ``>> shift`` rounds half up: ``2**(shift-1)``, 0 for no shift (per element
    of ``shift``, one shift or one per channel)."""
    s = np.asarray(shift, np.int64)
    return np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0)


def relu_if(x: np.ndarray, on: bool) -> np.ndarray:
    return np.maximum(x, 0) if on else x


class Op:
    """One op of the int8 graph (see the module docstring for the order its methods are used in)."""

    name: ClassVar[str]
    arity: ClassVar[int] = 1
    attrs: ClassVar[dict[str, str]] = {}
    """Attribute name -> kind: ``bool``, ``int`` (|v| <= 64), ``pair`` (two ints >= 1), ``pad`` (two ints >= 0)."""
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    cpu_why: ClassVar[str] = "no VTA lowering yet"
    """Why the op runs on the board's CPU in a VTA export (said in the export's layer table and manifest)."""

    def check(self, attrs: dict[str, Any]) -> str | None:
        """What is wrong with well-formed attributes beyond their kinds (``None``: nothing)."""
        return None

    def shape(self, layer: Layer, shapes: list[Shape], arrays: dict[str, np.ndarray]) -> Shape:
        """The output's shape from the inputs' shapes; the layer's arrays checked to fit them."""
        return shapes[0]

    def run(self, layer: Layer, args: list[Tensor], arrays: dict[str, np.ndarray], hw: Any) -> Tensor:
        """The int8 layer on (NCHW) tensors: the reference."""
        raise NotImplementedError

    def work(self, layer: Layer, shapes: list[Shape], out: Shape, arrays: dict[str, np.ndarray]
             ) -> tuple[int, int]:
        """(multiply-adds, elementwise operations) of the layer for inputs ``shapes`` and output ``out`` (its arrays
        checked by :meth:`shape`): one operation per output element unless the op says otherwise."""
        return 0, elements(out)

    def run_float(self, layer: Layer, args: list[np.ndarray], arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The float layer (its fused ReLU included)."""
        raise NotImplementedError

    def quantize(self, layer: Layer, exps: list[int | None], peak: float, floats: dict[str, np.ndarray],
                 arrays: dict[str, np.ndarray]) -> int | None:
        """Set the int8 ``layer``'s attributes and write its arrays into ``arrays`` from the float ones, given its
        inputs' exponents and its output's calibrated peak; returns the output's exponent (``None``: float)."""
        return exps[0]

    def to_vta(self, layer: Layer, arrays: dict[str, np.ndarray], hw: Any, batch: int) -> None:
        """Place the int8 layer on VTA ``hw``: its device set and its arrays rewritten as VTA reads them."""
        raise ExportError(f"layer {layer.name}: {self.name} has no VTA lowering")

    vta_inputs: ClassVar[tuple[str, ...]] = ("inp",)
    """The program regions a VTA layer's input tensors fill, in the order of its inputs."""

    def vta_arrays(self, layer: Layer, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The program regions a VTA layer's stored arrays fill (already in VTA's layout), by region name."""
        return {}
