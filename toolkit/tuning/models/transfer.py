"""A cost model across tasks: trained on other workloads' records, it ranks a new task's configs before any
of them is measured.

Its inputs are the compiler's per-config features, which mean the same on every shape. Two stages:

1. **time model** (when the features hold additive time terms, ``time.*``: VTA's bus beats, DMA rows,
   instructions, compute cycles in hardware units) — non-negative least squares of the measured seconds on
   the terms, one set of weights without and one with virtual threads (``threads.total > 1``), weighted for
   relative error, fitted on every valid record of every training task at once. The terms are physical
   counts, so the fit extrapolates to shapes larger than any it saw;
2. **residual trees** — XGBoost on ``log(measured / estimated)`` from shape-free inputs: each time term's
   share of the terms' sum, the log of the estimate and, with ``inputs="all"``, ``log1p`` of every other
   feature. Without time terms the trees fit each task's log-seconds about its own mean (a ranking within a
   task; :meth:`predict_seconds` is then relative).

A fitted model is saved as JSON (numbers and XGBoost's own JSON model; nothing executable), so a shipped or
shared model file is data only.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> def task(scale):   # seconds = 2e-9 * (a + 3 b): the same physics at any size
...     a, b = rng.uniform(1, 10, 60) * scale, rng.uniform(1, 10, 60) * scale
...     return [({"time.a": x, "time.b": y, "threads.total": 1.0}, 2e-9 * (x + 3 * y)) for x, y in zip(a, b)]
>>> m = TransferModel(seed=0).fit([task(1e3), task(3e3)])
>>> new = task(5e4)    # 15x larger than anything trained on
>>> pred = m.predict_seconds([f for f, _ in new])
>>> bool(np.max(np.abs(pred / np.array([s for _, s in new]) - 1)) < 0.05)
True
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from toolkit.errors import LogError
from toolkit.tuning.models.advanced import GROUP_KEY, TIME_PREFIX
from toolkit.tuning.models.cost import XGB_PARAMS

if TYPE_CHECKING:
    from toolkit.tuning.journal import Record

FORMAT = "edgetune-transfer-model"
"""The ``format`` field of a saved model."""
FORMAT_VERSION = 1

TaskRecords = Sequence[tuple[dict[str, float], float]]
"""One task's training data: (compile features, measured seconds) of its valid configs."""


