"""An ALF-style replay loop, moved to rlreplay by changing only the import lines.

The experience is a nest of ``TensorSpec`` (a dict with a nested observation, as ALF's
``Experience`` is), written one time step of every environment at a time with ``add_batch``.
An off-policy learner draws ``get_batch(batch_size, batch_length)`` sequences uniformly, then
from a prioritized buffer whose priorities it updates with ``update_priority``; an on-policy
learner takes everything with ``gather_all`` and empties the buffer with ``clear``. Every check
is an ``assert`` on what ALF documents.
"""

import torch

# from alf.data_structures import StepType
# from alf.experience_replayers.replay_buffer import ReplayBuffer
# from alf.tensor_specs import TensorSpec
from rlreplay.compat.alf import StepType, TensorSpec
from rlreplay.compat.alf.replay_buffer import ReplayBuffer

NUM_ENVS = 4
EPISODE = 7  # steps per episode of the toy environment

data_spec = dict(
    step_type=TensorSpec((), torch.int32),
    reward=TensorSpec(()),
    discount=TensorSpec(()),
    observation=dict(pos=TensorSpec((2,)), image=TensorSpec((3, 3), torch.uint8)),
    action=TensorSpec((), torch.int64),
    logits=TensorSpec((2,), torch.bfloat16),  # a policy run in bfloat16 (mixed precision)
)


class ToyEnvs:
    """NUM_ENVS walkers; env e is at step ``t`` of its episode, observation ``(t, e)``."""

    def __init__(self):
        self.t = torch.arange(NUM_ENVS) % EPISODE  # the envs are out of phase

    def step(self, action):
        step_type = torch.where(
            self.t == 0,
            StepType.FIRST,
            torch.where(self.t == EPISODE - 1, StepType.LAST, StepType.MID),
        ).to(torch.int32)
        exp = dict(
            step_type=step_type,
            reward=(self.t == EPISODE - 1).float(),
            discount=torch.where(self.t == EPISODE - 1, 0.0, 1.0),
            observation=dict(
                pos=torch.stack([self.t.float(), torch.arange(NUM_ENVS).float()], 1),
                image=(10 * self.t[:, None, None]).expand(-1, 3, 3).to(torch.uint8),
            ),
            action=action,
            logits=torch.stack([self.t / 3, -self.t / 3], 1).to(torch.bfloat16),
        )
        self.t = (self.t + 1) % EPISODE
        return exp


def collect(buffer, envs, steps):
    for _ in range(steps):
        action = torch.randint(0, 2, (NUM_ENVS,))
        buffer.add_batch(envs.step(action))


def check_sequences(batch, info, batch_size, batch_length):
    pos = batch["observation"]["pos"]
    assert pos.shape == (batch_size, batch_length, 2)
    assert batch["observation"]["image"].dtype == torch.uint8
    # bfloat16 leaves come back as stored: bfloat16, the values the policy produced.
    assert batch["logits"].dtype == torch.bfloat16
    assert torch.equal(batch["logits"][:, :, 0], (pos[:, :, 0] / 3).to(torch.bfloat16))
    assert info.env_ids.shape == info.positions.shape == (batch_size,)
    # "The environments where the samples are from are ordered in the returned batch."
    assert torch.all(info.env_ids[1:] >= info.env_ids[:-1])
    # Each row is batch_length consecutive steps of one env, starting at info.positions.
    assert torch.equal(pos[:, :, 1], info.env_ids[:, None].float().expand(-1, batch_length))
    step = pos[:, :, 0]
    wrapped = (step[:, 1:] == 0) & (step[:, :-1] == EPISODE - 1)  # crossed into a new episode
    assert torch.all((step[:, 1:] == step[:, :-1] + 1) | wrapped)


def off_policy():
    buffer = ReplayBuffer(data_spec, num_environments=NUM_ENVS, max_length=32)
    envs = ToyEnvs()
    collect(buffer, envs, 50)
    assert buffer.total_size.item() == NUM_ENVS * 32  # each env keeps its newest 32 steps

    batch, info = buffer.get_batch(batch_size=16, batch_length=3)
    check_sequences(batch, info, 16, 3)
    # "env_ids: environment id for each sequence": B // E sequences per env.
    assert torch.bincount(info.env_ids, minlength=NUM_ENVS).tolist() == [4, 4, 4, 4]
    assert info.importance_weights == ()  # uniform sampling has no weights

    # get_field reads stored steps back by (env_ids, positions).
    actions = buffer.get_field("action", info.env_ids, info.positions)
    assert torch.equal(actions, batch["action"][:, 0])


def prioritized():
    buffer = ReplayBuffer(
        data_spec, num_environments=NUM_ENVS, max_length=32, prioritized_sampling=True
    )
    envs = ToyEnvs()
    collect(buffer, envs, 40)
    batch, info = buffer.get_batch(batch_size=64, batch_length=2)
    check_sequences(batch, info, 64, 2)
    # New steps all start at initial_priority, so every weight is N * P(i) = 1.
    assert torch.allclose(info.importance_weights, torch.ones(64))

    # The learner's TD errors become priorities: env 2's sampled starts get 50, others 1.
    priorities = torch.where(info.env_ids == 2, 50.0, 1.0)
    buffer.update_priority(info.env_ids, info.positions, priorities)
    starts = list(zip(info.env_ids.tolist(), info.positions.tolist(), strict=True))
    given = dict(zip(starts, priorities.tolist(), strict=True))

    batch, info = buffer.get_batch(batch_size=256, batch_length=2)
    rows = zip(info.env_ids.tolist(), info.positions.tolist(), strict=True)
    prio = torch.tensor([given.get(row, 1.0) for row in rows])  # unsampled starts kept 1
    assert (prio == 50.0).float().mean() > 0.5  # they hold most of the priority mass now
    # importance_weights: "priority divided by the average of all non-zero priorities".
    w = info.importance_weights
    assert torch.allclose(w[prio == 50.0], 50 * w[prio == 1.0][0])


def on_policy():
    buffer = ReplayBuffer(data_spec, num_environments=NUM_ENVS, max_length=8)
    envs = ToyEnvs()
    for _ in range(3):  # three training iterations
        collect(buffer, envs, 8)
        experience, info = buffer.gather_all()
        # "nested Tensors of shape [B, T, ...], where B=num_environments, T=current_size"
        assert experience["observation"]["pos"].shape == (NUM_ENVS, 8, 2)
        assert info.env_ids.tolist() == list(range(NUM_ENVS))
        assert len(set(info.positions.tolist())) == 1  # the same start for every env
        assert experience["step_type"].dtype == torch.int32
        buffer.clear()
        assert buffer.total_size.item() == 0


if __name__ == "__main__":
    torch.manual_seed(0)
    off_policy()
    prioritized()
    on_policy()
    print("alf_replay: uniform, prioritized and on-policy replay as ALF documents them")
