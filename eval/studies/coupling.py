"""The coupling experiment: reward scalarization (ScRew) against advantage scalarization (ScAdv).

On ``Grid/HazardFuel-v0`` (hazard indicator, limit 0.1; fuel, limit 12 steps; exact
constrained optimum R* = 1.1333) the suite compares

* ``grpo-screw``: S = R - sum_k lambda_k C_k, then A = (S - mean S) / std S;
* ``cgrpo``:      A = Z_R - sum_k lambda_k Z_Ck (each component z-scored in its group).

The *effective weight* of component j (``advantages.effective_weights``) is how much the
advantage moves per within-group std of that component: ScRew gives
w_j = lambda_j sigma_j / sigma_S (arXiv 2602.05863, Thm 4.1), so raising one multiplier
shrinks every other component's weight through the shared sigma_S; ScAdv gives
w_j = lambda_j, decoupled. Conversely, in a group where only cost k varies,
S = const - lambda_k C_k and ScRew's advantage is -Z_Ck whatever lambda_k: w_k = 1, so a
small multiplier is amplified to unit weight (``transmission`` w_k / lambda_k = 1 / lambda_k).

Two commands::

    python -m constrained_grpo.eval.studies.coupling demo --out DIR
    python -m constrained_grpo.eval.studies.coupling analyze RUNS_DIR [RUNS_DIR ...] --out DIR

``demo`` (no training, seconds) rolls out a fixed scripted mixture of routes on groups of
episodes that share a reset seed, holds lambda_hazard fixed, sweeps lambda_fuel and
writes the effective weights of ScRew and ScAdv and, beside them, of the GRPO literature's
CorrGRPO (``corr``), IS-GRPO (``is``) and MDP-GRPO (``mdp``) (``controlled.csv``,
``controlled.png``; :data:`DEMO_SPECS`).

``analyze`` reads the runs of ``cgrpo bench --preset coupling --out RUNS_DIR`` through the
long table (``eval.loader.load_results``) and writes one row of metrics per run
(``coupling_runs.csv``), their mean over seeds with a 95% percentile-bootstrap interval per
algorithm (``coupling_summary.csv``, ``coupling.md``) and figures of the multipliers,
effective weights and costs.

Tail: the last max(1, ceil(0.2 T)) of the T iterations (``eval.metrics.tail_length``,
the tail of every metric of the suite).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats as sps  # noqa: E402

from constrained_grpo.agents.advantages import AdvantageSpec, effective_weights  # noqa: E402
from constrained_grpo.constraints import Constraint  # noqa: E402
from constrained_grpo.eval.scoring.metrics import final_performance, fmean, second_half, tail_length  # noqa: E402
from constrained_grpo.eval.scoring.plots import env_steps_axis, outside_legend  # noqa: E402
from constrained_grpo.eval.scoring.stability import multiplier_stability  # noqa: E402
from constrained_grpo.eval.scoring.stats import BOOTSTRAP_REPS, BOOTSTRAP_SEED, stratified_bootstrap_ci  # noqa: E402
from constrained_grpo.files import atomic_write_csv, atomic_write_text  # noqa: E402

__all__ = [
    "ALGOS",
    "ENV_ID",
    "DEMO_SPECS",
    "RunData",
    "analyze",
    "bench_command",
    "collect_batch",
    "config_differences",
    "effective_weight_sweep",
    "last_iterate_row",
    "load_runs",
    "main",
    "render_markdown",
    "run_demo",
    "run_row",
    "summarize",
    "sweep_spans",
    "transmission",
    "violation_rate",
    "weight_variability",
    "zero_weight_fraction",
]

#: The task of the experiment.
ENV_ID = "Grid/HazardFuel-v0"
#: Algorithm name -> the aggregator it uses (the order of tables and legends).
ALGOS: dict[str, str] = {"cgrpo": "scadv", "grpo-screw": "screw"}
#: Tail fraction and tolerance of the acceptance criterion (``eval.metrics.tail_summary``).
TAIL_FRAC = 0.2
TOL = 0.1
#: The demo's advantage rules by the label of its ``aggregator`` column: ScRew and ScAdv, then
#: the GRPO literature's (docs/papers.md): CorrGRPO's correlation denominator, IS-GRPO's
#: estimator on ScAdv's components, MDP-GRPO's dual-anchor prospect advantage.
DEMO_SPECS: dict[str, AdvantageSpec] = {
    "screw": AdvantageSpec("screw"),
    "scadv": AdvantageSpec("scadv"),
    "corr": AdvantageSpec("corr"),
    "is": AdvantageSpec("scadv", "is"),
    "mdp": AdvantageSpec("mdp"),
}
#: Default route mixture of the demo's scripted policy (route -> probability).
DEMO_ROUTES: dict[str, float] = {"short": 0.25, "safe": 0.25, "clean": 0.25, "gem": 0.25}

_COMPONENT_COLORS = {"reward": "tab:green", "hazard": "tab:red", "fuel": "tab:blue"}
_GRID_POINTS = 200
#: Rolling-mean window of the noisy per-iteration curves (return, costs, effective weights),
#: as a fraction of a run's iterations; multipliers are drawn raw.
SMOOTH = 0.02


# ============================================================================ demo


def collect_batch(
    env_id: str = ENV_ID,
    num_groups: int = 16,
    group_size: int = 16,
    *,
    seed: int = 0,
    routes: Mapping[str, float] | None = None,
    epsilon: float = 0.1,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """A fixed batch ``x[P, G, 1+K]`` of real episodes, and the component names.

    Group p is G episodes of the vector env reset with seed ``seed + p``. Each episode
    follows one scripted route (``envs/gridworld/policies.py``) drawn from ``routes``
    (probabilities, normalised), and takes a uniformly random action with probability
    ``epsilon`` at each step; all draws come from ``numpy.random.default_rng(seed)``.
    ``x[p, i] = (R_pi, C_pi1, ..., C_piK)``: the return and episodic costs of the first
    episode of each copy.
    """
    from constrained_grpo.envs.gridworld.policies import route_policy
    from constrained_grpo.tasks import make_vec_env

    routes = dict(DEMO_ROUTES if routes is None else routes)
    names = sorted(routes)
    probs = np.array([routes[n] for n in names], dtype=np.float64)
    if probs.min() < 0 or probs.sum() <= 0:
        raise ValueError(f"route probabilities must be >= 0 and not all 0, got {routes}")
    probs /= probs.sum()
    n = num_groups * group_size
    rng = np.random.default_rng(seed)
    env = make_vec_env(env_id, num_envs=n)
    try:
        base = env.unwrapped
        model = base.model
        policies = {r: route_policy(model, r) for r in names}
        choice = [names[i] for i in rng.choice(len(names), size=n, p=probs)]
        obs, _ = env.reset(seed=[seed + p for p in range(num_groups) for _ in range(group_size)])
        k = len(base.constraints)
        returns = np.zeros(n)
        costs = np.zeros((n, k))
        running = np.ones(n, dtype=bool)
        for _ in range(10 * model.max_steps):  # every episode ends by max_steps
            actions = np.array([policies[choice[i]](obs[i]) for i in range(n)], dtype=np.int64)
            explore = rng.random(n) < epsilon
            actions[explore] = rng.integers(0, 4, size=int(explore.sum()))
            obs, reward, terminated, truncated, info = env.step(actions)
            returns += np.where(running, reward, 0.0)
            costs += np.where(running[:, None], np.asarray(info["costs"], dtype=np.float64), 0.0)
            running &= ~(np.asarray(terminated) | np.asarray(truncated))
            if not running.any():
                break
        names_out = ("reward",) + tuple(c.name for c in base.constraints)
    finally:
        env.close()
    x = np.concatenate([returns[:, None], costs], axis=1).reshape(num_groups, group_size, 1 + k)
    return x, names_out


def effective_weight_sweep(
    x: np.ndarray,
    components: Sequence[str],
    fixed: Mapping[str, float],
    sweep: str,
    values: Sequence[float],
    aggregators: Sequence[str] = tuple(DEMO_SPECS),
) -> pd.DataFrame:
    """Effective weights of each aggregator as multiplier ``sweep`` runs over ``values``.

    The other multipliers are held at ``fixed``. Tidy rows:
    ``aggregator, lambda_<c> (every cost c), component, weight``, with
    ``weight = effective_weights(x, lambda, DEMO_SPECS[aggregator])[j]``:
    ScRew ``lambda_j sigma_j / sigma_S``, ScAdv ``lambda_j`` (``|c_0| = 1`` for the reward),
    CorrGRPO ``lambda_j sigma_j / sqrt(sum rho)``, IS-GRPO ``lambda_j sigma_j / mean sigma_j``,
    MDP-GRPO ``lambda_j sigma_j`` times its dual anchor's slope, each averaged over the groups
    in which component j varies.
    """
    costs = list(components[1:])
    missing = sorted(set(costs) - set(fixed) - {sweep})
    if sweep not in costs or missing:
        raise ValueError(f"sweep {sweep!r} must be one of {costs}, and every other cost needs a fixed "
                         f"multiplier (missing {missing})")
    rows: list[dict[str, Any]] = []
    for agg in aggregators:
        spec = DEMO_SPECS[agg] if agg in DEMO_SPECS else AdvantageSpec(aggregator=agg)
        for v in values:
            lam_map = {**{c: float(fixed.get(c, 0.0)) for c in costs}, sweep: float(v)}
            lam = np.array([lam_map[c] for c in costs])
            w = effective_weights(x, lam, spec)
            for name, wj in zip(components, w):
                rows.append({"aggregator": agg, **{f"lambda_{c}": lam_map[c] for c in costs},
                             "component": name, "weight": float(wj)})
    return pd.DataFrame(rows)


def sweep_spans(df: pd.DataFrame) -> pd.DataFrame:
    """Per aggregator and component: the weight's min, max and span = max - min over the sweep."""
    g = df.groupby(["aggregator", "component"], sort=False)["weight"]
    out = pd.DataFrame({"min": g.min(), "max": g.max()})
    out["span"] = out["max"] - out["min"]
    return out.reset_index()


