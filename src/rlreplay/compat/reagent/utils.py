"""Stand-in for ``reagent.replay_memory.utils``: export a buffer as a pre-timeline DataFrame.

reagent 0.1's ``replay_buffer_to_pre_timeline_df`` (``reagent/replay_memory/utils.py``,
BSD-licensed, Copyright (c) Facebook, Inc. and its affiliates) is followed line by line, on the
batch of every valid slot: the same columns in the same order, the same Python values
(``state_features`` keyed by int, ``mdp_id`` as ``batch.mdp_id.tolist()``, ``possible_actions``
from the batch's distinct actions), and the same exception types at the same steps.

One deliberate difference: 0.1 exports ``sample_transition_batch_tensor(batch_size=size)``, a
draw *with replacement* of ``size`` slots, so about a third of the transitions (``1/e``) are
silently left out of the dataset and others repeated, and the timeline built from it pairs
states with the wrong successors (a repeated ``sequence_number``, a skipped one). rlreplay
exports every valid slot once, in slot order (the seed's ``sample_all_valid_transitions``),
each row read as 0.1 reads that slot, whatever it holds (a slot set valid by hand reads what
0.1 reads there: zeros for a padding row or a slot never written, stale rows past the cursor).
It draws nothing from NumPy's or Python's global generator (0.1's export does).

pandas is imported only when :func:`replay_buffer_to_pre_timeline_df` is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rlreplay import ConfigError, ShapeError
from rlreplay.compat.reagent._errors import SlotRangeError, StackedRewardError
from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_DS",
    "ExportDimensionError",
    "ExportShapeError",
    "MissingElementError",
    "StackedRewardError",
    "replay_buffer_to_pre_timeline_df",
]

#: The ``ds`` (date partition) every exported row gets.
DEFAULT_DS = "2019-01-01"


class ExportShapeError(ShapeError, AssertionError):
    """An element of a shape 0.1's export asserts against (an ``AssertionError`` there)."""


class ExportDimensionError(ShapeError, IndexError):
    """A state without the stack axis 0.1's ``t.squeeze(2)`` reads (``IndexError`` there)."""


class MissingElementError(ConfigError, AttributeError):
    """The buffer stores no ``mdp_id``, ``sequence_number`` or ``log_prob`` extra, which 0.1's
    export reads from the batch (``AttributeError`` there)."""


