"""The tuners' shared option groups, each option declared once with its range, and the parts made from them.

A named tuner's ``options`` table is built from these groups (``replace(option, default=...)`` where it
keeps another default); its ``make_model``/``make_optimizer``/``make_sampler`` call the factories below
with its ``params``.

>>> LOOP_OPTIONS["epsilon"].check("epsilon", 0.5)
0.5
>>> RL_OPTIONS["stay_ratio"].check("stay_ratio", 0)
Traceback (most recent call last):
...
toolkit.errors.ConfigError: option stay_ratio=0.0 must be > 0
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.ppo import RLOptimizer
from toolkit.tuning.search.sampling import K_RULES, REDUCTIONS, REPRESENTATIVES, AdaptiveSampler
from toolkit.tuning.tuners.base import Option

COMPILE_TABLE_MAX = 1 << 13
"""``features="compile"`` compiles every config of the space once; larger spaces are refused."""

LOOP_OPTIONS = {
    "plan_size": Option(64, "refit the cost model and plan this many candidates every plan_size measurements", int,
                        low=1),
    "epsilon": Option(0.05, "fraction of each plan drawn at random (AutoTVM: 0.05)", float, low=0, high=1),
}
"""AutoTVM's plan/refit loop (:class:`~toolkit.tuning.tuners.model_based.ModelBasedTuner`)."""

MODEL_OPTIONS = {
    "loss": Option("rank", "cost-model loss: rank (rank:pairwise, AutoTVM's default) or reg (regression on "
                   "normalised throughput, Chameleon's)", str, ("rank", "reg")),
    "max_rounds": Option(400, "upper bound on boosting rounds per fit (early stopping after 20 flat rounds)", int,
                         low=1),
    "features": Option("knob", "cost-model features: knob (the knob values, AutoTVM feature_type=knob), compile "
                       "(knob values + what the compiler reports for each config, the analogue of AutoTVM's "
                       "itervar features; compiles the whole space once, at most 8192 configs) or auto (compile "
                       "where the task compiles ahead and the space allows, else knob)", str,
                       ("knob", "compile", "auto")),
}
"""The XGBoost cost model (AutoTVM's and Chameleon's)."""

SA_OPTIONS = {
    "sa_chains": Option(128, "parallel simulated-annealing chains", int, low=1),
    "sa_steps": Option(500, "simulated-annealing steps per plan", int),
    "sa_early_stop": Option(50, "stop annealing after this many steps without a better candidate", int, low=1),
    "sa_persistent": Option(True, "annealing chains continue across plans", bool),
}
"""AutoTVM's simulated annealing."""

RL_OPTIONS = {
    "episodes": Option(128, "PPO episodes per search round, run as one batch (reference parallel_size)", int, low=1),
    "max_steps": Option(500, "step limit of one episode (reference n_iter)", int, low=1),
    "stay_ratio": Option(0.75, "an episode ends when this share of knobs stayed or hit a bound", float,
                         low=0, high=1, low_open=True),
    "hidden": Option(20, "width of the two policy trunk layers", int, low=1),
    "head_hidden": Option(3, "width of the two hidden layers of each per-knob head", int, low=1),
    "value_hidden": Option(20, "width of the three value-network layers", int, low=1),
    "temperature": Option(0.1, "divisor applied inside each per-knob head", float, low=0, low_open=True),
    "lr": Option(1e-3, "Adam learning rate (eps 1e-5)", float, low=0, low_open=True),
    "epochs": Option(3, "PPO epochs per update", int, low=1),
    "minibatch": Option(32, "PPO minibatch size (transitions)", int, low=1),
    "gamma": Option(0.9, "discount factor", float, low=0, high=1),
    "lam": Option(0.99, "GAE lambda", float, low=0, high=1),
    "clip": Option(0.2, "PPO clip epsilon", float, low=0, low_open=True),
    "c1": Option(1.0, "value-loss coefficient", float, low=0),
    "c2": Option(0.3, "entropy coefficient (summed over knob heads)", float, low=0),
    "torch_threads": Option(1, "torch CPU threads during the search", int, low=1),
}
"""Chameleon's PPO exploration."""