def _plot_controlled(df: pd.DataFrame, sweep: str, fixed: Mapping[str, float], path: Path, env_id: str = ENV_ID) -> Path:
    aggs = list(dict.fromkeys(df["aggregator"]))
    titles = {"screw": "ScRew: scalarize, then standardize", "scadv": "ScAdv: standardize, then scalarize",
              "corr": "CorrGRPO: centred sum / sqrt(sum ρ)", "is": "IS-GRPO: (x - mean) / mean σ",
              "mdp": "MDP-GRPO: dual anchor, prospect"}
    # Own y scales: CorrGRPO's weights keep the components' units (fuel's std is ~30 times the reward's).
    fig, axes = plt.subplots(1, len(aggs), figsize=(3.6 * len(aggs), 3.8), sharey=False, squeeze=False,
                             layout="constrained")
    for ax, agg in zip(axes[0], aggs):
        d = df[df["aggregator"] == agg]
        for comp in dict.fromkeys(d["component"]):
            c = d[d["component"] == comp]
            ax.plot(c[f"lambda_{sweep}"], c["weight"], lw=1.8, label=comp, color=_COMPONENT_COLORS.get(comp))
        ax.set(title=titles.get(agg, agg), xlabel=f"λ_{sweep}")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("effective weight (per within-group std)")
    fixed_s = ", ".join(f"λ_{k} = {v:g}" for k, v in fixed.items())
    fig.suptitle(f"{env_id}: effective weights, {fixed_s} fixed", fontsize=10)
    outside_legend(fig, fontsize=8)
    return _save(fig, path)


