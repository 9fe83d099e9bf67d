"""Chameleon's adaptive exploration: a PPO agent that walks a configuration space (torch, imported on use).

The environment (as in Chameleon's ``rl_model_optimizer.py``): the state is each knob's option
index divided by its number of options; an action moves every knob at once by -1, 0 or +1 (one
3-way categorical head per knob), clamped to the knob's range; the reward is the cost model's
score of the *new* configuration. An episode starts at a random configuration and ends when at
least ``stay_ratio`` (75%) of the knobs stayed or were stuck at a bound, or after ``max_steps``.

Deviation from the reference: the episodes of one search run as **one batch** (all step together,
one cost-model call per step for the still-running episodes) and PPO updates once per batch, with
``epochs`` passes of at most ``n_episodes`` minibatches each, so the number of gradient steps per
round equals the original's (one minibatch per episode per epoch) while a round takes seconds.
Advantages are normalised over the batch instead of per episode.

>>> import numpy as np
>>> from toolkit.tuning.search.ppo_agent import PPOAgent
>>> agent = PPOAgent(n_knobs=2, seed=0)
>>> score = lambda x: 1.0 - np.abs(x / 9.0 - 0.5).sum(axis=1)
>>> roll = run_episodes(agent, [10, 10], score, np.zeros((4, 2), dtype=np.int64), max_steps=20)
>>> roll.knobs.shape[1], len(roll.knobs) == len(roll.scores) == roll.n_steps
(2, True)
>>> sorted(agent.update(roll))
['entropy', 'policy_loss', 'value_loss']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from toolkit.tuning.core.space import ConfigSpace
    from toolkit.tuning.search.ppo_agent import PPOAgent


@dataclass
class Rollout:
    """A batch of episodes, flattened over the transitions that happened.

    ``obs``/``actions``/``logp`` are ``[N, K]``; ``rewards``, ``values``, ``next_values`` (0 after the
    last step of an episode), ``done``, ``episode`` and ``step`` are ``[N]``, ordered by step then
    episode. ``knobs``/``scores`` are the visited configurations (knob indices) and their rewards.
    """

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    rewards: np.ndarray
    values: np.ndarray
    next_values: np.ndarray
    done: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    knobs: np.ndarray
    n_episodes: int

    @property
    def scores(self) -> np.ndarray:
        """Reward (cost-model score) of each visited configuration."""
        return self.rewards

    @property
    def n_steps(self) -> int:
        """Number of transitions (agent steps) in the batch."""
        return len(self.rewards)

    def advantages(self, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """GAE advantages and TD(0) value targets, per transition."""
        delta = self.rewards + gamma * self.next_values - self.values
        target = self.rewards + gamma * self.next_values
        adv = np.zeros_like(delta)
        running = np.zeros(self.n_episodes)
        for t in range(int(self.step.max()), -1, -1):  # transitions are grouped by step
            rows = np.flatnonzero(self.step == t)
            ep = self.episode[rows]
            running[ep] = delta[rows] + gamma * lam * np.where(self.done[rows], 0.0, running[ep])
            adv[rows] = running[ep]
        return adv, target


def run_episodes(agent: PPOAgent, dims: Sequence[int], score_fn: Callable[[np.ndarray], np.ndarray],
                 starts: np.ndarray, max_steps: int = 500, stay_ratio: float = 0.75) -> Rollout:
    """Run one episode per row of ``starts`` (knob indices) as a batch; ``score_fn([n, K]) -> [n]``.

    Each step calls ``score_fn`` once on the new configurations of the episodes still running.
    """
    dims_a = np.asarray(dims, dtype=np.int64)
    scale = dims_a.astype(np.float64)
    x = np.array(starts, dtype=np.int64)
    n_ep, k = x.shape
    need = stay_ratio * k
    alive = np.arange(n_ep)
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ("obs", "act", "logp", "rew", "val", "done", "ep", "step",
                                                         "knobs")}
    t = 0
    while len(alive):
        obs = x[alive] / scale
        act, logp, val = agent.act(obs)
        moved = x[alive] + act - 1
        new = np.clip(moved, 0, dims_a - 1)
        good = ((act == 1) | (moved != new)).sum(axis=1)
        done = (good >= need) | (t + 1 >= max_steps)
        rew = np.asarray(score_fn(new), dtype=np.float64)
        x[alive] = new
        for c, v in (("obs", obs), ("act", act), ("logp", logp), ("rew", rew), ("val", val), ("done", done),
                     ("ep", alive), ("step", np.full(len(alive), t)), ("knobs", new)):
            cols[c].append(v)
        alive = alive[~done]
        t += 1
    cat = {c: np.concatenate(v) for c, v in cols.items()}
    # V(s_{t+1}) for transitions that did not end their episode: the next row of the same episode
    next_values = np.zeros(len(cat["rew"]))
    nxt_obs = cat["knobs"] / scale
    cont = ~cat["done"]
    if cont.any():
        next_values[cont] = agent.values(nxt_obs[cont])
    return Rollout(cat["obs"], cat["act"], cat["logp"], cat["rew"], cat["val"], next_values, cat["done"],
                   cat["ep"], cat["step"], cat["knobs"], n_ep)


class RLOptimizer:
    """Chameleon's model optimizer: PPO episodes against the cost model, best visited configs out.

    Same interface as :class:`~toolkit.tuning.search.annealing.SimulatedAnnealing`: :meth:`find_maximums` and the
    ``n_queries`` counter (configurations scored). The agent is created on the first call and keeps
    learning across calls (one optimizer per task), while ``score_fn`` changes as the model is refit.
    ``agent_options`` are :class:`PPOAgent` keyword arguments. With ``elite_share > 0`` that share
    of the episodes starts from the ``elite`` configs given to :meth:`find_maximums` (cycling through
    them; edgetune's variant), the rest from random configs (the reference).
    """

    def __init__(self, n_episodes: int = 128, max_steps: int = 500, stay_ratio: float = 0.75, seed: int = 0,
                 torch_threads: int = 1, elite_share: float = 0.0, **agent_options: float) -> None:
        self.n_episodes = n_episodes
        self.elite_share = elite_share
        self.max_steps = max_steps
        self.stay_ratio = stay_ratio
        self.seed = seed
        self.torch_threads = torch_threads
        self.agent_options = agent_options
        self.agent: PPOAgent | None = None
        self.n_queries = 0
        """Number of configurations scored by the cost model so far."""
        self.n_steps = 0
        """Number of agent transitions so far."""
        self.mean_rewards: list[float] = []
        """Mean reward of each search (a learning curve)."""

    def stats(self) -> dict[str, float]:
        """Agent steps so far and the mean reward of the last search."""
        return {"rl_steps": float(self.n_steps),
                "rl_mean_reward": self.mean_rewards[-1] if self.mean_rewards else float("nan")}

    def find_maximums(self, space: ConfigSpace, score_fn: Callable[[np.ndarray], np.ndarray], num: int,
                      exclude: Iterable[int], rng: np.random.Generator, elite: Sequence[int] = ()) -> list[int]:
        """Up to ``num`` distinct visited indices (best predicted first), none in ``exclude``.

        ``elite``: configs (e.g. the best measured) that ``elite_share`` of the episodes start from.
        """
        import torch

        from toolkit.tuning.search.ppo_agent import PPOAgent

        threads = torch.get_num_threads()
        torch.set_num_threads(self.torch_threads)
        try:
            if self.agent is None or self.agent.n_knobs != len(space.dims):
                self.agent = PPOAgent(len(space.dims), seed=self.seed, **self.agent_options)

            def score_knobs(knobs: np.ndarray) -> np.ndarray:
                self.n_queries += len(knobs)
                return score_fn(space.from_knob_indices_array(knobs))

            dims = np.asarray(space.dims, dtype=np.int64)
            starts = rng.integers(0, dims, size=(self.n_episodes, len(dims)))
            n_elite = min(int(round(self.elite_share * self.n_episodes)), self.n_episodes) if len(elite) else 0
            if n_elite:
                picks = np.resize(np.asarray(elite, dtype=np.int64), n_elite)
                starts[:n_elite] = space.knob_indices_array(picks)
            roll = run_episodes(self.agent, dims, score_knobs, starts, self.max_steps, self.stay_ratio)
            self.agent.update(roll)
        finally:
            torch.set_num_threads(threads)
        self.n_steps += roll.n_steps
        self.mean_rewards.append(float(roll.rewards.mean()))
        idx = space.from_knob_indices_array(roll.knobs)
        order = np.argsort(-roll.scores, kind="stable")
        out: list[int] = []
        seen = {int(i) for i in exclude}
        for i in idx[order]:
            i = int(i)
            if i not in seen:
                seen.add(i)
                out.append(i)
                if len(out) == num:
                    break
        return out
