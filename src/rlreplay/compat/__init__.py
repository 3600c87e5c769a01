"""Seed-compatible front-ends: other libraries' replay APIs as thin adapters over the core.

Each subpackage mirrors the module paths of the library it stands in for, so switching is a
change of the import line only (see ``docs/migrating/*.md``):

* :mod:`rlreplay.compat.keras_gym` -- keras-gym's ``ExperienceReplayBuffer``.
* :mod:`rlreplay.compat.nnabla_rl` -- nnabla-rl's ``replay_buffer`` and ``replay_buffers``.
* :mod:`rlreplay.compat.reagent` -- ReAgent's ``reagent.replay_memory``.
* :mod:`rlreplay.compat.alf` -- ALF's ``alf.experience_replayers``.

Subpackages are not imported here: each is loaded only when its users import it.
"""
