"""The deployment table: what each deployment rule changes against a learner's own last iterate.

Deployment is a factor of a run (``deploy``: ``last``, ``best-feasible``, ``tail-mixture``;
:mod:`constrained_grpo.deploy`), not an algorithm. Two deployments of one training (same
task, learner and seed) are one sample, paired: the main tables rank every learner once, on
its last iterate, and this table gives, per task, learner and rule, over the seeds that
have both deployments:

* the paired gain in score ``d_s = score(rule, s) - score(last, s)``: its mean and the 95%
  interval ``mean(d) +- t_{n-1, 0.975} sd(d) / sqrt(n)`` (two-sided, type I error 5% when the
  differences are near normal). A gain or a loss is shown only where the interval excludes 0;
  otherwise ``not shown`` (the point estimate does not decide). Power: with ``n`` seeds the
  test detects a mean gain of ``(t_{n-1, 0.975} + t_{n-1, 0.8}) sd(d) / sqrt(n)`` four times in
  five: ``0.99 sd(d)`` at 10 seeds.
* the seeds the rule moves into the limits (the last iterate not shown feasible, the rule's
  deployment feasible) and out of them, with McNemar's exact test on those discordant seeds
  (two-sided binomial at 1/2; type I error at most 5%): the learner is moved ``into`` or
  ``out of`` the limits only where it rejects, else ``no change shown``; with 10 seeds it
  needs at least 6 discordant seeds, all one way (p = 0.031), to reject.

How the board uses it (per-run metrics ``m``, configs from ``loader.run_configs(root)``)::

    runs = with_deployment(m, configs)
    ranked = last_iterate_runs(runs)          # the main tables: each learner once, its last iterate
    table = deployment_table(runs)            # per task: each rule against the learner's last iterate
    suite = suite_deployment_table(runs, tasks)  # the same over a suite (stratified by task)
    check_independent(runs, a, b, task)       # before testing a against b as independent samples

:func:`check_independent` refuses two deployments of one training; :func:`selection_check`
compares a ``best-feasible`` run's evaluated costs with its selection's bound
(``done.json["deployed"]``, :func:`run_selections`). Everything but :func:`run_selections` is
a pure function of per-run frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["ALPHA", "DEPLOYMENT_COLUMNS", "SharedTrainingError", "check_independent", "deployment_table",
           "last_iterate_runs", "mcnemar_exact_p", "paired_interval", "run_selections", "selection_check", "suite_deployment_table",
           "with_deployment"]

#: Two-sided level of the gain's interval and of McNemar's test.
ALPHA = 0.05
#: The columns of :func:`deployment_table`, in order.
DEPLOYMENT_COLUMNS: tuple[str, ...] = (
    "task", "learner", "deploy", "seeds", "gain_mean", "gain_lo", "gain_hi", "gain", "feasible_last",
    "feasible_deploy", "moved_in", "moved_out", "limits_p", "limits")


class SharedTrainingError(ValueError):
    """Two run sets share trainings (two deployments of one task, learner and seed): they are
    paired samples, not independent ones."""


def with_deployment(runs: pd.DataFrame, configs: Mapping[tuple[str, str, int], Mapping[str, Any]]) -> pd.DataFrame:
    """``runs`` (one row per run: ``task``, ``algo``, ``seed``) with ``learner`` and ``deploy``
    from each run's ``config.json`` (``configs`` keyed by ``(task, algo, seed)``, as
    ``loader.run_configs`` returns them; :func:`loader.run_deployment`). A run without a
    config is its own learner, deploying its last iterate."""
    from constrained_grpo.eval.scoring.loader import run_deployment

    out = runs.copy()
    pairs = [run_deployment(configs[(t, a, int(s))]) if (t, a, int(s)) in configs else (a, "last")
             for t, a, s in zip(out["task"], out["algo"], out["seed"])]
    out["learner"] = [p[0] for p in pairs]
    out["deploy"] = [p[1] for p in pairs]
    return out


def last_iterate_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the main tables rank: every learner once per task and seed, on its last
    iterate (``deploy == "last"``), under its learner's name (an alias's runs are another
    rule's deployments and go to :func:`deployment_table`). Refuses two last-iterate runs of
    one learner, task and seed (the same training counted twice)."""
    if "learner" not in runs or "deploy" not in runs:
        raise ValueError("last_iterate_runs needs columns learner and deploy; add them with with_deployment(runs, configs)")
    last = runs[runs["deploy"] == "last"]
    dup = last.duplicated(["task", "learner", "seed"])
    if dup.any():
        row = last[dup].iloc[0]
        raise SharedTrainingError(f"{row['learner']} on {row['task']}, seed {int(row['seed'])}: two runs deploy its last "
                                  "iterate; keep one")
    return last.assign(algo=last["learner"]).reset_index(drop=True)


