"""DQN on CartPole where the whole training loop is one compiled ``jax.lax.scan``.

Every iteration of the scan steps 16 CartPole environments written in ``jax.numpy`` (the
classic-control dynamics, episodes truncated at 200 steps), adds the step to an
``rlreplay.jax`` buffer, samples a prioritized batch of 3-step transitions, takes one Adam step
of a double-DQN loss weighted by the importance weights and hands the |TD errors| back as
priorities. Nothing leaves the device until the scan ends: environment, replay and learner are
one XLA program, compiled once; the buffer state is donated, so it is updated in place.

What the buffer does for the learner: ``reward`` is the 3-step discounted sum within the
episode, ``discount`` is ``0`` after a termination and ``gamma ** steps`` otherwise (so a
truncated episode bootstraps from its true final observation, ``next_obs``), and ``weights``
are importance weights normalised over the whole buffer.

Run: ``python examples/dqn_jax_jit.py`` (about half a minute on a laptop CPU; it prints the
mean return of the episodes that ended in each stretch of training, then checks the greedy
policy: at least 150 out of 200, where random play gets about 22). Needs only JAX:
``pip install "rlreplay[jax]"``. ``--iterations``, ``--envs`` and ``--batch`` make it
smaller or larger.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.example_libraries import optimizers

import rlreplay as rr
import rlreplay.jax as rrj

MAX_STEPS = 200  # truncation
GAMMA = 0.99


# ------------------------------------------------------------------ CartPole in jax.numpy
def cartpole_step(state: Any, action: Any) -> tuple[Any, Any]:
    """One Euler step of the classic cart-pole; ``(next_state, terminated)``."""
    x, x_dot, theta, theta_dot = state[..., 0], state[..., 1], state[..., 2], state[..., 3]
    force = jnp.where(action == 1, 10.0, -10.0)
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
    theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
    x_acc = temp - 0.05 * theta_acc * cos / 1.1
    nxt = jnp.stack(
        [x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot,
         theta_dot + 0.02 * theta_acc],
        axis=-1,
    )  # fmt: skip
    terminated = (jnp.abs(nxt[..., 0]) > 2.4) | (jnp.abs(nxt[..., 2]) > 12 * 2 * np.pi / 360)
    return nxt, terminated


def cartpole_reset(key: Any, n: int) -> Any:
    return jax.random.uniform(key, (n, 4), minval=-0.05, maxval=0.05)


# ------------------------------------------------------------------ the Q-network
def init_mlp(key: Any, sizes: list[int]) -> list[tuple[Any, Any]]:
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(k, (a, b)) * jnp.sqrt(2.0 / a), jnp.zeros(b))
        for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def q_values(params: list[tuple[Any, Any]], obs: Any) -> Any:
    h = obs
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return h @ w + b


class Carry(NamedTuple):
    buffer: rrj.BufferState
    opt_state: Any
    target: Any
    env: Any  # (E, 4) cart-pole states
    t: Any  # (E,) steps into the current episode
    ret: Any  # (E,) return of the current episode so far
    key: Any


def make_train(args: argparse.Namespace) -> tuple[rrj.JaxBuffer, Any, Any]:
    """The buffer, the optimizer and the jitted training scan."""
    E, B = args.envs, args.batch
    buf = rrj.make_buffer(
        capacity=args.capacity, num_envs=E,
        fields={"obs": rr.Field((4,), np.float32), "action": rr.Field((), np.int32)},
        n_step=3, gamma=GAMMA, prioritized=True, alpha=0.6, beta=0.4, beta_final=1.0,
        beta_steps=args.iterations,
    )  # fmt: skip
    opt_init, opt_update, get_params = optimizers.adam(args.lr)
    explore = max(1, int(0.3 * args.iterations))

    def loss(params: Any, target: Any, batch: rrj.JaxBatch) -> tuple[Any, Any]:
        q = jnp.take_along_axis(q_values(params, batch.obs), batch.action[:, None], 1)[:, 0]
        best = jnp.argmax(q_values(params, batch.next_obs), axis=1)  # double DQN
        q_next = jnp.take_along_axis(q_values(target, batch.next_obs), best[:, None], 1)[:, 0]
        y = batch.reward + batch.discount * jax.lax.stop_gradient(q_next)
        td = q - y
        return jnp.mean(batch.weights * huber(td)), td

    def iteration(carry: Carry, i: Any) -> tuple[Carry, Any]:
        key, k_act, k_eps, k_reset, k_sample = jax.random.split(carry.key, 5)
        params = get_params(carry.opt_state)
        # Act: epsilon-greedy, epsilon from 1 to 0.05 over the first 30% of iterations.
        eps = jnp.maximum(0.05, 1.0 - 0.95 * i / explore)
        greedy = jnp.argmax(q_values(params, carry.env), axis=1)
        uniform = jax.random.randint(k_act, (E,), 0, 2)
        action = jnp.where(jax.random.uniform(k_eps, (E,)) < eps, uniform, greedy)
        nxt, terminated = cartpole_step(carry.env, action)
        truncated = (carry.t + 1 >= MAX_STEPS) & ~terminated
        state = buf.add(carry.buffer, {
            "obs": carry.env, "action": action.astype(jnp.int32),
            "reward": jnp.ones(E, jnp.float32), "terminated": terminated,
            "truncated": truncated, "next_obs": nxt,
        })  # fmt: skip
        done = terminated | truncated
        ret = carry.ret + 1.0
        env = jnp.where(done[:, None], cartpole_reset(k_reset, E), nxt)
        # Learn: one step on a prioritized batch once the buffer holds enough.
        batch = buf.sample(state, k_sample, B)
        ready = buf.num_sampleable(state) >= args.warmup
        (_, td), grads = jax.value_and_grad(loss, has_aux=True)(params, carry.target, batch)
        opt_state = jax.lax.cond(
            ready, lambda s: opt_update(i, grads, s), lambda s: s, carry.opt_state
        )
        state = buf.update_priorities(state, batch.ids, jnp.where(ready, jnp.abs(td), -1.0))
        target = jax.lax.cond(
            i % args.target_every == 0, lambda _: get_params(opt_state), lambda t: t,
            carry.target,
        )  # fmt: skip
        new = Carry(state, opt_state, target, env, jnp.where(done, 0, carry.t + 1),
                    jnp.where(done, 0.0, ret), key)  # fmt: skip
        # Per iteration: the summed returns and the number of episodes that ended.
        return new, (jnp.sum(jnp.where(done, ret, 0.0)), jnp.sum(done))

    def train(buffer: rrj.BufferState, key: Any) -> tuple[Carry, Any]:
        k_net, k_env, key = jax.random.split(key, 3)
        params = init_mlp(k_net, [4, args.hidden, args.hidden, 2])
        carry = Carry(buffer, opt_init(params), params, cartpole_reset(k_env, E),
                      jnp.zeros(E, jnp.int32), jnp.zeros(E), key)  # fmt: skip
        return jax.lax.scan(iteration, carry, jnp.arange(args.iterations))

    return buf, get_params, jax.jit(train, donate_argnums=0)


def huber(x: Any) -> Any:
    """The Huber loss with delta 1 (as optax.huber_loss), written out to need only JAX."""
    a = jnp.abs(x)
    return jnp.where(a <= 1.0, 0.5 * x**2, a - 0.5)


def evaluate(params: Any, key: Any, n: int) -> Any:
    """Mean return of ``n`` greedy episodes (at most ``MAX_STEPS`` steps each)."""

    def step(carry: Any, _: Any) -> tuple[Any, None]:
        env, alive, ret = carry
        nxt, terminated = cartpole_step(env, jnp.argmax(q_values(params, env), axis=1))
        return (nxt, alive & ~terminated, ret + alive), None

    start = (cartpole_reset(key, n), jnp.ones(n, bool), jnp.zeros(n))
    (_, _, ret), _ = jax.lax.scan(step, start, None, length=MAX_STEPS)
    return jnp.mean(ret)


def main(argv: list[str] | None = None) -> int:
    """Train, print the learning curve and the greedy score; 0 if it reaches the pass mark."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=6_000)
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--capacity", type=int, default=50_000)
    p.add_argument("--warmup", type=int, default=1_000)
    p.add_argument("--target-every", type=int, default=250)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=12, help="rows of the printed learning curve")
    p.add_argument("--pass-mark", type=float, default=150.0)
    args = p.parse_args(argv)
    buf, get_params, train = make_train(args)
    t0 = time.perf_counter()
    carry, (returns, ended) = train(buf.init(), jax.random.key(args.seed))
    returns, ended = np.asarray(returns), np.asarray(ended)
    seconds = time.perf_counter() - t0
    print(f"{args.iterations} iterations x {args.envs} envs in {seconds:.1f} s (compile included)")
    print(f"{'env steps':>10}  {'episodes':>8}  mean return")
    for chunk in np.array_split(np.arange(args.iterations), min(args.rows, args.iterations)):
        n = int(ended[chunk].sum())
        mean = f"{returns[chunk].sum() / n:11.1f}" if n else "          -"
        print(f"{(chunk[-1] + 1) * args.envs:>10}  {n:>8}  {mean}")
    score = float(evaluate(get_params(carry.opt_state), jax.random.key(args.seed + 1), 64))
    print(f"greedy policy: mean return {score:.1f} over 64 episodes (pass mark {args.pass_mark})")
    return 0 if score >= args.pass_mark else 1


if __name__ == "__main__":
    raise SystemExit(main())