class TransferModel:
    """A cross-task cost model on compile features (see the module docstring).

    Parameters (stored as given): ``seed``, ``rounds`` (boosting rounds of the residual trees), ``inputs``
    (``"shares"``: the terms' shares and the estimate only; ``"all"``: also every other feature), plus
    XGBoost parameters overriding :data:`~toolkit.tuning.models.cost.XGB_PARAMS`.
    Learned attributes: ``keys_`` (feature names), ``term_keys_``, ``coef_`` (None without time terms),
    ``booster_`` (None when there were too few rows), ``trained_on_`` (what the model was fitted on).
    """

    def __init__(self, seed: int = 0, rounds: int = 300, inputs: str = "all", **params: Any) -> None:
        self.seed = seed
        self.rounds = rounds
        self.inputs = inputs
        self.params = params

    # -- design -----------------------------------------------------------------------------------
    def _matrix(self, feats: Sequence[dict[str, float]], keys: Sequence[str]) -> np.ndarray:
        return np.array([[float(f.get(k, math.nan)) for k in keys] for f in feats],
                        dtype=np.float64).reshape(len(feats), len(keys))

    def _terms_design(self, feats: Sequence[dict[str, float]]) -> np.ndarray:
        if self.base_ is not None:   # fine-tuning: seconds = a + b * the base model's estimate
            return np.hstack([np.ones((len(feats), 1)), self.base_.predict_seconds(feats)[:, None] / self.scale_])
        terms = np.nan_to_num(self._matrix(feats, self.term_keys_), nan=0.0) / self.scale_
        many = np.array([float(f.get(GROUP_KEY, 1.0)) > 1 for f in feats])[:, None]
        return np.hstack([np.ones((len(feats), 1)), terms * ~many, terms * many])

    def _estimate(self, feats: Sequence[dict[str, float]]) -> np.ndarray:
        """The time model's seconds (ones without a time model)."""
        if self.coef_ is None:
            return np.ones(len(feats))
        return np.maximum(self._terms_design(feats) @ self.coef_, 1e-12)

    def _tree_inputs(self, feats: Sequence[dict[str, float]], est: np.ndarray) -> np.ndarray:
        cols = []
        if self.term_keys_:
            terms = np.nan_to_num(self._matrix(feats, self.term_keys_), nan=0.0)
            cols += [terms / np.maximum(terms.sum(axis=1, keepdims=True), 1e-12), np.log(est)[:, None]]
        if self.inputs == "all" or not self.term_keys_:
            others = [k for k in self.keys_ if k not in self.term_keys_]
            cols.append(np.log1p(np.maximum(self._matrix(feats, others), 0.0)))
        return np.hstack(cols).astype(np.float32)

    def _n_inputs(self) -> int:
        """How many columns :meth:`_tree_inputs` gives the booster."""
        n = len(self.term_keys_) + 1 if self.term_keys_ else 0
        if self.inputs == "all" or not self.term_keys_:
            n += len([k for k in self.keys_ if k not in self.term_keys_])
        return n

    # -- fit / predict ----------------------------------------------------------------------------
    def fit(self, tasks: Sequence[TaskRecords], trained_on: str = "", base: TransferModel | None = None
            ) -> TransferModel:
        """Train on several tasks' valid records; :class:`ValueError` when no task has any. With ``base`` (a
        fitted model, e.g. a shipped one) the time model is ``a + b * base's estimate`` and the trees learn
        these tasks' residual: the base fine-tuned on fewer records than it was trained on."""
        import xgboost as xgb
        from scipy.optimize import nnls

        tasks = [[(f, s) for f, s in t if s > 0 and math.isfinite(s)] for t in tasks]
        tasks = [t for t in tasks if t]
        if not tasks:
            raise ValueError("a transfer model needs valid measurements of at least one task")
        feats = [f for t in tasks for f, _ in t]
        secs = np.array([s for t in tasks for _, s in t])
        self.keys_ = sorted({k for f in feats for k in f})
        self.term_keys_ = [k for k in self.keys_ if k.startswith(TIME_PREFIX)]
        self.coef_, self.base_ = None, base
        if base is not None:
            self.scale_ = np.array([max(float(base.predict_seconds(feats).max()), 1e-12)])
        elif self.term_keys_:
            terms = np.nan_to_num(self._matrix(feats, self.term_keys_), nan=0.0)
            self.scale_ = np.maximum(np.abs(terms).max(axis=0), 1e-12)
        if base is not None or self.term_keys_:
            w = 1.0 / secs
            self.coef_, _ = nnls(self._terms_design(feats) * w[:, None], secs * w)
            target = np.log(secs) - np.log(self._estimate(feats))
        else:
            logs = np.log(secs)
            target = np.concatenate([logs[i:i + len(t)] - logs[i:i + len(t)].mean()
                                     for i, t in zip(np.cumsum([0] + [len(t) for t in tasks[:-1]]), tasks)])
        params = {**XGB_PARAMS, "objective": "reg:squarederror", "seed": int(self.seed), "nthread": 1,
                  "verbosity": 0, **self.params}
        X = self._tree_inputs(feats, self._estimate(feats))
        self.booster_ = xgb.train(params, xgb.DMatrix(X, target, nthread=1), num_boost_round=self.rounds)
        self.trained_on_ = trained_on or f"{len(tasks)} tasks, {len(secs)} valid records"
        return self

    def predict_seconds(self, feats: Sequence[dict[str, float]]) -> np.ndarray:
        """Predicted seconds of configs from their compile features (relative within a task when the
        features hold no time terms)."""
        import xgboost as xgb

        if not len(feats):
            return np.zeros(0)
        est = self._estimate(feats)
        resid = self.booster_.predict(xgb.DMatrix(self._tree_inputs(feats, est), nthread=1))
        return est * np.exp(resid.astype(np.float64))

    # -- files ------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        if self.base_ is not None:
            raise ValueError("a fine-tuned transfer model is not saved; save its base, or fit one on all records")
        return {"format": FORMAT, "version": FORMAT_VERSION, "trained_on": self.trained_on_,
                "params": {"seed": self.seed, "rounds": self.rounds, "inputs": self.inputs, **self.params},
                "keys": self.keys_, "term_keys": self.term_keys_,
                "coef": None if self.coef_ is None else self.coef_.tolist(),
                "scale": self.scale_.tolist() if self.coef_ is not None else None,
                "booster": json.loads(bytes(self.booster_.save_raw("json")))}

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str = "the model") -> TransferModel:
        """A model from :meth:`to_json`'s dict; :class:`LogError` when it is not one."""
        import xgboost as xgb

        try:
            if d.get("format") != FORMAT or d.get("version") != FORMAT_VERSION:
                raise ValueError(f"format {d.get('format')!r} version {d.get('version')!r}")
            m = cls(**d["params"])
            m.keys_, m.term_keys_ = [str(k) for k in d["keys"]], [str(k) for k in d["term_keys"]]
            m.base_ = None
            m.coef_ = None if d["coef"] is None else np.asarray(d["coef"], dtype=np.float64)
            if m.coef_ is not None:
                m.scale_ = np.asarray(d["scale"], dtype=np.float64)
                if len(m.scale_) != len(m.term_keys_) or len(m.coef_) != 1 + 2 * len(m.term_keys_):
                    raise ValueError("coefficients do not match the time terms")
            check_booster(d["booster"], m._n_inputs())
            m.booster_ = xgb.Booster()
            m.booster_.load_model(bytearray(json.dumps(d["booster"]).encode()))
            m.trained_on_ = str(d.get("trained_on", ""))
            return m
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError, xgb.core.XGBoostError) as exc:
            raise LogError(f"{source} is not an edgetune transfer model ({str(exc).splitlines()[0][:120]}); "
                           "rebuild it with make pretrained or pass tuning logs to --transfer") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> TransferModel:
        """A saved model; :class:`LogError` when ``path`` cannot be read or is not one."""
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise LogError(f"cannot read the transfer model {path} ({type(exc).__name__}); pass a model file "
                           "or a tuning log") from None
        if not isinstance(d, dict):
            raise LogError(f"{path} is not an edgetune transfer model; pass a model file or a tuning log")
        return cls.from_json(d, str(path))