def check_independent(runs: pd.DataFrame, a: str, b: str, task: str | None = None) -> None:
    """Raise :class:`SharedTrainingError` when the runs of algorithm names ``a`` and ``b`` (on
    ``task``, or any task) include two deployments of one training: the same task, learner and
    seed. Such runs are paired, and testing them as independent samples overstates the
    evidence (the same ten trainings twice)."""
    rows = runs if task is None else runs[runs["task"] == task]
    if "learner" not in rows:
        return
    keys = [set(zip(g["task"], g["learner"], g["seed"].astype(int))) for g in (rows[rows["algo"] == a], rows[rows["algo"] == b])]
    shared = sorted(keys[0] & keys[1])
    if shared:
        t, learner, seed = shared[0]
        raise SharedTrainingError(
            f"{a} and {b} share {len(shared)} training(s) ({learner} on {t}, seed {seed}, ...): they are two "
            "deployments of the same runs; compare them paired by seed (eval.scoring.deployment.deployment_table), "
            "not as independent samples")


def paired_interval(d: np.ndarray, alpha: float = ALPHA) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of the paired differences ``d``: the two-sided ``1 - alpha`` t interval
    ``mean +- t_{n-1, 1-alpha/2} sd / sqrt(n)`` (NaN bounds for fewer than 2 seeds; the mean
    alone where every difference is equal)."""
    d = np.asarray(d, dtype=np.float64)
    n = len(d)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(np.mean(d))
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * float(np.std(d, ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def mcnemar_exact_p(moved_in: int, moved_out: int) -> float:
    """McNemar's exact two-sided p-value on the discordant seeds: ``min(1, 2 P[X <= min])``,
    ``X ~ Binomial(in + out, 1/2)``; 1 when nothing moved."""
    n = moved_in + moved_out
    if n == 0:
        return 1.0
    return float(min(1.0, 2 * stats.binom.cdf(min(moved_in, moved_out), n, 0.5)))


def _r(x: float, digits: int = 6) -> float:
    # Rounded so that the written table does not depend on the summation order.
    return round(float(x), digits) if math.isfinite(x) else math.nan


def _p(p: float) -> float:
    # A p-value keeps its significant digits: 2^-20 is not 1e-06.
    return float(f"{p:.6g}")


def deployment_table(runs: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Per task, learner and rule other than ``last``: the paired gain in score over the
    learner's own last iterate and the seeds moved into and out of the limits (module
    docstring). ``runs``: one row per run with ``task``, ``learner``, ``deploy``, ``seed``,
    ``score`` and ``feasible``. Only seeds with both deployments count (``seeds``); a training
    deployed twice under one rule is an error (it would be counted twice)."""
    need = {"task", "learner", "deploy", "seed", "score", "feasible"}
    missing = sorted(need - set(runs.columns))
    if missing:
        raise ValueError(f"deployment_table needs columns {missing}; add learner and deploy with with_deployment(runs, configs)")
    dup = runs.duplicated(["task", "learner", "deploy", "seed"])
    if dup.any():
        row = runs[dup].iloc[0]
        raise SharedTrainingError(
            f"{row['learner']} on {row['task']}, seed {int(row['seed'])}, is deployed with {row['deploy']!r} by more than "
            "one run (e.g. an alias and the option): keep one run per training and rule")
    out: list[dict[str, Any]] = []
    for (task, learner), g in runs.groupby(["task", "learner"], sort=True):
        last = g[g["deploy"] == "last"].set_index("seed")
        for rule in sorted(set(g["deploy"]) - {"last"}):
            other = g[g["deploy"] == rule].set_index("seed")
            seeds = sorted(set(last.index) & set(other.index))
            d = other.loc[seeds, "score"].to_numpy(float) - last.loc[seeds, "score"].to_numpy(float)
            mean, lo, hi = paired_interval(d, alpha)
            f_last = last.loc[seeds, "feasible"].astype(bool).to_numpy()
            f_rule = other.loc[seeds, "feasible"].astype(bool).to_numpy()
            moved_in, moved_out = int(np.sum(~f_last & f_rule)), int(np.sum(f_last & ~f_rule))
            p = mcnemar_exact_p(moved_in, moved_out)
            gain = ("gain" if lo > 0 else "loss" if hi < 0 else "not shown") if math.isfinite(lo) else "too few seeds"
            limits = ("into" if moved_in > moved_out else "out of") if p < alpha else "no change shown"
            out.append({"task": task, "learner": learner, "deploy": rule, "seeds": len(seeds), "gain_mean": _r(mean),
                        "gain_lo": _r(lo), "gain_hi": _r(hi), "gain": gain, "feasible_last": int(f_last.sum()),
                        "feasible_deploy": int(f_rule.sum()), "moved_in": moved_in, "moved_out": moved_out,
                        "limits_p": _p(p), "limits": limits})
    return pd.DataFrame(out, columns=list(DEPLOYMENT_COLUMNS))


