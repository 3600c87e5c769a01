"""ALF-style actors in child processes feeding a learner through one shared replay buffer.

``ReplayBuffer(..., allow_multiprocess=True)`` is ALF's buffer shared between processes: the
actors, started with ``torch.multiprocessing`` and given the buffer as a ``Process`` argument,
write their environment's steps with a blocking ``add_batch``; the buffer holds only
``max_length`` steps per environment, so they wait until the learner, in the parent process,
takes steps out with a blocking ``dequeue``. Then a child process sets priorities that steer
the parent's prioritized draws. Every check is an ``assert`` on what ALF documents.
"""

import torch
import torch.multiprocessing as mp

# from alf.data_structures import StepType
# from alf.experience_replayers.replay_buffer import ReplayBuffer
# from alf.tensor_specs import TensorSpec
from rlreplay.compat.alf import StepType, TensorSpec
from rlreplay.compat.alf.replay_buffer import ReplayBuffer

NUM_ENVS = 2
STEPS = 12  # steps each actor writes
MAX_LENGTH = 4  # steps the buffer keeps per environment: actors wait for the learner

data_spec = dict(
    step_type=TensorSpec((), torch.int32),
    observation=TensorSpec((2,)),
    reward=TensorSpec(()),
)


def time_step(env_id, t):
    """Step ``t`` of environment ``env_id`` (batch of one): observation ``[env_id, t]``."""
    step_type = StepType.FIRST if t == 0 else StepType.MID
    return dict(
        step_type=torch.tensor([step_type], dtype=torch.int32),
        observation=torch.tensor([[float(env_id), float(t)]]),
        reward=torch.tensor([float(t)]),
    )


def actor(replay_buffer, env_id):
    for t in range(STEPS):
        replay_buffer.add_batch(time_step(env_id, t), torch.tensor([env_id]), blocking=True)


def prioritize(replay_buffer, env_id, pos):
    """Give every stored step priority 0 except ``(env_id, pos)``."""
    envs = torch.arange(NUM_ENVS).repeat_interleave(MAX_LENGTH)
    positions = torch.arange(MAX_LENGTH).repeat(NUM_ENVS)
    keep = (envs == env_id) & (positions == pos)
    replay_buffer.update_priority(envs, positions, keep.float())


def main():
    ctx = mp.get_context("fork")
    replay_buffer = ReplayBuffer(
        data_spec,
        num_environments=NUM_ENVS,
        max_length=MAX_LENGTH,
        allow_multiprocess=True,
    )
    actors = [ctx.Process(target=actor, args=(replay_buffer, e)) for e in range(NUM_ENVS)]
    for p in actors:
        p.start()

    # The learner: two steps of every environment at a time, in the order they were added.
    seen = []
    for _ in range(STEPS // 2):
        exp = replay_buffer.dequeue(n=2, blocking=True)
        assert exp["observation"].shape == (NUM_ENVS, 2, 2)
        seen.append(exp["observation"][:, :, 1])
    for p in actors:
        p.join(60)
        assert p.exitcode == 0, p.exitcode
    steps = torch.cat(seen, dim=1)
    assert steps.tolist() == [list(map(float, range(STEPS)))] * NUM_ENVS, steps
    assert replay_buffer.total_size.item() == 0
    print(f"the learner got {STEPS} steps of each of {NUM_ENVS} actor processes, in order")

    # A child process sets priorities; the parent's prioritized draws follow them.
    prio_buffer = ReplayBuffer(
        data_spec,
        num_environments=NUM_ENVS,
        max_length=MAX_LENGTH,
        prioritized_sampling=True,
        allow_multiprocess=True,
    )
    for t in range(MAX_LENGTH):
        prio_buffer.add_batch(
            dict(
                step_type=torch.full((NUM_ENVS,), StepType.MID, dtype=torch.int32),
                observation=torch.tensor([[0.0, t], [1.0, t]]),
                reward=torch.zeros(NUM_ENVS),
            )
        )
    p = ctx.Process(target=prioritize, args=(prio_buffer, 1, 2))
    p.start()
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    batch, info = prio_buffer.get_batch(batch_size=8, batch_length=1)
    assert info.env_ids.tolist() == [1] * 8 and info.positions.tolist() == [2] * 8
    assert batch["observation"][:, 0].tolist() == [[1.0, 2.0]] * 8
    print("the parent's prioritized draws follow the child's update_priority")


if __name__ == "__main__":
    main()