def run_demo(
    out: str | Path,
    *,
    env_id: str = ENV_ID,
    num_groups: int = 16,
    group_size: int = 16,
    lambda_hazard: float = 0.5,
    lambda_fuel_max: float = 3.0,
    points: int = 31,
    seed: int = 0,
    epsilon: float = 0.1,
    verbose: bool = True,
) -> tuple[list[Path], pd.DataFrame]:
    """Collect the fixed batch, sweep lambda_fuel in [0, lambda_fuel_max] with lambda_hazard
    fixed, write ``controlled.csv`` and ``controlled.png``; return the paths and the spans."""
    out = Path(out)
    x, names = collect_batch(env_id, num_groups, group_size, seed=seed, epsilon=epsilon)
    values = np.linspace(0.0, lambda_fuel_max, points)
    fixed = {"hazard": float(lambda_hazard)}
    df = effective_weight_sweep(x, names, fixed, "fuel", values)
    csv_path = out / "controlled.csv"
    atomic_write_csv(csv_path, df.to_dict("records"))
    png = _plot_controlled(df, "fuel", fixed, out / "controlled.png", env_id)
    spans = sweep_spans(df)
    if verbose:
        sigma = x.std(axis=1).mean(axis=0)
        varies = (x.std(axis=1) > 0).mean(axis=0)
        print(f"batch: {num_groups} groups x {group_size} episodes of a scripted route mixture on {env_id} "
              f"(epsilon {epsilon}); mean within-group std " + ", ".join(f"{n} {s:.3f}" for n, s in zip(names, sigma))
              + "; share of groups where it varies " + ", ".join(f"{n} {v:.2f}" for n, v in zip(names, varies)))
        print(f"sweep: lambda_fuel 0..{lambda_fuel_max:g} ({points} points), lambda_hazard = {lambda_hazard:g}")
        for _, r in spans.iterrows():
            print(f"  {r['aggregator']:6s} {r['component']:7s} weight {r['min']:.4f} .. {r['max']:.4f}  "
                  f"(span {r['span']:.3g})")
        s = spans.set_index(["aggregator", "component"])["span"]
        ends = df[df["lambda_fuel"].isin([values[0], values[-1]])]
        ends = ends.set_index(["aggregator", "component", "lambda_fuel"])["weight"]
        for comp in names[:2]:
            print(f"headline: across lambda_fuel 0..{lambda_fuel_max:g} ScRew's weight on {comp} moves by "
                  f"{s[('screw', comp)]:.4f} ({ends[('screw', comp, values[0])]:.4f} at 0 -> "
                  f"{ends[('screw', comp, values[-1])]:.4f} at {lambda_fuel_max:g}), ScAdv's by {s[('scadv', comp)]:.2e} "
                  f"(constant {ends[('scadv', comp, values[0])]:.4f})")
        for agg in (a for a in DEMO_SPECS if a not in ("screw", "scadv")):
            print(f"beside them, {agg}: " + ", ".join(
                f"{comp} {ends[(agg, comp, values[0])]:.4f} -> {ends[(agg, comp, values[-1])]:.4f}" for comp in names))
        print(f"wrote {csv_path} and {png}")
    return [csv_path, png], spans


# ========================================================================= analyze


def _tail(x: np.ndarray, frac: float) -> np.ndarray:
    return x[-tail_length(len(x), frac):]


def violation_rate(costs: Sequence[float] | np.ndarray, limit: float, frac: float = TAIL_FRAC) -> float:
    """Fraction of tail iterations (:func:`~constrained_grpo.eval.scoring.metrics.tail_length`) whose mean
    episodic cost exceeds the limit: (1/n) sum_{t in tail} [J_t > d] (iterations without an
    estimate, NaN, left out)."""
    t = _tail(np.asarray(costs, dtype=np.float64), frac)
    t = t[np.isfinite(t)]
    return float(np.count_nonzero(t > limit) / t.size) if t.size else math.nan


def _signal(w: Sequence[float] | np.ndarray) -> np.ndarray:
    """The second half of an effective-weight series, without the iterations where it is 0.

    ``effective_weights`` gives 0 when the component varies in no group of the batch (no
    signal, whatever the aggregator): those iterations say nothing about the coupling and
    are counted by ``effw_zero`` instead.
    """
    x = second_half(np.asarray(w, dtype=np.float64))
    return x[np.isfinite(x) & (x != 0)]


def weight_variability(w: Sequence[float] | np.ndarray) -> float:
    """Population std of an effective weight over the second half of training (t >= floor(T/2)),
    over the iterations where it is nonzero (the component carried signal)."""
    x = _signal(w)
    if not x.size:
        return math.nan
    mean = fmean(x)
    return math.sqrt(fmean((x - mean) ** 2))


def zero_weight_fraction(w: Sequence[float] | np.ndarray) -> float:
    """Fraction of second-half iterations whose effective weight is 0 (no group varied the component)."""
    x = second_half(np.asarray(w, dtype=np.float64))
    x = x[np.isfinite(x)]
    return float(np.count_nonzero(x == 0) / x.size) if x.size else math.nan