MAX_TREES = 100_000
MAX_NODES = 1 << 20
ROOT_PARENT = (-1, 2147483647)
"""What XGBoost writes as the root's parent (no node)."""


def check_booster(booster: Any, n_features: int) -> None:
    """Refuse an XGBoost JSON model that would crash the library (``ValueError``): every tree a proper binary
    tree (children after their parent, each node reached once, both children or none, parent links matching),
    split features below ``n_features``, arrays as long as the tree."""
    model = booster["learner"]["gradient_booster"]["model"]
    declared = int(booster["learner"]["learner_model_param"]["num_feature"])
    if declared != n_features:
        raise ValueError(f"the booster takes {declared} features, the model gives it {n_features}")
    trees = model["trees"]
    if not isinstance(trees, list) or len(trees) > MAX_TREES:
        raise ValueError("the booster's trees are not a list of a sane length")
    for t, tree in enumerate(trees):
        n = int(tree["tree_param"]["num_nodes"])
        if not 0 < n <= MAX_NODES or int(tree["tree_param"]["num_feature"]) != declared:
            raise ValueError(f"tree {t} has {n} nodes or another feature count")
        left, right, split = tree["left_children"], tree["right_children"], tree["split_indices"]
        for name in ("left_children", "right_children", "split_indices", "split_conditions", "default_left",
                     "base_weights", "parents"):
            if not isinstance(tree[name], list) or len(tree[name]) != n:
                raise ValueError(f"tree {t}: {name} is not a list of {n} entries")
        seen = [False] * n
        for i in range(n):
            a, b, f = left[i], right[i], split[i]
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b, f)):
                raise ValueError(f"tree {t} node {i}: children and split feature must be integers")
            if a == -1 and b == -1:
                continue
            if not (i < a < n and i < b < n and a != b) or seen[a] or seen[b]:
                raise ValueError(f"tree {t} node {i}: its children {a}, {b} do not form a tree")
            if not 0 <= f < declared:
                raise ValueError(f"tree {t} node {i}: split feature {f} is not one of the {declared} features")
            seen[a] = seen[b] = True
        if seen[0] or not all(seen[1:]):
            raise ValueError(f"tree {t}: a node is unreachable from the root")
        parents = tree["parents"]
        if parents[0] not in ROOT_PARENT or any(
                parents[c] != i for i in range(n) if left[i] != -1 for c in (left[i], right[i])):
            raise ValueError(f"tree {t}: its parent links do not match its children")
        if any(v not in (0, 1) or isinstance(v, bool) for v in tree["default_left"]):
            raise ValueError(f"tree {t}: default_left holds something other than 0 and 1")


