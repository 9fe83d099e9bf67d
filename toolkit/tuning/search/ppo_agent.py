"""The PPO agent of Chameleon's exploration (torch): one policy/value network, batched updates.

Imported only when an RL search runs (``toolkit.tuning.search.ppo`` and the tuners list stay free of torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from toolkit.tuning.search.ppo import Rollout

class _MultiLinear(nn.Module):
    """``n`` independent dense layers applied to ``[batch, n, in]`` (one per knob head)."""

    def __init__(self, n: int, d_in: int, d_out: int) -> None:
        super().__init__()
        bound = 1.0 / np.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(n, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, d_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bki,kio->bko", x, self.weight) + self.bias


class PolicyValueNet(nn.Module):
    """Chameleon's networks: a policy trunk with one 3-way head per knob, and a separate value net.

    Policy: obs -> Dense(hidden, tanh) x2; head per knob: Dense(head_hidden, tanh) -> Dense(head_hidden,
    tanh) -> / temperature -> Dense(3) (logits). Value: obs -> Dense(value_hidden, tanh) x3 -> Dense(1).
    """

    def __init__(self, n_knobs: int, hidden: int = 20, head_hidden: int = 3, value_hidden: int = 20,
                 temperature: float = 0.1) -> None:
        super().__init__()
        self.n_knobs = n_knobs
        self.temperature = temperature
        self.trunk = nn.Sequential(nn.Linear(n_knobs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.head1 = _MultiLinear(n_knobs, hidden, head_hidden)
        self.head2 = _MultiLinear(n_knobs, head_hidden, head_hidden)
        self.head3 = _MultiLinear(n_knobs, head_hidden, 3)
        self.value = nn.Sequential(
            nn.Linear(n_knobs, value_hidden), nn.Tanh(), nn.Linear(value_hidden, value_hidden), nn.Tanh(),
            nn.Linear(value_hidden, value_hidden), nn.Tanh(), nn.Linear(value_hidden, 1),
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, K]`` -> action logits ``[B, K, 3]`` and values ``[B]``."""
        h = self.trunk(obs).unsqueeze(1).expand(-1, self.n_knobs, -1)
        h = torch.tanh(self.head2(torch.tanh(self.head1(h)))) / self.temperature
        return self.head3(h), self.value(obs).squeeze(-1)


class PPOAgent:
    """A PPO learner over multi-discrete actions {decrement, stay, increment} per knob.

    Defaults are Chameleon's (``ppo_core.py``/``rl_model_optimizer.py``): Adam lr 1e-3 (eps 1e-5),
    3 epochs, minibatch 32, gamma 0.9, GAE lambda 0.99, clip 0.2, value coefficient c1 1.0, entropy
    coefficient c2 0.3. The agent keeps its weights across :meth:`update` calls (it persists over the
    tuning iterations of a task while the reward model changes).
    """

    def __init__(self, n_knobs: int, seed: int = 0, *, lr: float = 1e-3, epochs: int = 3, minibatch: int = 32,
                 gamma: float = 0.9, lam: float = 0.99, clip: float = 0.2, c1: float = 1.0, c2: float = 0.3,
                 hidden: int = 20, head_hidden: int = 3, value_hidden: int = 20, temperature: float = 0.1) -> None:
        self.n_knobs = n_knobs
        self.epochs, self.minibatch = epochs, minibatch
        self.gamma, self.lam, self.clip, self.c1, self.c2 = gamma, lam, clip, c1, c2
        self.generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = PolicyValueNet(n_knobs, hidden, head_hidden, value_hidden, temperature)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=lr, eps=1e-5)
        self.n_updates = 0

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions for ``obs [B, K]``: actions ``[B, K]`` in {0, 1, 2}, log-probs ``[B, K]``, values ``[B]``."""
        logits, value = self.net(torch.as_tensor(obs, dtype=torch.float32))
        logp = torch.log_softmax(logits, dim=-1)
        act = torch.multinomial(logp.exp().reshape(-1, 3), 1, generator=self.generator).reshape(logp.shape[:2])
        return act.numpy(), logp.gather(-1, act.unsqueeze(-1)).squeeze(-1).numpy(), value.numpy()

    @torch.no_grad()
    def values(self, obs: np.ndarray) -> np.ndarray:
        """State values of ``obs [B, K]``."""
        return self.net(torch.as_tensor(obs, dtype=torch.float32))[1].numpy()

    def update(self, roll: Rollout) -> dict[str, float]:
        """One PPO update on a batch of episodes; returns the last minibatch's loss terms."""
        adv, target = roll.advantages(self.gamma, self.lam)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        obs = torch.as_tensor(roll.obs, dtype=torch.float32)
        act = torch.as_tensor(roll.actions, dtype=torch.int64)
        logp_old = torch.as_tensor(roll.logp, dtype=torch.float32)
        adv_t = torch.as_tensor(adv, dtype=torch.float32).unsqueeze(-1)
        target_t = torch.as_tensor(target, dtype=torch.float32)
        n = len(obs)
        n_batches = max(1, min(-(-n // self.minibatch), roll.n_episodes))
        out: dict[str, float] = {}
        for _ in range(self.epochs):
            perm = torch.randperm(n, generator=self.generator)
            for b in range(n_batches):
                i = perm[b * self.minibatch:(b + 1) * self.minibatch]
                logits, value = self.net(obs[i])
                logp_all = torch.log_softmax(logits, dim=-1)
                logp = logp_all.gather(-1, act[i].unsqueeze(-1)).squeeze(-1)
                ratio = torch.exp(logp - logp_old[i])  # per knob head
                surr = torch.min(ratio * adv_t[i], torch.clamp(ratio, 1 - self.clip, 1 + self.clip) * adv_t[i])
                entropy = -(logp_all.exp() * logp_all).sum(-1)
                policy_obj = surr.mean(0).sum() + self.c2 * entropy.mean(0).sum()
                value_loss = ((target_t[i] - value) ** 2).mean()
                loss = -policy_obj + self.c1 * value_loss
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                out = {"policy_loss": -float(surr.mean(0).sum().detach()), "value_loss": float(value_loss.detach()),
                       "entropy": float(entropy.mean(0).sum().detach())}
        self.n_updates += 1
        return out