def transmission(w: Sequence[float] | np.ndarray, lam: Sequence[float] | np.ndarray, floor: float = 1e-3) -> float:
    """Mean over the second half of w_k,t / lambda_k,t-1 (iterations with lambda > ``floor`` and w != 0).

    How much of the multiplier reaches the advantage: exactly 1 for ScAdv with z-scores;
    sigma_k / sigma_S for ScRew. ``eff_w`` of iteration t is computed with the multipliers
    logged at t - 1 (before that iteration's dual step), hence the pairing.
    """
    w2 = np.asarray(w, dtype=np.float64)[1:]
    lam2 = np.asarray(lam, dtype=np.float64)[:-1]
    if w2.size == 0:
        return math.nan
    w2, lam2 = second_half(w2), second_half(lam2)
    ok = np.isfinite(w2) & np.isfinite(lam2) & (lam2 > floor) & (w2 != 0)
    return fmean(w2[ok] / lam2[ok]) if ok.any() else math.nan


@dataclass(frozen=True)
class RunData:
    """One run of the long table (``eval.loader``)."""

    algo: str
    seed: int
    progress: pd.DataFrame
    """Its train rows (``iteration``, ``env_steps``, ``return``, ``cost_<k>``, ``lambda_<k>``, ``eff_w_<j>``)."""
    evals: pd.DataFrame
    """The evaluation summary of its sampled policy (the final policy, actions sampled): one
    row of :func:`~constrained_grpo.eval.scoring.metrics.eval_summaries`, none if not evaluated."""
    env_id: str
    optimum: float | None
    config: Mapping[str, Any] = field(default_factory=dict)
    """The resolved algorithm configuration (``config.json["algo"]["resolved"]`` without the
    algorithm's name), flattened to dotted keys."""


def run_row(
    progress: pd.DataFrame,
    constraints: Sequence[Constraint],
    optimum: float | None,
    *,
    frac: float = TAIL_FRAC,
    tol: float = TOL,
) -> dict[str, Any]:
    """Metrics of one run's T train rows; tail = the last max(1, ceil(frac T)) iterations
    (:func:`~constrained_grpo.eval.scoring.metrics.tail_length`, the suite's one tail rule).

    * ``tail_return`` = mean of R_t over the tail; ``return_gap`` = R* - tail_return,
      ``rel_return_gap`` = return_gap / |R*|;
    * per constraint k: ``tail_cost_k``, ``viol_rate_k`` (:func:`violation_rate`),
      ``tail_lambda_k``, ``max_lambda_k``, and :func:`~constrained_grpo.eval.scoring.stability.multiplier_stability`
      of lambda_k (``stability_k``, ``stability_class_k``, ``amplitude_k``, ``tv_k``,
      ``osc_k``, ``drift_k``, ``settling_k``, ``overshoot_k``);
    * ``within_limits`` = all_k tail_cost_k <= (1 + tol) d_k; ``return_ok`` =
      tail_return >= R* - tol |R*|; ``passed`` = both (:func:`~constrained_grpo.eval.scoring.metrics.tail_summary`'s criterion);
    * per component j, over the second half: ``effw_mean_j`` and ``effw_std_j``
      (:func:`weight_variability`) of eff_w_j where it is nonzero, ``effw_zero_j``
      (:func:`zero_weight_fraction`); per constraint ``transmission_k`` (:func:`transmission`).
    """
    p = progress.sort_values("iteration")
    steps = p["env_steps"].to_numpy(dtype=np.float64)
    ret = p["return"].to_numpy(dtype=np.float64)
    row: dict[str, Any] = {"iterations": len(p), "env_steps": int(steps[-1]),
                           "tail_iterations": tail_length(len(p), frac)}
    row["tail_return"] = final_performance(ret, frac)
    row["optimum"] = math.nan if optimum is None else float(optimum)
    row["return_gap"] = row["optimum"] - row["tail_return"]
    row["rel_return_gap"] = row["return_gap"] / abs(row["optimum"]) if optimum else math.nan
    within = True
    for c in constraints:
        cost = p[f"cost_{c.name}"].to_numpy(dtype=np.float64)
        tail_cost = final_performance(cost, frac)
        row[f"tail_cost_{c.name}"] = tail_cost
        row[f"viol_rate_{c.name}"] = violation_rate(cost, c.limit, frac)
        within = within and tail_cost <= c.limit * (1.0 + tol)
        col = f"lambda_{c.name}"
        if col in p and p[col].notna().all():
            lam = p[col].to_numpy(dtype=np.float64)
            row[f"tail_lambda_{c.name}"] = final_performance(lam, frac)
            row[f"max_lambda_{c.name}"] = float(lam.max())
            ms = asdict(multiplier_stability(steps, lam, cost, c.limit))
            for name, value in ms.items():
                short = {"score": "stability", "verdict": "stability_class", "oscillations": "osc"}.get(name, name)
                row[f"{short}_{c.name}"] = value
    row["within_limits"] = bool(within)
    row["return_ok"] = bool(optimum is not None and row["tail_return"] >= optimum - tol * abs(optimum))
    row["passed"] = bool(within and row["return_ok"])
    for comp in ["reward", *(c.name for c in constraints)]:
        col = f"eff_w_{comp}"
        if col in p:
            w = p[col].to_numpy(dtype=np.float64)
            sig = _signal(w)
            row[f"effw_mean_{comp}"] = fmean(sig) if sig.size else math.nan
            row[f"effw_std_{comp}"] = weight_variability(w)
            row[f"effw_zero_{comp}"] = zero_weight_fraction(w)
    for c in constraints:
        if f"eff_w_{c.name}" in p and f"lambda_{c.name}" in p:
            row[f"transmission_{c.name}"] = transmission(p[f"eff_w_{c.name}"], p[f"lambda_{c.name}"])
    return row


