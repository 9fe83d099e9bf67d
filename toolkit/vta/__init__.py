"""edgetune's VTA backend: hardware configs, the ISA, programs, a functional + timing simulator,
and the conv2d compiler.

Modules: :mod:`~toolkit.vta.config` (``VTAConfig``, presets), :mod:`~toolkit.vta.isa` (instructions and
their bit-exact encoding), :mod:`~toolkit.vta.program` (``Program`` container and file format),
:mod:`~toolkit.vta.sim` (``simulate``), :mod:`~toolkit.vta.timing` (the calibrated timing model),
:mod:`~toolkit.vta.compiler` (``compile_conv2d``). See ``docs/vta.md``.
"""
