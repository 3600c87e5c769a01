"""Seed-compatible front-ends: other libraries' replay APIs as thin adapters over the core.

Each subpackage mirrors the module paths of the library it stands in for, so switching is a
change of the import line only (see ``docs/migrating.md``):

* :mod:`rlreplay.compat.keras_gym` -- keras-gym's ``ExperienceReplayBuffer``.

Subpackages are not imported here: each is loaded only when its users import it.
"""