def last_iterate_row(
    evals: pd.DataFrame,
    constraints: Sequence[Constraint],
    optimum: float | None,
    *,
    tol: float = TOL,
) -> dict[str, Any]:
    """The same criterion applied to the final policy instead of the training tail.

    The tail is an average over policy iterates; a Lagrangian method can meet its limits on
    that average while the last iterate, the policy a user deploys, violates them. From the
    run's evaluation episodes i of its final policy (actions sampled; ``evals``: their summary
    row): ``final_eval_return`` = mean R_i, ``final_eval_cost_k`` = mean C_{k,i};
    ``final_within_limits`` = all_k final_eval_cost_k <= (1 + tol) d_k, ``final_return_ok`` =
    final_eval_return >= R* - tol |R*|, ``final_passed`` = both (NaN/False without evaluation).
    """
    ret = float(evals["return_mean"].iloc[0]) if len(evals) else math.nan
    row: dict[str, Any] = {"final_eval_return": ret}
    within = math.isfinite(ret)
    for c in constraints:
        cost = float(evals[f"mean_{c.name}"].iloc[0]) if len(evals) else math.nan
        row[f"final_eval_cost_{c.name}"] = cost
        within = within and cost <= c.limit * (1.0 + tol)
    row["final_within_limits"] = bool(within)
    row["final_return_ok"] = bool(optimum is not None and math.isfinite(ret) and ret >= optimum - tol * abs(optimum))
    row["final_passed"] = bool(within and row["final_return_ok"])
    return row


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def load_runs(root: str | Path, *, allow_incomplete: bool = False) -> tuple[list[RunData], tuple[Constraint, ...]]:
    """The runs of ``cgrpo bench --out ROOT`` (the long table of :func:`~constrained_grpo.eval.scoring.loader.load_results`)
    and their task's constraints. One task per analysis: several tasks (or one task with
    different limits, which the loader refuses) are an error naming them."""
    from constrained_grpo.eval.scoring.loader import load_results, run_configs

    results = load_results(root, allow_incomplete=allow_incomplete)
    if len(results.tasks) != 1:
        raise ValueError(f"runs under {root} span the tasks {sorted(results.tasks)}; analyze one task at a time "
                         f"(`cgrpo bench --preset coupling --out DIR` writes one)")
    meta = next(iter(results.tasks.values()))
    configs: dict[tuple[str, int], dict[str, Any]] = {}
    for cfg in run_configs(root).values():
        run, algo = cfg.get("run", {}), cfg.get("algo", {})
        resolved = {k: v for k, v in (algo.get("resolved") or {}).items() if k != "algo"}  # the name differs by design
        configs[(str(run.get("algo")), int(run.get("seed", -1)))] = _flat(resolved)
    table = results.table
    evals = results.evals
    sampled = evals[evals["policy"] == "sampled"]
    runs = []
    for (algo, seed), g in table.groupby(["algo", "seed"], sort=True):
        train = g[g["kind"] == "train"].sort_values("iteration").reset_index(drop=True)
        ev = sampled[(sampled["algo"] == algo) & (sampled["seed"] == seed)]
        runs.append(RunData(str(algo), int(seed), train, ev.reset_index(drop=True), meta.task, meta.optimum_return,
                            configs.get((str(algo), int(seed)), {})))
    return runs, tuple(meta.constraints)


def config_differences(runs: Sequence[RunData]) -> dict[str, dict[str, list[Any]]]:
    """Config keys (flattened ``config.json``) whose values differ between runs:
    ``{key: {algo: sorted distinct values}}``. A fair comparison differs in ``config.aggregator`` only."""
    keys = sorted({k for r in runs for k in r.config})
    out: dict[str, dict[str, list[Any]]] = {}
    for k in keys:
        values = {repr(r.config.get(k)) for r in runs}
        if len(values) > 1:
            out[k] = {a: sorted({repr(r.config.get(k)) for r in runs if r.algo == a})
                      for a in _algo_order(sorted({r.algo for r in runs}))}
    return out


def _algo_order(algos: Sequence[str]) -> list[str]:
    known = [a for a in ALGOS if a in algos]
    return known + sorted(set(algos) - set(known))


def summarize(runs: pd.DataFrame, metrics: Sequence[str] | None = None, *, level: float = 0.95) -> pd.DataFrame:
    """Per algorithm x metric: mean over seeds and a percentile-bootstrap interval.

    ``stats.stratified_bootstrap_ci`` with one stratum (one task): resample the n seeds
    with replacement ``BOOTSTRAP_REPS`` times (generator seeded ``BOOTSTRAP_SEED``); the
    interval is the 2.5 and 97.5 percentiles of the resampled means. Booleans count as
    0/1 (the mean is a fraction of seeds); NaN values are left out of n.
    Columns: ``algo, metric, mean, ci_low, ci_high, n``.
    """
    skip = {"algo", "seed", "env_id"}
    if metrics is None:
        metrics = [c for c in runs.columns if c not in skip
                   and (pd.api.types.is_numeric_dtype(runs[c]) or pd.api.types.is_bool_dtype(runs[c]))]
    rows: list[dict[str, Any]] = []
    for algo in _algo_order(list(runs["algo"].unique())):
        g = runs[runs["algo"] == algo]
        for m in metrics:
            if m not in g:
                continue
            v = g[m].astype(float).to_numpy()
            v = v[np.isfinite(v)]
            if v.size == 0:
                rows.append({"algo": algo, "metric": m, "mean": math.nan, "ci_low": math.nan,
                             "ci_high": math.nan, "n": 0})
                continue
            point, lo, hi = stratified_bootstrap_ci([v], np.mean, reps=BOOTSTRAP_REPS, seed=BOOTSTRAP_SEED, level=level)
            rows.append({"algo": algo, "metric": m, "mean": point, "ci_low": lo, "ci_high": hi, "n": int(v.size)})
    return pd.DataFrame(rows, columns=["algo", "metric", "mean", "ci_low", "ci_high", "n"])


