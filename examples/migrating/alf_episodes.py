"""ALF-style episodic replay (hindsight goals, episodic returns), moved by changing imports only.

Environments that time out start over with a ``FIRST`` step straight after a ``MID`` one (no
``LAST``), as ALF's ``keep_episodic_info`` index allows: a ``FIRST`` begins an episode. A
hindsight relabeller draws ``batch_length=1`` steps by priority, finds each step's episode end
with ``steps_to_episode_end`` and reads a future achieved goal with ``get_field``;
``record_episodic_return`` gives the discounted return of every step of an episode that
completed with ``LAST``, and ``default_return`` to the others. A one-slot buffer
(``max_length=1``) keeps only each env's newest step. Every check is an ``assert`` on what ALF
documents.
"""

import torch

# from alf.data_structures import StepType
# from alf.experience_replayers.replay_buffer import ReplayBuffer
# from alf.tensor_specs import TensorSpec
from rlreplay.compat.alf import StepType, TensorSpec
from rlreplay.compat.alf.replay_buffer import ReplayBuffer

NUM_ENVS = 3
GAMMA = 0.5
DEFAULT_RETURN = -100.0

data_spec = dict(
    step_type=TensorSpec((), torch.int32),
    reward=TensorSpec(()),
    discount=TensorSpec(()),
    observation=dict(achieved_goal=TensorSpec((2,)), desired_goal=TensorSpec((2,))),
)


def episode_plan(env_id):
    """Step types of env ``env_id``: episodes that end with LAST, and ones cut by a time limit."""
    if env_id == 0:  # 4 steps ending in LAST, then 5 more
        return [0, 1, 1, 2, 0, 1, 1, 1, 1]
    if env_id == 1:  # a time limit: FIRST straight after MID
        return [0, 1, 1, 0, 1, 1, 1, 2, 0]
    return [0, 1, 2, 0, 1, 2, 0, 1, 1]


def step(t):
    types = torch.tensor([episode_plan(e)[t] for e in range(NUM_ENVS)], dtype=torch.int32)
    last = types == StepType.LAST
    return dict(
        step_type=types,
        reward=torch.where(last, 1.0, 0.1),
        discount=torch.where(last, 0.0, 1.0),
        observation=dict(
            achieved_goal=torch.stack([torch.full((NUM_ENVS,), float(t)), torch.arange(3.0)], 1),
            desired_goal=torch.zeros(NUM_ENVS, 2),
        ),
    )


def main():
    torch.manual_seed(0)
    replay_buffer = ReplayBuffer(
        data_spec,
        num_environments=NUM_ENVS,
        max_length=16,
        prioritized_sampling=True,
        keep_episodic_info=True,
        record_episodic_return=True,
        gamma=GAMMA,
        default_return=DEFAULT_RETURN,
    )
    for t in range(9):
        replay_buffer.add_batch(step(t))

    # Episodes begin at FIRST steps, also at env 1's FIRST after a MID (position 3).
    env_ids = torch.tensor([0, 1, 1, 2])
    pos = torch.tensor([2, 2, 5, 7])
    begins = replay_buffer.get_episode_begin_position(pos, env_ids)
    assert begins.tolist() == [0, 0, 3, 6], begins
    to_end = replay_buffer.steps_to_episode_end(pos, env_ids)
    assert to_end.tolist() == [1, 0, 2, 1], to_end  # env 2 still runs: to its newest step

    # Hindsight relabelling: each sampled step's goal becomes a future achieved goal.
    experience, info = replay_buffer.get_batch(batch_size=64, batch_length=1)
    assert experience["reward"].shape == (64, 1)
    assert (info.importance_weights == 1.0).all()  # equal priorities: weight 1 each
    newest = (info.positions == 8).sum().item()
    assert newest > 0, "batch_length=1 draws the newest step of a running episode too"
    future = info.positions + replay_buffer.steps_to_episode_end(info.positions, info.env_ids)
    goals = replay_buffer.get_field("observation.achieved_goal", info.env_ids, future)
    assert goals.shape == (64, 2)
    assert (goals[:, 0] >= info.positions).all() and (goals[:, 1] == info.env_ids).all()
    replay_buffer.update_priority(info.env_ids, info.positions, torch.rand(64) + 0.5)

    # Returns: env 0's first episode completed (LAST at 3): the rewards after each step.
    _, info = replay_buffer.gather_all()
    returns = info.discounted_return
    assert returns.shape == (NUM_ENVS, 9)
    want0 = [0.1 + GAMMA * 0.1 + GAMMA**2 * 1.0, 0.1 + GAMMA * 1.0, 1.0, 0.0]
    assert torch.allclose(returns[0, :4], torch.tensor(want0))
    # env 1's episode at 0..2 was cut by a FIRST: it never completed.
    assert (returns[1, :3] == DEFAULT_RETURN).all()
    assert (returns[0, 4:] == DEFAULT_RETURN).all()  # still running

    # A one-slot buffer keeps the newest step of each env.
    latest = ReplayBuffer(data_spec, num_environments=NUM_ENVS, max_length=1)
    for t in range(4):
        latest.add_batch(step(t))
    data, info = latest.gather_all()
    assert latest.total_size.item() == NUM_ENVS and info.positions.tolist() == [3] * NUM_ENVS
    assert data["observation"]["achieved_goal"][:, 0, 0].tolist() == [3.0] * NUM_ENVS
    print("alf_episodes: FIRST-begun episodes, hindsight goals and returns as ALF documents them")


if __name__ == "__main__":
    main()
