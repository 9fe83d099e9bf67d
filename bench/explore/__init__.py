"""Exploratory scripts: the runs behind the tuners' defaults (each prints its figures); notes.md records what
they measured and what was chosen."""
