"""``python -m toolkit`` runs the ``edgetune`` command."""

from toolkit.cli import main

main()
