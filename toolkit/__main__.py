"""``python -m toolkit`` runs the ``edgetune`` command."""

from toolkit.entry import main

main()
