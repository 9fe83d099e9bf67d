"""The tuning core: spaces, templates, measurement, records and tuners."""