SAMPLING_OPTIONS = {
    "k_min": Option(8, "smallest number of clusters tried", int, low=1),
    "k_max": Option(64, "largest number of clusters tried", int, low=1),
    "k_step": Option(8, "step between cluster counts tried", int, low=1),
    "k_threshold": Option(2.5, "knee: stop when the k-means loss no longer drops by this factor", float,
                          low=1, low_open=True),
    "k_rule": Option("knee", "knee: keep the last k that paid off; stop: keep the k where the loop stopped "
                     "(reference code)", str, K_RULES),
    "n_cardinal": Option(2, "cluster on this many knobs with the most options", int, low=1),
    "representative": Option("nearest", "per cluster, measure the candidate nearest the centroid, a config "
                             "synthesised at the centroid (reference code), or the best-predicted member (best: "
                             "picks ordered best first)", str, REPRESENTATIVES),
    "reduction": Option("mode", "synthesis of a redundant sample: mode (per-knob mode of its cluster, paper) or "
                        "sample (centroid + random candidate values, reference code)", str, REDUCTIONS),
}
"""Chameleon's adaptive sampling (k-means on the cardinal knobs, k by the knee rule)."""

PLUS_OPTIONS = {
    "n_init": Option(0, "configs measured before the first fit; 0 = plan_size (AutoTVM, reference)", int),
    "init": Option("random", "initial configs: random (reference) or spread (nearest pool config to each k-means "
                   "centre of a random pool of 16 x n_init)", str, ("random", "spread")),
    "refit_every": Option(0, "refit and re-plan after this many measurements (a round offers no more); 0 = after "
                          "the k sampled configs (reference)", int),
    "rl_elite": Option(0.0, "share of PPO episodes started from the best measured configs (0: all random "
                       "starts, reference)", float, low=0, high=1),
    "rl_elite_top": Option(8, "elite starts cycle through this many best measured configs", int, low=1),
}
"""Chameleon+ settings; their defaults reproduce the reference (``chameleon``)."""


ML2_OPTIONS = {
    "plan_size": replace(LOOP_OPTIONS["plan_size"], default=8,
                         doc="N: configs measured per round; all three models are refitted every round"),
    "alpha": Option(7, "the explorer proposes (alpha + 1) * N candidates per round", int),
    "epsilon": replace(LOOP_OPTIONS["epsilon"], default=0.0,
                       doc="fraction of each round drawn at random (still filtered by ModelV and the compiler)"),
    **{k: MODEL_OPTIONS[k] for k in ("loss", "max_rounds")},      # ModelP: knob features
    **SA_OPTIONS,
    "precision": Option(0.9, "ModelV threshold: smallest with cross-validated precision of 'valid' >= this",
                        float, low=0, high=1, low_open=True),
    "top_up": Option(3, "when fewer than N candidates survive the filters, the explorer proposes up to this many "
                     "more batches, then random configs (through the same filters) fill the round", int),
    "a_pool": Option(0, "random unmeasured configs added to each round's candidates once ModelA exists (filtered "
                     "by ModelV, compiled and ranked by ModelA with the explorer's)", int, experimental=True),
    "carry": Option(16, "ModelA's best compiled, unmeasured configs of earlier rounds rejoining each round's "
                    "candidates (no new compile; filtered again by the refitted ModelV); 0 = the paper's round", int),
    "v_explore": Option(0.25, "share of each round given to candidates ModelV rejects that compile, ModelA's best "
                        "(exploration)", float, low=0, high=1),
    "v_pool": Option(64, "ModelV's rejects compiled per exploration slot (the explorer's best first; 64: all of "
                     "a round's); ModelA picks among those and the rejects compiled before", int, low=1),
    "round_order": Option("model", "the order a round is measured in: model (all of its configs best first by "
                          "ModelA, the exploration picks among ModelV's rejects included) or explore_last "
                          "(ModelA's choices best first, then the exploration picks)", str,
                          ("model", "explore_last"), experimental=True),
    "v_hidden": Option(True, "after compiling, a second validity model on knob + compile features filters again "
                       "(an edgetune addition; False = the paper's pipeline)", bool, experimental=True),
    "negatives_in_p": Option(True, "compile failures found while reading features enter ModelP as throughput 0",
                             bool, experimental=True),
    "a_invalid": Option("zero", "invalid trials in ModelA's training set: zero (throughput 0) or drop", str,
                        ("zero", "drop"), experimental=True),
    "p_from_a": Option("auto", "ModelP also learns ModelA's predictions for the compiled, unmeasured configs, so "
                       "the explorer searches with what the compiler revealed: yes, no, or auto (only when ModelA "
                       "has a time model on the compiler's time terms, as on VTA)", str, ("auto", "yes", "no")),
    "use_a": Option(True, "rank survivors with ModelA (False: with ModelP, the ablation without hidden features)",
                    bool, experimental=True),
    "transfer": Option(None, "a TransferModel trained on other tasks' records, 'pretrained' (the model edgetune "
                       "ships for the board, if any) or None (start from nothing): it ranks the first round's "
                       "compiled configs, and ModelA learns this task's correction to its estimate (an edgetune "
                       "addition; docs/tuners.md, section transfer)", object),
    "prior_pool": Option(1024, "with transfer: random configs compiled and ranked by the transfer model for the "
                         "first round", int),
    "prior_check": Option(True, "with transfer: ModelA is also fitted without the transferred estimate, and both "
                          "rank each round before it is measured; once the task's own model has ordered the "
                          "measured pairs significantly better, it ranks instead (transfer that cannot hurt for "
                          "long; docs/tuners.md, section transfer)", bool),
}
"""``ml2tuner``'s options (:mod:`toolkit.tuning.tuners.ml2tuner`); the ``experimental`` ones are research switches
(ablations), listed apart by ``edgetune tuners ml2tuner``."""


