"""The hardware-independent tuning core: vocabulary (:mod:`.core`), the journal, the session loop,
whole-network tuning, replay, and the tuners with their models and search (see docs/design.md)."""