def suite_deployment_table(runs: pd.DataFrame, suite: list[str], alpha: float = ALPHA) -> pd.DataFrame:
    """The deployment table over a suite of tasks, per learner and rule: the gain is the mean
    over the tasks of each task's mean paired gain, ``g = (1/T) sum_t dbar_t``, with the
    stratified variance ``(1/T^2) sum_t s_t^2 / n_t`` and a t interval on Welch-Satterthwaite's
    degrees of freedom (each task's trainings are independent of the others'); the seeds moved
    into and out of the limits are pooled over the suite's runs (each a training of its own)
    for McNemar's exact test. A learner enters only with every task of ``suite`` paired."""
    per_task = deployment_table(runs[runs["task"].isin(suite)], alpha)
    out: list[dict[str, Any]] = []
    for (learner, rule), g in per_task.groupby(["learner", "deploy"], sort=True):
        if set(g["task"]) != set(suite) or (g["seeds"] < 2).any():
            continue
        parts = []
        for task in suite:
            rows = runs[(runs["task"] == task) & (runs["learner"] == learner)]
            last, other = rows[rows["deploy"] == "last"].set_index("seed"), rows[rows["deploy"] == rule].set_index("seed")
            seeds = sorted(set(last.index) & set(other.index))
            parts.append(other.loc[seeds, "score"].to_numpy(float) - last.loc[seeds, "score"].to_numpy(float))
        t_count = len(parts)
        mean = float(np.mean([np.mean(d) for d in parts]))
        v = [float(np.var(d, ddof=1)) / len(d) for d in parts]
        var = sum(v) / t_count**2
        dof = sum(v) ** 2 / sum(vi**2 / (len(d) - 1) for vi, d in zip(v, parts)) if sum(v) > 0 else math.inf
        half = float(stats.t.ppf(1 - alpha / 2, dof)) * math.sqrt(var) if math.isfinite(dof) else 0.0
        lo, hi = mean - half, mean + half
        moved_in, moved_out = int(g["moved_in"].sum()), int(g["moved_out"].sum())
        p = mcnemar_exact_p(moved_in, moved_out)
        out.append({"task": "suite", "learner": learner, "deploy": rule, "seeds": int(g["seeds"].sum()),
                    "gain_mean": _r(mean), "gain_lo": _r(lo), "gain_hi": _r(hi),
                    "gain": "gain" if lo > 0 else "loss" if hi < 0 else "not shown",
                    "feasible_last": int(g["feasible_last"].sum()), "feasible_deploy": int(g["feasible_deploy"].sum()),
                    "moved_in": moved_in, "moved_out": moved_out, "limits_p": _p(p),
                    "limits": ("into" if moved_in > moved_out else "out of") if p < alpha else "no change shown"})
    return pd.DataFrame(out, columns=list(DEPLOYMENT_COLUMNS))


