"""The PPO agent: network shapes, episode mechanics, GAE, and learning a planted optimum."""

import numpy as np
import torch

from toolkit.tuning.search.ppo import RLOptimizer, run_episodes
from toolkit.tuning.search.ppo_agent import PolicyValueNet, PPOAgent
from toolkit.tuning.core.space import CategoricalKnob, ConfigSpace, SplitKnob

DIMS = np.array([8, 8, 6, 6, 2, 2, 1])
OPT = np.array([6, 1, 4, 2, 1, 0, 0])


def smooth_score(x: np.ndarray) -> np.ndarray:
    """A smooth synthetic cost model with its maximum (1.0) at OPT."""
    z = (x - OPT) / np.maximum(DIMS - 1, 1)
    return np.exp(-2.0 * (z ** 2).sum(axis=1))


def test_network_has_one_three_way_head_per_knob() -> None:
    net = PolicyValueNet(n_knobs=5)
    logits, value = net(torch.zeros(7, 5))
    assert logits.shape == (7, 5, 3) and value.shape == (7,)


def test_episodes_move_each_knob_by_at_most_one_and_end_on_stay_ratio() -> None:
    agent = PPOAgent(len(DIMS), seed=0)
    starts = np.random.default_rng(0).integers(0, DIMS, size=(16, len(DIMS)))
    roll = run_episodes(agent, DIMS, smooth_score, starts, max_steps=40)
    assert set(roll.episode.tolist()) == set(range(16))
    assert roll.done.sum() == 16                       # every episode ends exactly once
    prev = starts.copy()
    for t in range(int(roll.step.max()) + 1):
        rows = np.flatnonzero(roll.step == t)
        ep = roll.episode[rows]
        assert np.abs(roll.knobs[rows] - prev[ep]).max() <= 1
        assert ((roll.knobs[rows] >= 0) & (roll.knobs[rows] < DIMS)).all()
        stuck = (roll.actions[rows] == 1) | (prev[ep] + roll.actions[rows] - 1 != roll.knobs[rows])
        ended = stuck.sum(axis=1) >= 0.75 * len(DIMS)
        assert (roll.done[rows] == (ended | (t + 1 >= 40))).all()
        prev[ep] = roll.knobs[rows]
    assert np.allclose(roll.rewards, smooth_score(roll.knobs))


def test_gae_matches_the_recursion() -> None:
    agent = PPOAgent(len(DIMS), seed=1)
    roll = run_episodes(agent, DIMS, smooth_score, np.zeros((3, len(DIMS)), dtype=np.int64), max_steps=30)
    adv, target = roll.advantages(0.9, 0.99)
    for e in range(3):
        rows = np.flatnonzero(roll.episode == e)          # in step order
        expect, running = [], 0.0
        for r in rows[::-1]:
            delta = roll.rewards[r] + 0.9 * roll.next_values[r] - roll.values[r]
            running = delta + 0.9 * 0.99 * running
            expect.append(running)
        assert np.allclose(adv[rows], expect[::-1])
        assert roll.next_values[rows[-1]] == 0.0


def test_agent_learns_a_planted_optimum() -> None:
    torch.set_num_threads(1)
    agent = PPOAgent(len(DIMS), seed=0)
    rng = np.random.default_rng(0)
    means = []
    for _ in range(10):
        roll = run_episodes(agent, DIMS, smooth_score, rng.integers(0, DIMS, size=(128, len(DIMS))), max_steps=100)
        means.append(roll.rewards.mean())
        agent.update(roll)
    assert np.mean(means[-3:]) > 2 * np.mean(means[:2]), means


def test_rl_optimizer_returns_best_unvisited_configs() -> None:
    space = ConfigSpace([SplitKnob("a", 64), SplitKnob("b", 48), CategoricalKnob("c", [1, 2, 4])])
    opt = RLOptimizer(n_episodes=32, max_steps=50, seed=0)

    def score(idx: np.ndarray) -> np.ndarray:
        return -np.abs(space.knob_indices_array(idx) - [3, 5, 1]).sum(axis=1).astype(float)

    best = space.from_knob_indices([3, 5, 1])
    out = opt.find_maximums(space, score, 10, {best}, np.random.default_rng(0))
    assert best not in out and len(out) == len(set(out)) == 10
    scores = score(np.array(out))
    assert (np.diff(scores) <= 0).all()
    assert opt.n_queries == opt.n_steps > 0 and opt.agent.n_updates == 1


def test_elite_starts_search_around_the_given_configs() -> None:
    space = ConfigSpace([SplitKnob("a", 64), SplitKnob("b", 48), CategoricalKnob("c", [1, 2, 4])])
    elite = [space.from_knob_indices([0, 0, 0]), space.from_knob_indices([6, 9, 2])]
    opt = RLOptimizer(n_episodes=16, max_steps=1, seed=0, elite_share=1.0)

    def score(idx: np.ndarray) -> np.ndarray:
        return np.zeros(len(idx))

    out = opt.find_maximums(space, score, 32, set(), np.random.default_rng(0), elite=elite)
    starts = space.knob_indices_array(elite)
    for k in space.knob_indices_array(out):   # one step from an elite start: every knob within 1
        assert (np.abs(starts - k).max(axis=1) <= 1).any(), k
    rand = RLOptimizer(n_episodes=16, max_steps=1, seed=0).find_maximums(space, score, 32, set(),
                                                                        np.random.default_rng(0), elite=elite)
    assert any((np.abs(starts - k).max(axis=1) > 1).all() for k in space.knob_indices_array(rand))