def _key_metrics(constraints: Sequence[Constraint]) -> list[tuple[str, str]]:
    """(metric, description) rows of the Markdown table."""
    names = [c.name for c in constraints]
    rows = [("tail_return", "tail return (last 20% of iterations, rounded up)"),
            ("return_gap", "gap to R* (R* - tail return)"),
            ("passed", "fraction of seeds meeting the criterion (average iterate: training tail)"),
            ("final_passed", "fraction of seeds meeting the criterion (last iterate: final policy, sampled)"),
            ("final_eval_return", "final policy's evaluated return")]
    for c in constraints:
        rows += [(f"tail_cost_{c.name}", f"tail cost {c.name} (limit {c.limit:g})"),
                 (f"final_eval_cost_{c.name}", f"final policy's cost {c.name} (limit {c.limit:g})"),
                 (f"viol_rate_{c.name}", f"tail iterations with J_{c.name} > {c.limit:g}")]
    for n in names:
        rows += [(f"tail_lambda_{n}", f"λ_{n}, tail mean"), (f"max_lambda_{n}", f"λ_{n}, max"),
                 (f"tv_{n}", f"λ_{n} total variation (2nd half)"), (f"osc_{n}", f"λ_{n} oscillations (2nd half)"),
                 (f"drift_{n}", f"λ_{n} drift (2nd half)"), (f"stability_{n}", f"λ_{n} stability score")]
    for comp in ["reward", *names]:
        rows += [(f"effw_mean_{comp}", f"eff. weight {comp}, mean (2nd half, nonzero)"),
                 (f"effw_std_{comp}", f"eff. weight {comp}, std (2nd half, nonzero)"),
                 (f"effw_zero_{comp}", f"eff. weight {comp}: share of 2nd-half iterations at 0")]
    rows += [(f"transmission_{n}", f"w_{n} / λ_{n} (2nd half)") for n in names]
    return rows


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.2e}"
    return f"{x:.3g}" if abs(x) >= 100 else f"{x:.3f}"


