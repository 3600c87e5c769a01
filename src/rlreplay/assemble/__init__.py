"""Turning chosen transitions into arrays: n-step windows, discounts, ``next_obs``, frame stacks,
and sequences with masks.

Functions from (storage, episode index, chosen ``(env, t)``) to arrays. Knows nothing of how
the transitions were chosen.
"""

from rlreplay.assemble.sequences import gather_runs, valid_sequence_starts
from rlreplay.assemble.stack_last import stack_frames_last
from rlreplay.assemble.transitions import (
    Window,
    assemble_transitions,
    nstep_window,
    stack_frames,
    stack_pair,
)

__all__ = [
    "Window",
    "assemble_transitions",
    "gather_runs",
    "nstep_window",
    "stack_frames",
    "stack_frames_last",
    "stack_pair",
    "valid_sequence_starts",
]
