"""An R2D2-style recurrent learner step in JAX on CartPole, fed by rlreplay's sequences.

An LSTM Q-network learns from fixed-length sequences drawn by priority (``sample_sequences``),
as R2D2 does:

* sequences of ``BURN_IN + UNROLL`` stored steps that stop at episode ends (``mask`` marks the
  real steps), unrolled from a zero LSTM state; in a sequence that starts mid-episode the
  first ``BURN_IN`` steps only warm the state up (no loss on them), while one that starts its
  episode (``episode_begin(ids) == ids``) learns from every step;
* double-Q targets under R2D2's value rescaling ``h(x) = sign(x)(sqrt(|x|+1)-1) + eps x``,
  bootstrapping from the true final observation of a truncated episode (``next_obs``) and not
  at all after a termination;
* importance weights from the prioritized buffer, and per-step |TD errors| handed back to
  ``update_priorities``, which reduces each sequence to ``eta * max + (1 - eta) * mean`` over
  its learned steps;
* batches converted with ``rlreplay.io.convert(batch, "jax")`` (DLPack) and drawn one ahead
  on a background thread (``rlreplay.io.Prefetcher``) while the learner step runs.

``VISIBLE = np.array([0, 2])`` hides the velocities (a partially observed CartPole that needs
the memory; it learns more slowly). The run takes about a minute on one idle CPU core and
checks that the greedy policy learned (a mean return of at least 100; random play gets about
22).

    pip install -e ".[jax,gym]" && python examples/r2d2_jax.py
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from jax.example_libraries import optimizers

import rlreplay as rr
from rlreplay.io import Prefetcher, convert

SEED, HIDDEN, GAMMA, ETA = 0, 64, 0.99, 0.9
BURN_IN, UNROLL, BATCH = 4, 16, 32
ENV_STEPS, WARMUP, TRAIN_EVERY = 16_000, 1_000, 4
VISIBLE = np.array([0, 1, 2, 3])  # what the agent sees (np.array([0, 2]) hides velocities)


def h(x: Any) -> Any:  # R2D2's value rescaling and its inverse
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + 1e-3 * x


def h_inv(x: Any) -> Any:
    eps = 1e-3
    return jnp.sign(x) * (
        ((jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(x) + 1.0 + eps)) - 1.0) / (2.0 * eps)) ** 2 - 1.0
    )


def init_params(key: Any) -> dict[str, Any]:
    k1, k2 = jax.random.split(key)
    scale = 1.0 / np.sqrt(HIDDEN)
    return {
        "w_in": jax.random.normal(k1, (VISIBLE.size + HIDDEN, 4 * HIDDEN)) * scale,
        "b_in": jnp.zeros(4 * HIDDEN).at[HIDDEN : 2 * HIDDEN].set(1.0),  # forget gate bias
        "w_out": jax.random.normal(k2, (HIDDEN, 2)) * scale,
        "b_out": jnp.zeros(2),
    }


def lstm_step(params: dict[str, Any], carry: Any, x: Any) -> tuple[Any, Any]:
    c, hid = carry
    gates = jnp.concatenate([x, hid], -1) @ params["w_in"] + params["b_in"]
    i, f, g, o = jnp.split(gates, 4, -1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    hid = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (c, hid), hid @ params["w_out"] + params["b_out"]


def unroll(params: dict[str, Any], xs: Any, carry: Any = None) -> tuple[Any, Any]:
    """Run the LSTM over ``xs`` ``(B, T, obs)`` from ``carry`` (default zeros).

    Returns:
        The final ``(c, h)`` state and the Q-values ``(B, T, 2)``.
    """
    if carry is None:
        zeros = jnp.zeros((xs.shape[0], HIDDEN))
        carry = (zeros, zeros)
    carry, q = jax.lax.scan(lambda c, x: lstm_step(params, c, x), carry, xs.swapaxes(0, 1))
    return carry, q.swapaxes(0, 1)


def loss_fn(params: Any, target: Any, b: dict[str, Any]) -> tuple[Any, Any]:
    B = b["action"].shape[0]
    rows = jnp.arange(B)
    n_real = b["mask"].sum(1)
    # Inputs: the L stored observations, then the final observation after the last real step
    # (before it, each step's next observation is the following step's observation).
    xs = jnp.concatenate([b["obs"], jnp.zeros_like(b["obs"][:, :1])], 1)
    xs = xs.at[rows, n_real].set(b["next_obs"][rows, n_real - 1])
    q = unroll(params, xs)[1]  # (B, L + 1, 2), from a zero state
    q_target = unroll(target, xs)[1]
    best = q[:, 1:].argmax(-1)  # double Q: the online network picks, the target evaluates
    boot = h_inv(jnp.take_along_axis(q_target[:, 1:], best[..., None], -1)[..., 0])
    y = h(b["reward"] + GAMMA * (1.0 - b["terminated"]) * boot)
    chosen = jnp.take_along_axis(q[:, :-1], b["action"][..., None], -1)[..., 0]
    td = jax.lax.stop_gradient(y) - chosen
    learn = b["mask"] & b["learn"]  # burn-in steps only warm the state up: no loss on them
    per_seq = jnp.where(learn, td**2, 0.0).sum(1) / jnp.maximum(learn.sum(1), 1)
    return (b["weights"] * per_seq).mean(), jnp.abs(td)


opt_init, opt_update, get_params = optimizers.adam(1e-3)


@jax.jit
def learner_step(i: int, state: Any, target: Any, b: dict[str, Any]) -> tuple[Any, Any, Any]:
    (loss, td), grads = jax.value_and_grad(loss_fn, has_aux=True)(get_params(state), target, b)
    grads = jax.tree_util.tree_map(lambda g: jnp.clip(g, -1.0, 1.0), grads)
    return opt_update(i, grads, state), loss, td


@jax.jit
def act_step(params: Any, carry: Any, x: Any) -> tuple[Any, Any]:
    return lstm_step(params, carry, x[None])


def evaluate(params: Any, episodes: int = 10) -> float:
    env = gym.make("CartPole-v1")
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=50_000 + k)
        carry = (jnp.zeros((1, HIDDEN)), jnp.zeros((1, HIDDEN)))
        done = False
        while not done:
            carry, q = act_step(params, carry, jnp.asarray(obs[VISIBLE]))
            obs, r, term, trunc, _ = env.step(int(q.argmax()))
            total += float(r)
            done = term or trunc
    return total / episodes


def main() -> None:
    env = gym.make("CartPole-v1")
    buf = rr.PrioritizedReplayBuffer(
        50_000, {"obs": rr.Field((VISIBLE.size,), np.float32), "action": rr.Field((), np.int32)},
        alpha=0.9, beta=0.6, seed=SEED,
    )  # fmt: skip
    state = opt_init(init_params(jax.random.PRNGKey(SEED)))
    target = get_params(state)
    rng = np.random.default_rng(SEED)
    L = BURN_IN + UNROLL
    batches = None
    obs, _ = env.reset(seed=SEED)
    carry = (jnp.zeros((1, HIDDEN)), jnp.zeros((1, HIDDEN)))
    started, updates, losses = time.monotonic(), 0, []
    params = get_params(state)
    before = evaluate(params)
    try:
        for step in range(1, ENV_STEPS + 1):
            x = obs[VISIBLE].astype(np.float32)
            carry, q = act_step(params, carry, jnp.asarray(x))
            eps = max(0.05, 1.0 - step / (ENV_STEPS / 2))
            action = int(rng.integers(2)) if rng.random() < eps else int(q.argmax())
            obs, reward, term, trunc, _ = env.step(action)
            buf.add(obs=x, action=action, reward=reward, terminated=term, truncated=trunc,
                    next_obs=obs[VISIBLE].astype(np.float32))  # fmt: skip
            if term or trunc:
                obs, _ = env.reset()
                carry = (jnp.zeros((1, HIDDEN)), jnp.zeros((1, HIDDEN)))
            if step < WARMUP or step % TRAIN_EVERY:
                continue
            if batches is None:  # one batch drawn ahead while the learner step runs
                batches = Prefetcher(lambda: buf.sample_sequences(BATCH, L), prefetch=1)
            batch = next(batches)
            # A sequence that starts its episode needs no burn-in: its zero state is exact.
            fresh = buf.episode_begin(batch.ids) == batch.ids
            b_learn = fresh[:, None] | (np.arange(L) >= BURN_IN)
            b = dict(convert(batch.replace(learn=b_learn), "jax"))
            state, loss, td = learner_step(updates, state, target, b)
            learned = batch.mask & b_learn
            ok = learned.any(axis=1)  # priorities from the learned steps of each sequence
            buf.update_priorities(batch.ids[ok], np.asarray(td)[ok], mask=learned[ok], eta=ETA)
            params = get_params(state)
            updates += 1
            losses.append(float(loss))
            if updates % 100 == 0:
                target = get_params(state)
            if step % 4_000 == 0:
                print(f"step {step:6d}  updates {updates:5d}  loss {np.mean(losses[-250:]):.4f}"
                      f"  {time.monotonic() - started:5.1f} s", flush=True)  # fmt: skip
    finally:
        if batches is not None:
            batches.close()
    after = evaluate(get_params(state))
    print(f"greedy return: {before:.1f} before training, {after:.1f} after ({updates} updates)")
    assert after >= 100.0, f"the recurrent learner did not learn: {before} -> {after}"


if __name__ == "__main__":
    main()
