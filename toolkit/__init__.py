"""edgetune: tune deep-learning kernels on embedded accelerators and edge boards.

The import package is ``toolkit``; the distribution and the command are ``edgetune``.
"""

__version__ = "0.1.0"
