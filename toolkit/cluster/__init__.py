"""Ray as edgetune's cluster engine (the optional ``edgetune[cluster]`` extra).

- :mod:`.nodes`: ``edgetune cluster start|join|status|stop``, Ray nodes started detached and stopped by
  process group;
- :mod:`.builder`: :class:`~toolkit.cluster.builder.RayBuilder`, builds (CPU/CUDA code generation, VTA
  compiles) on the cluster's workers behind the :class:`~toolkit.tuning.core.builder.Builder` interface;
- :mod:`.sweep`: exhaustive simulator sweeps split into chunks over the workers, the driver alone writing the log.

Ray is imported only when a cluster is used: without the extra, everything else works.
"""

from __future__ import annotations

from types import ModuleType

from toolkit.errors import ClusterError

ENV_ADDRESS = "EDGETUNE_CLUSTER"
"""The environment variable ``--cluster`` reads its address from."""


def require_ray() -> ModuleType:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ClusterError("the cluster needs Ray: pip install 'edgetune[cluster]'") from None
    return ray
