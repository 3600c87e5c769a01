"""Stand-in for ``reagent.replay_memory.utils``: export a buffer as a pre-timeline DataFrame.

pandas is imported only when :func:`replay_buffer_to_pre_timeline_df` is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlreplay.compat.reagent.circular_replay_buffer import ReplayBuffer

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "DEFAULT_DS", "replay_buffer_to_pre_timeline_df"]

#: The ``ds`` (date partition) every exported row gets.
DEFAULT_DS = "2019-01-01"

#: Columns of the pre-timeline table, in order.
COLUMNS = (
    "ds",
    "mdp_id",
    "sequence_number",
    "state_features",
    "action",
    "action_probability",
    "reward",
    "possible_actions",
    "metrics",
)


def replay_buffer_to_pre_timeline_df(
    is_discrete_action: bool, replay_buffer: ReplayBuffer
) -> pd.DataFrame:
    """Format needed for uploading a dataset to Hive, and then running timeline.

    One row per valid transition, in slot order, with the columns of ReAgent's pre-timeline
    table: ``ds``, ``mdp_id`` (str), ``sequence_number`` (int), ``state_features`` (a dict
    ``{"0": x0, "1": x1, ...}`` of the flattened state), ``action`` (the action as a str when
    ``is_discrete_action``, else a dict like ``state_features``), ``action_probability``
    (``exp(log_prob)`` when the buffer stores a ``log_prob`` extra, else None), ``reward``
    (float; the n-step return when ``update_horizon > 1``), ``possible_actions`` (the str names
    of the allowed actions from a ``possible_actions_mask`` extra, else None) and ``metrics``
    (``{"reward": reward}``).

    ``mdp_id`` and ``sequence_number`` come from extras of those names when the buffer stores
    them; otherwise ``mdp_id`` names the episode (the core id of its first step) and
    ``sequence_number`` is the step's position in it, from 0.

    Args:
        is_discrete_action: Whether actions are discrete (one int per step).
        replay_buffer: The buffer to export (uniform or prioritized).

    Returns:
        A :class:`pandas.DataFrame` with the columns above.

    Raises:
        ValueError: ``is_discrete_action`` with a non-scalar action shape.
    """
    import pandas as pd

    if is_discrete_action and replay_buffer._action_shape not in ((), (1,)):
        raise ValueError(
            f"is_discrete_action: expected scalar actions, got shape {replay_buffer._action_shape}"
        )
    batch = replay_buffer.sample_all_valid_transitions()
    n = int(batch.indices.shape[0])
    if n == 0:
        return pd.DataFrame({c: [] for c in COLUMNS}, columns=list(COLUMNS))
    names = set(batch._fields)
    slots = batch.indices.reshape(-1).numpy()
    state = batch.state.reshape(n, -1).tolist()
    reward = batch.reward.reshape(n, -1)[:, 0].tolist()
    action = batch.action.reshape(n, -1)
    actions: list[Any]
    if is_discrete_action:
        actions = [str(int(a)) for a in action[:, 0].tolist()]
    else:
        actions = _dense_to_sparse(action.tolist())
    if "mdp_id" in names and "sequence_number" in names:
        mdp_ids = [str(x) for x in batch.mdp_id.reshape(-1).tolist()]
        sequence_numbers = [int(x) for x in batch.sequence_number.reshape(-1).tolist()]
    else:
        ids = replay_buffer._slot_id[slots]
        first = replay_buffer._core.episode_begin(ids)
        mdp_ids = [str(int(x)) for x in first]
        sequence_numbers = [int(x) for x in ids - first]
    if "log_prob" in names:
        probability: list[Any] = batch.log_prob.reshape(n, -1)[:, 0].exp().tolist()
    else:
        probability = [None] * n
    if "possible_actions_mask" in names:
        masks = batch.possible_actions_mask.reshape(n, -1).tolist()
        possible: list[Any] = [[str(i) for i, m in enumerate(row) if m] for row in masks]
    else:
        possible = [None] * n
    frame = {
        "ds": [DEFAULT_DS] * n,
        "mdp_id": mdp_ids,
        "sequence_number": sequence_numbers,
        "state_features": _dense_to_sparse(state),
        "action": actions,
        "action_probability": probability,
        "reward": reward,
        "possible_actions": possible,
        "metrics": [{"reward": r} for r in reward],
    }
    return pd.DataFrame(frame, columns=list(COLUMNS))


def _dense_to_sparse(rows: list[list[float]]) -> list[dict[str, float]]:
    return [{str(i): float(v) for i, v in enumerate(row)} for row in rows]