def render_markdown(summary: pd.DataFrame, constraints: Sequence[Constraint], optimum: float | None,
                    command: str, runs: pd.DataFrame, config_diffs: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """A compact Markdown table: one row per key metric, one column per algorithm, mean [95% CI]."""
    algos = _algo_order(list(summary["algo"].unique()))
    idx = summary.set_index(["algo", "metric"])
    lim = ", ".join(f"{c.name} ≤ {c.limit:g}" for c in constraints)
    counts = ", ".join(f"{a}: {int((runs['algo'] == a).sum())} seeds" for a in algos)
    lines = [
        f"# Coupling: ScRew (`grpo-screw`) vs ScAdv (`cgrpo`) on "
        f"{', '.join(sorted(runs['env_id'].unique())) if 'env_id' in runs and len(runs) else ENV_ID}",
        "",
        f"Limits {lim}; exact constrained optimum R* = {_fmt(optimum) if optimum is not None else '–'}. {counts}.",
        "Mean over seeds [95% percentile-bootstrap interval of the mean: 2000 resamples of the seeds, "
        "generator seed 0, `constrained_grpo.eval.scoring.stats.stratified_bootstrap_ci` with one stratum]. "
        "Tail = last ⌈0.2·T⌉ of the T iterations (`eval.metrics.tail_length`); criterion = every tail cost ≤ 1.1·limit and tail return ≥ 0.9·R*. "
        "The criterion is scored twice: on the average iterate (the training tail, an average over policies) and "
        "on the last iterate (the final policy, evaluated on sampled episodes): a Lagrangian method can meet its "
        "limits on average while its final policy violates them. "
        "Multiplier metrics from `eval.stability.multiplier_stability`; effective weights as logged (`eff_w_*`).",
        "",
        "| metric | " + " | ".join(f"`{a}`" for a in algos) + " |",
        "|---|" + "---|" * len(algos),
    ]
    for metric, desc in _key_metrics(constraints):
        cells = []
        for a in algos:
            if (a, metric) not in idx.index:
                cells.append("–")
                continue
            r = idx.loc[(a, metric)]
            cells.append(f"{_fmt(r['mean'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]")
        if all(c == "–" for c in cells):
            continue
        lines.append(f"| {desc} | " + " | ".join(cells) + " |")
    if config_diffs:
        lines += ["", "Config values that differ between runs (`config.json`, the resolved configuration `algo.resolved`):", ""]
        lines += [f"- `{k}`: " + "; ".join(f"`{a}` {', '.join(vals)}" for a, vals in v.items())
                  for k, v in config_diffs.items()]
    lines += ["", "Every metric of every run is in `coupling_runs.csv`, and per algorithm in `coupling_summary.csv`.",
              "", "Regenerate with:", "", "```", command, "```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ figures


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:  # the suite's figures use constrained layout (outside legends)
        fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=110, metadata={"Software": None})
    plt.close(fig)
    tmp.replace(path)
    return path


def _mean_band(runs: Sequence[RunData], column: str, drop_zero: bool = False,
               smooth: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean, lo, hi) over seeds on a common env-step grid (linear interpolation over
    the steps every run covers); the band is the 95% t-interval of the mean,
    mean ± t_{0.975, n-1} s / sqrt(n) (no band for one seed). ``drop_zero`` leaves out
    iterations where the value is 0 (an effective weight without signal); ``smooth`` > 0
    first takes each run's centred rolling mean over that fraction of its iterations."""
    series = []
    for r in runs:
        if column not in r.progress:
            continue
        keep = r.progress[column].notna() & ((r.progress[column] != 0) if drop_zero else True)
        p = r.progress[keep]
        if len(p):
            y = p[column].astype(float)
            if smooth > 0:
                y = y.rolling(max(1, int(round(smooth * len(r.progress)))), center=True, min_periods=1).mean()
            series.append((p["env_steps"].to_numpy(dtype=float), y.to_numpy(dtype=float)))
    if not series:
        return None
    start, end = max(s[0] for s, _ in series), min(s[-1] for s, _ in series)
    grid = np.linspace(start, end, _GRID_POINTS) if end > start else np.array([end])
    v = np.stack([np.interp(grid, s, y) for s, y in series])
    mean = v.mean(axis=0)
    if len(series) < 2:
        return grid, mean, mean, mean
    half = sps.t.ppf(0.975, len(series) - 1) * v.std(axis=0, ddof=1) / math.sqrt(len(series))
    return grid, mean, mean - half, mean + half


def _colors(algos: Sequence[str]) -> dict[str, Any]:
    """The algorithms' colours of every figure of the suite (``eval.colors``)."""
    from constrained_grpo.eval.scoring.colors import algo_colors

    return algo_colors(algos)


def _panel(ax: plt.Axes, by_algo: Mapping[str, Sequence[RunData]], column: str, colors: Mapping[str, Any],
           ls: str = "-", label_suffix: str = "", drop_zero: bool = False, smooth: float = 0.0) -> None:
    for a, rs in by_algo.items():
        c = _mean_band(rs, column, drop_zero, smooth)
        if c is None:
            continue
        x, m, lo, hi = c
        if column.startswith(("cost_", "lambda_")):  # neither can be negative: the interval stops at 0
            lo, hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        ax.plot(x, m, color=colors[a], ls=ls, lw=1.5, label=f"{a}{label_suffix} (n={len(rs)})")
        if ls == "-":
            ax.fill_between(x, lo, hi, color=colors[a], alpha=0.2, lw=0)


def _figures(runs: Sequence[RunData], constraints: Sequence[Constraint], optimum: float | None, out: Path) -> list[Path]:
    algos = _algo_order(sorted({r.algo for r in runs}))
    by_algo = {a: [r for r in runs if r.algo == a] for a in algos}
    colors = _colors(algos)
    names = [c.name for c in constraints]
    task = ", ".join(sorted({r.env_id for r in runs}))  # the task(s) these runs ran on
    band = "mean ± 95% t-interval over seeds"
    smooth_s = f"each run smoothed by a rolling mean over {SMOOTH:.0%} of its iterations"
    paths = []

    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 3.6), squeeze=False, layout="constrained")
    for ax, n in zip(axes[0], names):
        _panel(ax, by_algo, f"lambda_{n}", colors)
        ax.set(title=f"λ_{n}")
        env_steps_axis(ax)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{task}: multipliers ({band})", fontsize=10)
    outside_legend(fig)
    paths.append(_save(fig, out / "multipliers.png"))

    comps = ["reward", *names]
    fig, axes = plt.subplots(1, len(comps), figsize=(4.6 * len(comps), 3.6), squeeze=False, layout="constrained")
    for ax, comp in zip(axes[0], comps):
        _panel(ax, by_algo, f"eff_w_{comp}", colors, drop_zero=True, smooth=SMOOTH)
        if comp != "reward":
            _panel(ax, by_algo, f"lambda_{comp}", colors, ls=":", label_suffix=" λ")
        ax.set(title=f"effective weight on {comp}" + ("" if comp == "reward" else " (dotted: λ)"))
        env_steps_axis(ax)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{task}: effective weights ({band};\n{smooth_s}; iterations where no group varied "
                 "the component, weight 0, left out)", fontsize=10)
    outside_legend(fig)
    paths.append(_save(fig, out / "effective_weights.png"))

    fig, axes = plt.subplots(1, 1 + len(names), figsize=(4.6 * (1 + len(names)), 3.6), squeeze=False,
                             layout="constrained")
    ax = axes[0, 0]
    _panel(ax, by_algo, "return", colors, smooth=SMOOTH)
    if optimum is not None:
        ax.axhline(optimum, color="k", ls="--", lw=1, label=f"R* = {optimum:.4f}")
        ax.axhspan(optimum * (1 - TOL), optimum, color="k", alpha=0.06, lw=0)
    ax.set(title="return")
    env_steps_axis(ax)
    ax.grid(alpha=0.3)
    for ax, c in zip(axes[0, 1:], constraints):
        _panel(ax, by_algo, f"cost_{c.name}", colors, smooth=SMOOTH)
        # Generic labels, so that the figure's one legend names each kind of line once; the limit is in the title.
        ax.axhline(c.limit, color="r", ls="--", lw=1, label="limit")
        ax.axhline(c.limit * (1 + TOL), color="r", ls=":", lw=1, label=f"{1 + TOL:g} × limit")
        ax.set(title=f"cost {c.name} (limit {c.limit:g})")
        env_steps_axis(ax)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{task}: return and costs vs limits ({band}; {smooth_s})", fontsize=10)
    outside_legend(fig)
    paths.append(_save(fig, out / "costs.png"))
    return paths


