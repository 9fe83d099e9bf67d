"""The TVM backend: CPU and CUDA conv2d templates (TVM 0.27 code generation), the TVM RPC runner,
lowered-TIR features, the MetaSchedule driver, and exported shared libraries.

Importing it maps the import system's frozen frames to their modules in :mod:`inspect`'s file cache: TVMScript's
parser calls ``inspect.stack()`` for every ``@T.prim_func``, and a frame whose file is ``<frozen ...>`` is never
cached, so each such frame scanned every module loaded (thousands once PyTorch is): importing MetaSchedule's
tensor intrinsics took 67 s here instead of 9.
"""

import inspect as _inspect
import os as _os

for _name in ("importlib._bootstrap", "importlib._bootstrap_external", "runpy"):
    _inspect.modulesbyfile.setdefault(_os.path.normcase(_os.path.abspath(f"<frozen {_name}>")), _name)
