"""nnabla-rl's ReplayBuffer and DecorableReplayBuffer, as nnabla-rl's users write them, on rlreplay.

An explorer appends ``(s, a, r, non_terminal, s_next, info)`` tuples with float observations
(``non_terminal = float(not done)``, as nnabla-rl's environment explorers build them), a
trainer samples them (``sample``, ``sample_indices`` with ``num_steps``, ``buffer[i]``), and
buffers also keep arbitrary objects as experiences, handed back as appended, through
``decor_fun`` too. The only change for rlreplay is the import line. The script checks what
the buffers return and exits 0.
"""

import numpy as np

# from nnabla_rl.replay_buffer import ReplayBuffer
# from nnabla_rl.replay_buffers import DecorableReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffer import ReplayBuffer
from rlreplay.compat.nnabla_rl.replay_buffers import DecorableReplayBuffer


def rollout(rng, num_steps, episode_length=20):
    """Experiences of a toy 3-D random walk that resets every ``episode_length`` steps."""
    experiences = []
    s = np.zeros(3, dtype=np.float32)
    for t in range(num_steps):
        a = np.array([rng.integers(2)], dtype=np.int64)
        s_next = (s + rng.normal(size=3)).astype(np.float32)
        done = (t + 1) % episode_length == 0
        r = float(-np.linalg.norm(s_next))
        experiences.append((s, a, r, float(not done), s_next, {"step": t}))
        s = np.zeros(3, dtype=np.float32) if done else s_next
    return experiences


def main():
    rng = np.random.default_rng(0)
    experiences = rollout(rng, 250)

    # --- a plain bounded buffer: the newest 200 experiences
    buffer = ReplayBuffer(capacity=200)
    buffer.append_all(experiences)
    assert len(buffer) == 200 and buffer.capacity == 200
    s, a, r, non_terminal, s_next, info = buffer[0]  # the oldest kept experience
    assert info["step"] == 50 and np.array_equal(s, experiences[50][0])
    assert np.array_equal(s_next, experiences[50][4])
    assert s.dtype == np.float32 and a.dtype == np.int64 and isinstance(r, float)
    assert non_terminal == experiences[50][3]
    assert buffer[0] == experiences[50] and experiences[51] == buffer[1]  # tuples of arrays

    batch, info = buffer.sample(num_samples=32)
    assert len(batch) == 32 and info["weights"].shape == (32, 1)
    assert len({e[5]["step"] for e in batch}) == 32  # distinct experiences
    assert all(e == buffer[e[5]["step"] - 50] for e in batch)  # a sample is the stored one
    s_batch = np.stack([e[0] for e in batch])
    a_batch = np.stack([e[1] for e in batch])
    r_batch = np.array([[e[2]] for e in batch])
    non_terminal_batch = np.array([[e[3]] for e in batch])
    s_next_batch = np.stack([e[4] for e in batch])
    assert s_batch.shape == (32, 3) and s_next_batch.dtype == np.float32
    assert a_batch.shape == (32, 1) and r_batch.shape == non_terminal_batch.shape == (32, 1)

    # n-step reading: entry j holds the experiences j steps after the drawn ones
    steps, info = buffer.sample_indices([0, 10, 100], num_steps=3)
    assert len(steps) == 3 and all(len(entry) == 3 for entry in steps)
    assert [e[5]["step"] for e in steps[2]] == [52, 62, 152]
    try:
        buffer[200]  # nnabla-rl's ring raises KeyError past the end
    except KeyError:
        pass
    else:
        raise AssertionError("expected KeyError")

    # --- any object as an experience: kept and handed back as appended
    notes = ReplayBuffer(capacity=5)
    notes.append(experiences[0])
    notes.append(42)
    notes.append({"episode": 3, "return": -12.5})
    notes.append(("s", "a", "r", 1.0, "s_next"))  # a 5-tuple without info
    assert notes[1] == 42 and notes[2]["return"] == -12.5 and len(notes[3]) == 5
    assert np.array_equal(notes[0][0], experiences[0][0])  # nothing lost or reordered

    # --- a decorable buffer: decor_fun sees each experience as stored
    def add_noise(experience):
        s, a, r, non_terminal, s_next, info = experience
        return (s + 0.01, a, r, non_terminal, s_next, info)

    decorable = DecorableReplayBuffer(capacity=100, decor_fun=add_noise)
    decorable.append_all(experiences[:100])
    s, *_ = decorable[5]
    assert np.allclose(s, experiences[5][0] + 0.01)
    batch, _ = decorable.sample(num_samples=8)
    assert all(np.allclose(e[0], experiences[e[5]["step"]][0] + 0.01) for e in batch)

    labels = DecorableReplayBuffer(capacity=10, decor_fun=lambda e: ("seen", e))
    labels.append_all(["cart", "pole", 7])
    assert [labels[i] for i in range(3)] == [("seen", "cart"), ("seen", "pole"), ("seen", 7)]
    print("nnabla_rl_basic: ok", len(buffer), len(notes), len(decorable))


if __name__ == "__main__":
    main()