def replay_buffer_to_pre_timeline_df(
    is_discrete_action: bool, replay_buffer: ReplayBuffer
) -> pd.DataFrame:
    """Format needed for uploading a dataset to Hive, and then running timeline.

    One row per valid slot, in slot order, read as :meth:`ReplayBuffer.sample_transition_batch`
    reads it. The columns, in order, are reagent 0.1's:

    - ``ds``: :data:`DEFAULT_DS`;
    - ``state_features``: ``{0: x0, 1: x1, ...}`` of each row of ``batch.state`` (int keys,
      Python values of the state's dtype);
    - ``action``: ``str(action)`` when ``is_discrete_action``, else a dict like
      ``state_features``;
    - ``mdp_id``: ``batch.mdp_id.tolist()`` (a scalar extra gives one-element lists);
    - ``sequence_number``, ``reward``: the values of the ``(B, 1)`` elements (``reward`` is the
      n-step return when ``update_horizon > 1``);
    - ``action_probability``: ``exp(log_prob)``, computed by NumPy in the extra's dtype;
    - ``metrics``: ``{"reward": reward}``;
    - ``possible_actions_mask``, ``possible_actions``: with ``is_discrete_action``, every
      distinct action of the batch as a str (mask all ones) on a non-terminal row, ``[]`` on a
      terminal one; otherwise the extras of those names when the buffer stores them, else no
      such columns.

    Args:
        is_discrete_action: Whether actions are discrete (one value per step).
        replay_buffer: The buffer to export (uniform or prioritized), storing the extras
            ``mdp_id``, ``sequence_number`` and ``log_prob`` (as ``create_from_env`` declares).

    Returns:
        A :class:`pandas.DataFrame` with ``replay_buffer.size`` rows.

    Raises:
        RuntimeError: No valid slot (uniform buffer; 0.1's ``sample_index_batch``).
        Exception: No valid slot and all priorities zero (0.1's empty sum tree).
        IndexError: No valid slot, priorities set (0.1 indexes its store with the sum tree's
            empty float array).
        IndexError: Scalar observations with ``stack_size=1`` (0.1's ``squeeze(2)`` of the
            ``(B, 1)`` state).
        AssertionError: Actions that are not ``(B, 1)`` (discrete) or ``(B, d)``, or a state
            that is not ``(B, d)`` (stacked or image observations), as 0.1 asserts.
        NotImplementedError: ``return_everything_as_stack`` with ``update_horizon > 1``.
        AttributeError: A missing ``sequence_number``, ``log_prob`` or ``mdp_id`` extra.

    Example:
        >>> import numpy as np
        >>> from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer, ReplayElement
        >>> extras = [ReplayElement("mdp_id", (), np.int64),
        ...           ReplayElement("sequence_number", (), np.int64),
        ...           ReplayElement("log_prob", (), np.float32)]
        >>> buf = ReplayBuffer((2,), 1, 10, 2, observation_dtype=np.float32,
        ...                    extra_storage_types=extras)
        >>> for t in range(3):
        ...     buf.add(np.full(2, t, np.float32), t % 2, 1.0, t == 2, 0, t, 0.0)
        >>> df = replay_buffer_to_pre_timeline_df(True, buf)
        >>> df.sequence_number.tolist(), df.possible_actions.tolist()
        ([0, 1, 2], [['0', '1'], ['0', '1'], []])
    """
    import pandas as pd

    n = replay_buffer.size
    if n == 0:
        _empty_export(replay_buffer)
    if replay_buffer._return_everything_as_stack and replay_buffer._update_horizon > 1:
        # 0.1's sample_transition_batch refuses to stack n-step rewards.
        raise StackedRewardError.for_horizon(replay_buffer._update_horizon)
    batch = replay_buffer.sample_all_valid_transitions()
    if replay_buffer._stack_size == 1 and tuple(replay_buffer._observation_shape) == ():
        # 0.1's sample_transition_batch_tensor squeezes the stack axis with t.squeeze(2),
        # which a (B, 1) state of scalar observations does not have.
        raise ExportDimensionError(
            f"state: expected a stack axis 2 to squeeze, got shape {tuple(batch.state.shape)} "
            "(observation_shape=(), stack_size=1; torch: Dimension out of range (expected to "
            "be in range of [-2, 1], but got 2))"
        )

    # actions is inconsistent between models, so let's infer them.
    possible_actions_mask = getattr(batch, "possible_actions_mask", None)
    possible_actions = getattr(batch, "possible_actions", None)

    terminal = batch.terminal.squeeze(1).tolist()
    if len(batch.action.shape) != 2:
        raise ExportShapeError(
            f"action: expected a (B, d) batch, got shape {tuple(batch.action.shape)} "
            "(reagent 0.1 asserts len(batch.action.shape) == 2)"
        )
    action: list[Any]
    if is_discrete_action:
        if batch.action.shape[1] != 1:
            raise ExportShapeError(
                f"discrete action batch with shape {tuple(batch.action.shape)}: expected "
                "(B, 1), one action per step"
            )
        action = [str(a) for a in batch.action[:, 0].tolist()]
        # 0.1 assumes the batch explored the whole action space.
        unique_actions = np.unique(batch.action.numpy())
        possible_actions_mask = [
            [1 for _ in range(len(unique_actions))] if not elem_terminal else []
            for elem_terminal in terminal
        ]
        possible_actions = [
            [str(a) for a in unique_actions] if not elem_terminal else []
            for elem_terminal in terminal
        ]
    else:
        action = _dense_to_sparse(batch.action)

    sequence_number = _element(batch, "sequence_number").squeeze(1).tolist()
    log_prob = _element(batch, "log_prob").squeeze(1)
    action_probability = np.exp(log_prob.numpy()).tolist()
    reward = batch.reward.squeeze(1).tolist()
    rows = {
        "ds": [DEFAULT_DS for _ in range(n)],
        "state_features": _dense_to_sparse(batch.state),
        "action": action,
        "mdp_id": _element(batch, "mdp_id").tolist(),
        "sequence_number": sequence_number,
        "action_probability": action_probability,
        "reward": reward,
        "metrics": [{"reward": r} for r in reward],
    }
    if possible_actions_mask is not None:
        rows["possible_actions_mask"] = possible_actions_mask
    if possible_actions is not None:
        rows["possible_actions"] = possible_actions
    return pd.DataFrame.from_dict(rows)


def _empty_export(replay_buffer: ReplayBuffer) -> None:
    """What 0.1's ``sample_transition_batch_tensor(batch_size=0)`` does with no valid slot.

    Its uniform draw raises ``RuntimeError`` and its prioritized draw ``Exception`` on an empty
    sum tree (the front-end's :meth:`~ReplayBuffer.sample_index_batch` raises the same);
    otherwise the sum tree's ``np.array([])`` is float64 and indexing the store with it raises
    ``IndexError``.
    """
    replay_buffer.sample_index_batch(0)
    raise SlotRangeError(
        "indices: expected integers, got an empty float64 array (with no valid slot reagent "
        "0.1's prioritized draw returns np.array([]), and indexing its store with it raises: "
        "arrays used as indices must be of integer (or boolean) type)"
    )


def _element(batch: Any, name: str) -> Any:
    """``batch.<name>``, or 0.1's ``AttributeError`` with the fix spelled out."""
    try:
        return getattr(batch, name)
    except AttributeError:
        raise MissingElementError(
            f"{name}: expected an element {name!r} in the batch (declare the extra "
            f"ReplayElement({name!r}, (), ...) as create_from_env does), got only "
            f"{list(batch._fields)}"
        ) from None


def _dense_to_sparse(dense: Any) -> list[dict[int, Any]]:
    """Convert a dense ``(B, d)`` tensor to 0.1's sparse rows ``{i: value}``."""
    if len(dense.shape) != 2:
        raise ExportShapeError(f"dense shape is {tuple(dense.shape)}: expected (B, d)")
    return [dict(enumerate(elem)) for elem in dense.tolist()]