def selection_check(runs: pd.DataFrame, selections: Mapping[tuple[str, str, int], Mapping[str, Any] | None],
                    cost_names: Mapping[str, list[str]]) -> pd.DataFrame:
    """Whether each ``best-feasible`` run's evaluated costs agree with what its selection
    believed: per run, the selected iteration, and per cost k the selection's one-sided bound
    ``U_k`` against the evaluated mean cost (``eval_cost_<k>``); ``within_bound`` when every
    evaluated mean is at most its bound. The bound is the held-out validation's
    (``done.json["deployed"]["validation"]["cost_bound"]``, the deployed policy's, the last
    iterate's too where no candidate qualified) where the run validated, else the screen's
    (``done.json["deployed"]["cost_bound"]``; a run that kept nothing then has no bound).
    ``selected``: a candidate was deployed, not the last iterate. ``runs``: per-run metrics with
    ``task``, ``algo``, ``seed``; ``selections`` keyed by ``(task, algo, seed)``;
    ``cost_names[task]``: the costs in order."""
    out: list[dict[str, Any]] = []
    for _, r in runs.iterrows():
        key = (r["task"], r["algo"], int(r["seed"]))
        sel = selections.get(key) or {}
        if sel.get("rule") != "best-feasible":
            continue
        names = cost_names[r["task"]]
        validation = sel.get("validation") or {}
        bound = validation.get("cost_bound", sel.get("cost_bound"))
        selected = validation["deployed"] != "last" if "deployed" in validation else sel.get("cost_bound") is not None
        row: dict[str, Any] = {"task": key[0], "algo": key[1], "seed": key[2], "iteration": sel.get("best_iteration"),
                               "selected": selected}
        ok = bound is not None
        for j, k in enumerate(names):
            evaluated = float(r[f"eval_cost_{k}"])
            row[f"bound_{k}"] = float(bound[j]) if bound is not None else math.nan
            row[f"eval_cost_{k}"] = _r(evaluated)
            ok = ok and evaluated <= float(bound[j])
        row["within_bound"] = bool(ok)
        out.append(row)
    return pd.DataFrame(out)


def run_selections(root: str) -> dict[tuple[str, str, int], Mapping[str, Any] | None]:
    """``done.json["deployed"]`` of every complete run under ``root`` (run folders or a
    compact record), keyed by ``(task, algo, seed)``; None for runs recorded without it."""
    import json
    from pathlib import Path

    from constrained_grpo.eval import storage
    from constrained_grpo.eval.scoring import record

    if record.is_record(root):
        return {key: (done or {}).get("deployed") for key, (_, done) in record.load_record(root, configs=True).configs.items()}
    out: dict[tuple[str, str, int], Mapping[str, Any] | None] = {}
    for path in Path(root).glob("**/" + storage.DONE_FILE):
        run = json.loads((path.parent / storage.CONFIG_FILE).read_text())["run"]
        out[(str(run["task"]), str(run["algo"]), int(run["seed"]))] = json.loads(path.read_text()).get("deployed")
    return out