def analyze(
    runs_dir: str | Path,
    out: str | Path,
    *,
    allow_incomplete: bool = False,
    command: str | None = None,
    verbose: bool = True,
) -> tuple[list[Path], pd.DataFrame, pd.DataFrame]:
    """Per-run metrics, their per-algorithm summary, Markdown table and figures under ``out``,
    from the runs of ``cgrpo bench --out RUNS_DIR``. Returns (paths, runs table, summary table)."""
    out = Path(out)
    runs, constraints = load_runs(runs_dir, allow_incomplete=allow_incomplete)
    rows = [{"algo": r.algo, "seed": r.seed, "env_id": r.env_id,
             **run_row(r.progress, constraints, r.optimum), **last_iterate_row(r.evals, constraints, r.optimum)}
            for r in runs]
    table = pd.DataFrame(rows)
    order = {a: i for i, a in enumerate(_algo_order(list(table["algo"].unique())))}
    rank = np.lexsort((table["seed"].to_numpy(), table["algo"].map(order).to_numpy()))
    table = table.iloc[rank].reset_index(drop=True)
    summary = summarize(table)
    optimum = runs[0].optimum
    if command is None:
        command = "python -m constrained_grpo.eval.studies.coupling analyze " + shlex.join([str(runs_dir), "--out", str(out)])
    command = f"{bench_command(runs_dir)}\n{command}"
    paths = [out / "coupling_runs.csv", out / "coupling_summary.csv", out / "coupling.md"]
    atomic_write_csv(paths[0], table.to_dict("records"))
    atomic_write_csv(paths[1], summary.to_dict("records"))
    diffs = config_differences(runs)
    atomic_write_text(paths[2], render_markdown(summary, constraints, optimum, command, table, diffs))
    paths += _figures(runs, constraints, optimum, out)
    if verbose:
        _print_headline(table, summary, constraints, optimum)
        for k, v in diffs.items():
            print(f"config differs: {k}: " + "; ".join(f"{a} {vals}" for a, vals in v.items()))
        print("wrote " + ", ".join(str(p) for p in paths))
    return paths, table, summary


def _print_headline(table: pd.DataFrame, summary: pd.DataFrame, constraints: Sequence[Constraint],
                    optimum: float | None) -> None:
    idx = summary.set_index(["algo", "metric"])

    def cell(a: str, m: str) -> str:
        if (a, m) not in idx.index:
            return "–"
        r = idx.loc[(a, m)]
        return f"{_fmt(r['mean'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"

    print(f"R* = {optimum}; mean over seeds [95% percentile-bootstrap CI]")
    for a in _algo_order(list(table["algo"].unique())):
        g = table[table["algo"] == a]
        print(f"{a} ({len(g)} seeds, passed {int(g['passed'].sum())}/{len(g)} on the average iterate, "
              f"{int(g['final_passed'].sum())}/{len(g)} on the last iterate):")
        print(f"  tail return {cell(a, 'tail_return')}  gap to R* {cell(a, 'return_gap')}")
        for c in constraints:
            n = c.name
            print(f"  {n}: tail cost {cell(a, f'tail_cost_{n}')} (limit {c.limit:g}), "
                  f"violation rate {cell(a, f'viol_rate_{n}')}")
            print(f"     λ tail {cell(a, f'tail_lambda_{n}')}, max {cell(a, f'max_lambda_{n}')}, "
                  f"TV {cell(a, f'tv_{n}')}, osc {cell(a, f'osc_{n}')}, drift {cell(a, f'drift_{n}')}, "
                  f"stability {cell(a, f'stability_{n}')}")
        for comp in ["reward", *(c.name for c in constraints)]:
            print(f"  eff_w_{comp} (2nd half, nonzero): mean {cell(a, f'effw_mean_{comp}')}, "
                  f"std {cell(a, f'effw_std_{comp}')}, zero {cell(a, f'effw_zero_{comp}')}"
                  + (f", w/λ {cell(a, f'transmission_{comp}')}" if comp != "reward" else ""))


# ============================================================================== CLI


def bench_command(runs_dir: str | Path) -> str:
    """The command that writes the runs ``analyze`` reads (agents not saved: the tables and
    figures need the logs only)."""
    return shlex.join(["cgrpo", "bench", "--preset", "coupling", "--out", str(runs_dir), "--no-save"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.studies.coupling",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="controlled demonstration: effective weights on a fixed batch (no training)")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--groups", type=int, default=16, help="P, groups (reset seeds) in the batch")
    d.add_argument("--group-size", type=int, default=16, help="G, episodes per group")
    d.add_argument("--lambda-hazard", type=float, default=0.5, help="fixed multiplier of the hazard cost")
    d.add_argument("--lambda-fuel-max", type=float, default=3.0, help="the sweep runs lambda_fuel over [0, this]")
    d.add_argument("--points", type=int, default=31, help="values of lambda_fuel in the sweep")
    d.add_argument("--epsilon", type=float, default=0.1, help="probability of a random action per step")
    d.add_argument("--seed", type=int, default=0)
    a = sub.add_parser("analyze", help="metrics, tables and figures of the cgrpo / grpo-screw runs")
    a.add_argument("runs_dir", type=Path, help="the --out of `cgrpo bench --preset coupling`")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--allow-incomplete", action="store_true",
                   help="also use runs that have not finished yet (no done.json)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.groups < 1 or args.group_size < 2 or args.points < 2:
            parser.error(f"need --groups >= 1, --group-size >= 2 and --points >= 2; got {args.groups}, "
                         f"{args.group_size}, {args.points}")
        run_demo(args.out, num_groups=args.groups, group_size=args.group_size, lambda_hazard=args.lambda_hazard,
                 lambda_fuel_max=args.lambda_fuel_max, points=args.points, seed=args.seed, epsilon=args.epsilon)
        return 0
    if not args.runs_dir.is_dir():
        parser.error(f"RUNS_DIR {str(args.runs_dir)!r} is not a directory; write it with "
                     f"`cgrpo bench --preset coupling --out {args.runs_dir}`")
    from constrained_grpo.eval.scoring.loader import ResultsError

    argv_used = list(sys.argv[1:] if argv is None else argv)
    command = "python -m constrained_grpo.eval.studies.coupling " + shlex.join(argv_used)
    try:
        analyze(args.runs_dir, args.out, allow_incomplete=args.allow_incomplete, command=command)
    except (ResultsError, ValueError) as err:
        parser.exit(2, f"error: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
