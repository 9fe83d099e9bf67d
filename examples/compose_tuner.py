"""Compose a model-based tuner from parts: your own cost model factory, an optimizer and a sampler.

    python examples/compose_tuner.py [--trials 48]

The loop is AutoTVM's (random configs, then fit -> search -> measure); here the model is an XGBoost rank
model reseeded for each fit, the optimizer simulated annealing, and Chameleon's adaptive sampling picks
one config per cluster of the annealer's candidates. It runs beside the registered ``xgb`` on the same task.
"""

from __future__ import annotations

import argparse

import toolkit as et
from toolkit.tuning.models.cost import XGBCostModel
from toolkit.tuning.search.annealing import SimulatedAnnealing
from toolkit.tuning.search.sampling import AdaptiveSampler
from toolkit.tuning.tuners.model_based import ModelBasedTuner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=48)
    args = parser.parse_args()

    task = et.make_task(et.parse_workload("resnet18.C11"), et.resolve_board("vta-fsim"))
    composed = ModelBasedTuner(
        seed=0, plan_size=16,
        model=lambda fit: XGBCostModel(loss="rank", seed=fit, plan_size=16, max_rounds=100),
        optimizer=SimulatedAnnealing(n_chains=64, n_steps=200),
        sampler=AdaptiveSampler(k_min=2, k_max=16, k_step=2),
    )
    for name, tuner in (("composed", composed), ("xgb", et.make_tuner("xgb", seed=0, plan_size=16))):
        summary = et.tune(task, tuner, args.trials)
        stats = tuner.stats()
        print(f"{name:9} best {summary.best_seconds * 1e3:.4f} ms after {summary.trials} trials, "
              f"{stats['fits']:.0f} fits, {stats['model_queries']:.0f} model queries")


if __name__ == "__main__":
    main()