def xgb_model(params: dict[str, Any], seed: int) -> Callable[[int], XGBCostModel]:
    """The XGBoost cost model from a tuner's ``loss``/``max_rounds``/``plan_size``, reseeded for each fit."""
    return lambda fit: XGBCostModel(loss=params["loss"], seed=seed + fit, plan_size=params["plan_size"],
                                    max_rounds=params["max_rounds"])


def sa_optimizer(params: dict[str, Any], **extra: Any) -> SimulatedAnnealing:
    """AutoTVM's simulated annealing from a tuner's :data:`SA_OPTIONS` (``extra``: e.g. ``min_score=None``)."""
    return SimulatedAnnealing(n_chains=params["sa_chains"], n_steps=params["sa_steps"],
                              early_stop=params["sa_early_stop"], persistent=params["sa_persistent"], **extra)


def rl_optimizer(params: dict[str, Any], seed: int) -> RLOptimizer:
    """Chameleon's PPO exploration from a tuner's :data:`RL_OPTIONS` (and ``rl_elite``)."""
    p = params
    return RLOptimizer(
        n_episodes=p["episodes"], max_steps=p["max_steps"], stay_ratio=p["stay_ratio"], seed=seed,
        torch_threads=p["torch_threads"], lr=p["lr"], epochs=p["epochs"], minibatch=p["minibatch"],
        gamma=p["gamma"], lam=p["lam"], clip=p["clip"], c1=p["c1"], c2=p["c2"], hidden=p["hidden"],
        head_hidden=p["head_hidden"], value_hidden=p["value_hidden"], temperature=p["temperature"],
        elite_share=p.get("rl_elite", 0.0),
    )


def adaptive_sampler(params: dict[str, Any]) -> AdaptiveSampler:
    """Chameleon's adaptive sampling from a tuner's :data:`SAMPLING_OPTIONS`."""
    p = params
    return AdaptiveSampler(k_min=p["k_min"], k_max=p["k_max"], k_step=p["k_step"], threshold=p["k_threshold"],
                           n_cardinal=p["n_cardinal"], reduction=p["reduction"], rule=p["k_rule"],
                           representative=p["representative"])
