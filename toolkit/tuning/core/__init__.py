"""The tuning core's vocabulary: spaces, tasks, templates, builders, runners, results and the output check."""
