"""The VTA conv2d template: edgetune's VTA compiler (TVM's VTA conv2d schedule space).

A build is :func:`toolkit.vta.compiler.compile_conv2d`; the artifact is the program binary
(``Program.to_bytes()``) plus the compiler's features. A config the hardware cannot run
(buffers overflow, fields that do not fit, ...) raises a :class:`~toolkit.vta.errors.VTAError`
in the compiler and becomes ``BuildError(error=INVALID_CONFIG)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit.boards import BoardProfile
from toolkit.errors import ConfigError
from toolkit.tuning.core.result import ErrorClass
from toolkit.tuning.core.space import Config, ConfigSpace
from toolkit.tuning.core.template import Artifact, BuildError, Template
from toolkit.workloads import Conv2dWorkload
from toolkit.workloads.networks import dense_refusal

OPTIONS = {"tvm_compat": False, "bias": False}
"""Template options and defaults: ``tvm_compat`` rejects configs TVM v0.18's lowering cannot build
(the TVM-compatible space);
``bias`` adds a bias add (LOAD ACC + ALU ADD) before requantization."""


class VTAConv2dTemplate(Template):
    """conv2d (NCHW{n}n{c}c packed, int8 in, int8 out) on a VTA hardware config."""

    name = "vta-conv2d"
    OPTIONS = OPTIONS

    def __init__(self, workload: Conv2dWorkload, profile: BoardProfile, **options: Any) -> None:
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise ConfigError(f"template {self.name!r} has no option(s) {sorted(unknown)}; options: {sorted(OPTIONS)}")
        super().__init__(workload, profile, **{k: bool(options.get(k, v)) for k, v in OPTIONS.items()})
        from toolkit.vta.config import get_preset

        if not profile.vta or "preset" not in profile.vta:
            raise ConfigError(f"board type {profile.name!r} has no [vta] preset; it cannot run VTA programs")
        self.hw = get_preset(profile.vta["preset"])
        refusal = dense_refusal(workload)
        if refusal:
            raise ConfigError(f"{workload.label}: {refusal}; tune it on a CPU or GPU board")
        for what, n, block in (("N", workload.n, self.hw.batch), ("CI", workload.ci, self.hw.block_in),
                               ("CO", workload.co, self.hw.block_out)):
            if n % block:
                raise ConfigError(f"{workload.label}: {what}={n} is not a multiple of {block}, VTA's block on "
                                  f"{profile.name}: no config can run; pad the channels (`edgetune tune --model` "
                                  "plans networks that way) or tune it on a CPU board")

    def hardware(self) -> dict[str, Any]:
        """The VTA hardware config (``vta_config.json`` keys), stored in log headers."""
        return self.hw.to_json()

    def space(self) -> ConfigSpace:
        from toolkit.backends.vta.space import vta_conv2d_space

        return vta_conv2d_space(self.workload, self.hw)

    def _compile(self, config: Config) -> Any:
        from toolkit.vta.compiler import compile_conv2d
        from toolkit.vta.errors import VTAError

        try:
            return compile_conv2d(self.workload, config.values, self.hw, bias=self.options["bias"],
                                  tvm_compat=self.options["tvm_compat"])
        except VTAError as exc:
            raise BuildError(f"{type(exc).__name__}: {exc}", error=ErrorClass.INVALID_CONFIG) from None

    def features(self, config: Config) -> dict[str, float]:
        """The compiler's features without encoding the program (a third of a build's time)."""
        return {k: float(v) for k, v in self._compile(config).features.items()}

    def build(self, config: Config) -> Artifact:
        compiled = self._compile(config)
        return Artifact(index=config.index, kind="vta-program", payload=compiled.program.to_bytes(),
                        features={k: float(v) for k, v in compiled.features.items()}, obj=compiled.program)

    def current_features(self, features: dict[str, float]) -> dict[str, float]:
        """Adds the compiler's ``time.*`` terms to features recorded before they existed."""
        from toolkit.vta.features import with_time_terms

        return with_time_terms(features, self.hw)

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        from toolkit.vta import reference

        return reference.random_inputs(self.workload, self.hw, rng, bias=self.options["bias"])

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        from toolkit.vta import reference

        return reference.packed_reference(self.workload, self.hw, inputs)
