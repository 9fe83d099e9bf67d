"""Exploratory scripts: the runs behind the choices docs/tuners.md reports (each prints its figures)."""
