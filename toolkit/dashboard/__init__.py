"""``edgetune dashboard``: a read-only web app over tuning logs, bench results, boards and exports.

:mod:`~toolkit.dashboard.sources` decides what may be read, :mod:`~toolkit.dashboard.logview` follows a log as it
grows, :mod:`~toolkit.dashboard.pages` builds each page's JSON and :mod:`~toolkit.dashboard.app` serves it with the
static page in ``static/``.
"""

from toolkit.dashboard.app import bind, make_app, serve
from toolkit.dashboard.sources import check_roots

__all__ = ["bind", "check_roots", "make_app", "serve"]
