"""Conv2d workloads and the ``conv2d:`` spec grammar.

A workload is a batch-N 2-D convolution, NCHW input, OIHW weights (``[CO, CI/G, KH, KW]``), with ``G``
groups (``G = CI = CO``: depthwise) and dilation ``DH x DW``. The spec shows groups and dilation only when they
are not 1, so a plain conv's spec, record and key are the same as they always were.

>>> w = parse_spec("conv2d:H=56,W=56,CI=64,CO=64,K=3,S=1,P=1")
>>> (w.oh, w.ow, w.macs, w.kind)
(56, 56, 115605504, 'conv')
>>> d = parse_spec("conv2d:H=56,W=56,CI=64,CO=64,K=3,S=1,P=2,G=64,D=2")
>>> (d.oh, d.macs, d.kind, d.spec())
(56, 1806336, 'depthwise', 'conv2d:N=1,H=56,W=56,CI=64,CO=64,K=3,S=1,P=2,G=64,D=2')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from toolkit.errors import WorkloadError


LIMITS = {"n": 1024, "h": 16384, "w": 16384, "ci": 65536, "co": 65536, "kh": 64, "kw": 64, "sh": 64, "sw": 64,
          "ph": 64, "pw": 64, "g": 65536, "dh": 64, "dw": 64}
"""Largest value of each field: far beyond any layer of a real network, small enough that spaces stay finite."""


@dataclass(frozen=True)
class Conv2dWorkload:
    """Shape of one conv2d layer. ``name`` is informational and ignored by ``==``."""

    n: int
    h: int
    w: int
    ci: int
    co: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    name: str | None = field(default=None, compare=False)
    g: int = 1
    dh: int = 1
    dw: int = 1

    def __post_init__(self) -> None:
        for key, top in LIMITS.items():
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise WorkloadError(f"workload field {key.upper()} must be an integer, got {value!r:.30}")
            low = 0 if key in ("ph", "pw") else 1
            if value < low:
                raise WorkloadError(f"workload field {key.upper()} must be >= {low}, got {value}")
            if value > top:
                raise WorkloadError(f"workload field {key.upper()} must be <= {top}, got {str(value)[:30]}")
        for what, channels in (("CI", self.ci), ("CO", self.co)):
            if channels % self.g:
                raise WorkloadError(f"workload field {what}={channels} is not a multiple of the groups G={self.g}")
        if self.oh < 1 or self.ow < 1:
            raise WorkloadError(
                f"workload {self.spec()} has an empty output ({self.oh}x{self.ow}): "
                "the kernel is larger than the padded input"
            )

    @property
    def oh(self) -> int:
        """Output height."""
        return (self.h + 2 * self.ph - self.dh * (self.kh - 1) - 1) // self.sh + 1

    @property
    def ow(self) -> int:
        """Output width."""
        return (self.w + 2 * self.pw - self.dw * (self.kw - 1) - 1) // self.sw + 1

    @property
    def ci_per_group(self) -> int:
        """Input channels each output channel reads (``CI / G``)."""
        return self.ci // self.g

    @property
    def macs(self) -> int:
        """Multiply-accumulates of one run."""
        return self.n * self.co * self.oh * self.ow * self.ci_per_group * self.kh * self.kw

    @property
    def kind(self) -> str:
        """``conv``, ``depthwise`` (one input channel per group, one or more outputs), ``grouped`` or
        ``dilated`` (groups 1, dilation above 1)."""
        if self.g > 1:
            return "depthwise" if self.g == self.ci else "grouped"
        return "dilated" if (self.dh, self.dw) != (1, 1) else "conv"

    @property
    def flops(self) -> int:
        """Operations of one run (2 per MAC), as TVM counts them."""
        return 2 * self.macs

    def spec(self) -> str:
        """The canonical spec string; ``parse_workload(w.spec()) == w``."""
        k = f"K={self.kh}" if self.kh == self.kw else f"KH={self.kh},KW={self.kw}"
        s = f"S={self.sh}" if self.sh == self.sw else f"SH={self.sh},SW={self.sw}"
        p = f"P={self.ph}" if self.ph == self.pw else f"PH={self.ph},PW={self.pw}"
        g = f",G={self.g}" if self.g != 1 else ""
        d = "" if (self.dh, self.dw) == (1, 1) else (
            f",D={self.dh}" if self.dh == self.dw else f",DH={self.dh},DW={self.dw}")
        return f"conv2d:N={self.n},H={self.h},W={self.w},CI={self.ci},CO={self.co},{k},{s},{p}{g}{d}"

    @property
    def label(self) -> str:
        """The name if it has one, else the spec."""
        return self.name or self.spec()

    def to_dict(self) -> dict:
        """A JSON-able dict (the form stored in records; groups and dilation only when they are not 1)."""
        return {
            "n": self.n, "h": self.h, "w": self.w, "ci": self.ci, "co": self.co,
            "kh": self.kh, "kw": self.kw, "sh": self.sh, "sw": self.sw,
            "ph": self.ph, "pw": self.pw, "name": self.name,
        } | {key: getattr(self, key) for key in _GROUPED if getattr(self, key) != 1}

    @classmethod
    def from_dict(cls, d: dict) -> Conv2dWorkload:
        """Inverse of :meth:`to_dict`."""
        keys = ("n", "h", "w", "ci", "co", "kh", "kw", "sh", "sw", "ph", "pw")
        try:
            return cls(**{k: int(d[k]) for k in keys}, **{k: int(d.get(k, 1)) for k in _GROUPED},
                       name=d.get("name"))
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkloadError(f"malformed workload record {d!r}: {exc}") from None


_GROUPED = ("g", "dh", "dw")
"""The fields a plain conv leaves at 1 (and its spec and record leave out)."""

_ALIASES = {
    "N": "n", "H": "h", "W": "w", "CI": "ci", "CO": "co",
    "KH": "kh", "KW": "kw", "SH": "sh", "SW": "sw", "PH": "ph", "PW": "pw", "G": "g", "DH": "dh", "DW": "dw",
    "K": ("kh", "kw"), "S": ("sh", "sw"), "P": ("ph", "pw"), "D": ("dh", "dw"),
}
_REQUIRED = ("h", "w", "ci", "co", "kh", "kw")


def parse_spec(spec: str) -> Conv2dWorkload:
    """Parse ``conv2d:N=1,H=56,...``; :class:`WorkloadError` naming the bad field."""
    text = spec.strip()
    if not text.lower().startswith("conv2d:"):
        raise WorkloadError(f"workload {spec!r} is not a spec: give one like conv2d:H=56,W=56,CI=64,CO=64,K=3,S=1,P=1")
    values: dict[str, int] = {"n": 1, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "g": 1, "dh": 1, "dw": 1}
    seen: set[str] = set()
    body = text.split(":", 1)[1]
    if not body.strip():
        raise WorkloadError(f"workload {spec!r} has no fields: give H, W, CI, CO and K")
    for item in body.split(","):
        if "=" not in item:
            raise WorkloadError(f"workload field {item.strip()!r} in {spec!r} is not KEY=VALUE")
        key, raw = (part.strip() for part in item.split("=", 1))
        target = _ALIASES.get(key.upper())
        if target is None:
            raise WorkloadError(
                f"unknown workload field {key!r} in {spec!r}: use N, H, W, CI, CO, K|KH|KW, S|SH|SW, P|PH|PW, G, "
                "D|DH|DW"
            )
        if not re.fullmatch(r"[0-9]{1,9}", raw):
            raise WorkloadError(f"workload field {key.upper()} must be a non-negative integer (0-9, at most 9 "
                                f"digits), got {raw[:30]!r}")
        names = target if isinstance(target, tuple) else (target,)
        for name in names:
            if name in seen:
                raise WorkloadError(f"workload field {key.upper()} given twice in {spec!r}")
            seen.add(name)
            values[name] = int(raw)
    missing = [f.upper() for f in _REQUIRED if f not in seen]
    if missing:
        raise WorkloadError(f"workload {spec!r} is missing field(s) {', '.join(missing)}")
    return Conv2dWorkload(**values)


def with_name(workload: Conv2dWorkload, name: str | None) -> Conv2dWorkload:
    """A copy of ``workload`` carrying ``name``."""
    return replace(workload, name=name)