# -- training data from tuning logs --------------------------------------------------------------------
def task_records(records: Iterable[Record]) -> list[TaskRecords]:
    """Valid records with features, grouped by task (workload and board): (compile features, seconds)."""
    from toolkit.tuning.journal import workload_key
    from toolkit.tuning.replay import compile_features_of

    groups: dict[tuple[str, str], list[tuple[dict[str, float], float]]] = {}
    for r in records:
        if r.valid and r.features:
            groups.setdefault((workload_key(r.workload), r.board), []).append(
                (compile_features_of(r.features), r.seconds))
    return list(groups.values())


def log_files(source: str | Path) -> list[Path]:
    """The tuning logs of ``source``: the file itself, or every ``*.jsonl`` under a folder (sorted)."""
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        if not files:
            raise LogError(f"{path} holds no tuning logs (*.jsonl); pass a log, a folder of logs or a model file")
        return files
    if not path.exists():
        raise LogError(f"{path} does not exist; pass a tuning log, a folder of logs or a transfer model file")
    if not path.is_file():
        raise LogError(f"{path} is not a regular file; pass a tuning log, a folder of logs or a model file")
    return [path]


def transfer_model_from(source: str | Path, *, seed: int = 0, base: TransferModel | None = None) -> TransferModel:
    """A transfer model from ``source``: a saved model file as it is, or one fitted on the valid records of
    a tuning log or a folder of logs (:class:`LogError` for anything else, naming the file)."""
    from toolkit.tuning.journal import HEADER_KEY, read_log

    files = log_files(source)
    if len(files) == 1:
        try:
            with files[0].open("rb") as f:
                first = json.loads(f.readline(1 << 20) or b"null")
        except (OSError, ValueError, RecursionError):
            first = None
        if isinstance(first, dict) and first.get("format") == FORMAT:
            return TransferModel.load(files[0])
        if not (isinstance(first, dict) and HEADER_KEY in first):
            raise LogError(f"{files[0]} is neither a tuning log nor a transfer model; pass one of them")
    records = [r for p in files for r in read_log(p)[1]]
    tasks = task_records(records)
    if not tasks:
        raise LogError(f"{source} has no valid measurement with compile features to learn from; tune with a "
                       "template that reports them (VTA, or the TVM templates) first")
    return TransferModel(seed=seed).fit(tasks, trained_on=f"{source}: {len(tasks)} tasks, "
                                                          f"{sum(len(t) for t in tasks)} valid records", base=base)


class GrowingTransfer:
    """A transfer model over the tasks of one run (a whole network), refitted as their records grow.

    :meth:`add` collects each task's valid measurements; :meth:`current` returns a model fitted on all of
    them (fine-tuning ``base`` when given), refitted once there are ``min_records`` and again whenever they
    have grown by ``growth``; ``None`` before that.
    """

    def __init__(self, base: TransferModel | None = None, seed: int = 0, min_records: int = 32,
                 growth: float = 1.5) -> None:
        self.base = base
        self.seed = seed
        self.min_records = min_records
        self.growth = growth
        self.records: dict[Any, list[tuple[dict[str, float], float]]] = {}
        self.model: TransferModel | None = None
        self.fitted_on = 0

    def add(self, task: Any, results: Iterable[Any]) -> None:
        """Keep the valid results (``MeasureResult``) of ``task`` that carry features."""
        from toolkit.tuning.replay import compile_features_of

        self.records.setdefault(task, []).extend(
            (compile_features_of(r.features), r.seconds) for r in results if r.valid and r.features)

    def current(self) -> TransferModel | None:
        n = sum(len(v) for v in self.records.values())
        if n >= self.min_records and n >= self.fitted_on * self.growth:
            self.model = TransferModel(seed=self.seed).fit(list(self.records.values()), base=self.base)
            self.fitted_on = n
        return self.model
