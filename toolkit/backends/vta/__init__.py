"""The VTA backend: edgetune's VTA compiler as a template, the in-process simulator and the board
agent as runners, task plans with 16-channel blocks, and VTA program exports.

The compiler, ISA, program format and simulator themselves are :mod:`toolkit.vta`, a package that
knows nothing of tuning; this package binds them to the tuning core.
"""
