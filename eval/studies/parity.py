"""The parity run against OmniSafe itself (docs/parity.md; ``make parity`` builds its venv).

::

    python -m constrained_grpo.eval.studies.parity run --side omnisafe --task SafetyHopperVelocity-v1 \\
        --steps 1000000 --seed 0 --out results/parity/runs
    python -m constrained_grpo.eval.studies.parity run --side ours --task SafetyHopperVelocity-v1 \\
        --steps 1000000 --seed 0 --out results/parity/runs
    python -m constrained_grpo.eval.studies.parity table --runs results/parity/runs --out results/parity

``--side omnisafe`` runs ``omnisafe.Agent('PPOLag', task, custom_cfgs=...)`` in
``.venv-parity`` (this file, run there as a plain script: it imports nothing from
constrained_grpo at module level); ``--side ours`` runs ``ppo-lag-omnisafe`` on
``Safety/<task minus 'Safety'>`` through the bridge with ``cgrpo train``'s machinery
(:func:`~constrained_grpo.eval.runner.execute_run`). Both write
``<out>/<side>/seed_<S>/curve.csv`` (per epoch: ``env_steps, ep_return, ep_cost,
ep_length``, the mean of the last ``WINDOW`` training episodes, which is what OmniSafe logs
as ``Metrics/EpRet`` / ``Metrics/EpCost`` / ``Metrics/EpLen``) and ``meta.json`` (command,
wall time, env-steps/s).

``table`` writes ``parity.csv`` / ``parity.md`` (final return and cost per side: mean
over seeds with a 95% Student-t interval), ``difference.csv`` (ours - OmniSafe at five
checkpoints of the run, with a 95% Welch interval: the sides' seeds are independent runs,
not pairs) and ``curves.png`` (both sides on one figure).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: OmniSafe 0.5.0 logs Metrics/EpRet and Metrics/EpCost over the last 50 episodes
#: (policy_gradient.py, _init_log: register_key(..., window_length=50)); so does ours.
WINDOW = 50
SIDES = ("omnisafe", "ours")
OMNISAFE_ALGO = "PPOLag"
OURS_ALGO = "ppo-lag-omnisafe"
PARITY_PYTHON = Path(".venv-parity/bin/python")
CURVE_FIELDS = ("env_steps", "ep_return", "ep_cost", "ep_length")
#: Where ``difference.csv`` compares the sides, as fractions of the run's env steps.
CHECKPOINTS = (0.2, 0.4, 0.6, 0.8, 1.0)


def our_task(task: str) -> str:
    """``SafetyHopperVelocity-v1`` -> ``Safety/HopperVelocity-v1`` (the bridge's id)."""
    if not task.startswith("Safety") or task.startswith("Safety/"):
        raise ValueError(f"--task {task!r}: give Safety-Gymnasium's id, e.g. SafetyHopperVelocity-v1")
    return "Safety/" + task[len("Safety"):]


def _write_curve(path: Path, rows: list[dict[str, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CURVE_FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: repr(float(row[k])) for k in CURVE_FIELDS})


def _read_curve(path: Path) -> list[dict[str, float]]:
    """The curve's rows; a column it lacks reads nan."""
    with open(path, newline="") as f:
        return [{k: float(r.get(k) or "nan") for k in CURVE_FIELDS} for r in csv.DictReader(f)]


def _omnisafe_cfgs(steps: int, seed: int, steps_per_epoch: int, log_dir: str) -> dict[str, Any]:
    # Only the budget, the seed, one torch thread (as ours) and quiet logging differ from
    # PPOLag.yaml's defaults.
    return {
        "seed": seed,
        "train_cfgs": {"total_steps": steps, "torch_threads": 1, "device": "cpu"},
        "algo_cfgs": {"steps_per_epoch": steps_per_epoch},
        "logger_cfgs": {"log_dir": log_dir, "use_tensorboard": False, "use_wandb": False, "save_model_freq": 10**9},
    }


def omnisafe_worker(task: str, steps: int, seed: int, steps_per_epoch: int, out: Path) -> None:
    """Runs in .venv-parity: OmniSafe's PPOLag; its progress.csv becomes curve.csv."""
    import omnisafe  # noqa: PLC0415  (only the parity venv has it)

    with tempfile.TemporaryDirectory() as log_dir:
        start = time.perf_counter()
        agent = omnisafe.Agent(OMNISAFE_ALGO, task, custom_cfgs=_omnisafe_cfgs(steps, seed, steps_per_epoch, log_dir))
        agent.learn()
        wall = time.perf_counter() - start
        progress = next(Path(log_dir).rglob("progress.csv"))
        with open(progress, newline="") as f:
            rows = [
                {"env_steps": float(r["TotalEnvSteps"]), "ep_return": float(r["Metrics/EpRet"]),
                 "ep_cost": float(r["Metrics/EpCost"]), "ep_length": float(r["Metrics/EpLen"])}
                for r in csv.DictReader(f)
            ]
    _write_curve(out / "curve.csv", rows)
    env_steps = int(rows[-1]["env_steps"]) if rows else 0
    (out / "meta.json").write_text(json.dumps({
        "side": "omnisafe", "algo": f"omnisafe {omnisafe.__version__} {OMNISAFE_ALGO}", "task": task, "seed": seed,
        "steps": steps, "env_steps": env_steps, "wall_s": wall, "env_steps_per_s": env_steps / wall,
        "custom_cfgs": _omnisafe_cfgs(steps, seed, steps_per_epoch, "<tmp>"),
    }, indent=1, sort_keys=True) + "\n")


def _windowed(records: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per iteration, the mean return, cost and length of the last ``WINDOW`` episodes, from
    each iteration's mean over its own episodes and their count (``n_episodes``): the oldest
    iteration in the window counts with the part of its episodes that fits."""
    keys = CURVE_FIELDS[1:]
    rows, past = [], []
    for rec in records:
        n = int(rec["n_episodes"])
        if n > 0:
            past.append((n, [rec[k] for k in keys]))
        left, sums = WINDOW, [[] for _ in keys]
        for count, means in reversed(past):
            take = min(count, left)
            for acc, m in zip(sums, means):
                acc.append(take * m)
            left -= take
            if left == 0:
                break
        used = WINDOW - left
        if used:
            rows.append({"env_steps": rec["env_steps"], **{k: math.fsum(acc) / used for k, acc in zip(keys, sums)}})
    return rows


def ours_run(task: str, steps: int, seed: int, steps_per_epoch: int, out: Path, eval_episodes: int) -> None:
    """``ppo-lag-omnisafe`` through the bridge, with ``cgrpo train``'s machinery."""
    from constrained_grpo.eval.runner import RunSpec, execute_run  # noqa: PLC0415

    records: list[dict[str, Any]] = []
    config = {} if steps_per_epoch == 20_000 else {"n_steps": steps_per_epoch}
    spec = RunSpec(our_task(task), OURS_ALGO, seed, steps, eval_episodes=eval_episodes, config=config, save_agent=False)
    start = time.perf_counter()
    # cgrpo train's run, plus the raw log records (the progress file's columns are the
    # record schema's business; the window needs ep_return, ep_cost and n_episodes).
    from constrained_grpo.baselines import agent as baseline_agent  # noqa: PLC0415

    learn = baseline_agent.BaselineAgent.learn

    def recording_learn(self: Any, total: int, log: Any = None) -> Any:
        def both(rec: dict[str, Any]) -> None:
            records.append({"env_steps": rec["env_steps"], "ep_return": rec["ep_return"],
                            "ep_cost": float(rec["ep_cost"][0]), "ep_length": rec["ep_length"],
                            "n_episodes": rec["n_episodes"]})
            if log is not None:
                log(rec)
        return learn(self, total, both)

    baseline_agent.BaselineAgent.learn = recording_learn  # type: ignore[method-assign]
    try:
        outcome = execute_run(spec, out / "run")
    finally:
        baseline_agent.BaselineAgent.learn = learn  # type: ignore[method-assign]
    wall = time.perf_counter() - start
    if outcome.status != "done":
        raise SystemExit(f"parity run {spec.key} {outcome.status}: {outcome.error}")
    _write_curve(out / "curve.csv", _windowed(records))
    env_steps = int(records[-1]["env_steps"]) if records else 0
    (out / "meta.json").write_text(json.dumps({
        "side": "ours", "algo": OURS_ALGO, "task": spec.task, "seed": seed, "steps": steps, "env_steps": env_steps,
        "wall_s": wall, "env_steps_per_s": env_steps / wall, "eval_episodes": eval_episodes,
        "rerun": spec.command("."),
    }, indent=1, sort_keys=True) + "\n")


def run(args: argparse.Namespace) -> None:
    out = Path(args.out) / args.side / f"seed_{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "constrained_grpo.eval.studies.parity", "run", "--side", args.side, "--task", args.task,
                          "--steps", str(args.steps), "--seed", str(args.seed), "--out", str(args.out)])
    if args.side == "ours":
        ours_run(args.task, args.steps, args.seed, args.steps_per_epoch, out, args.eval_episodes)
    else:
        python = Path(args.parity_python)
        if not python.exists():
            raise SystemExit(f"--side omnisafe needs {python}; build it with `make parity` (docs/parity.md)")
        subprocess.run([str(python), str(Path(__file__).resolve()), "omnisafe-worker", args.task, str(args.steps),
                        str(args.seed), str(args.steps_per_epoch), str(out)], check=True)
    meta = json.loads((out / "meta.json").read_text())
    meta["command"] = command
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(f"{args.side} seed {args.seed}: {meta['env_steps']} env steps in {meta['wall_s']:.0f} s "
          f"({meta['env_steps_per_s']:.0f} env-steps/s) -> {out}")


def _mean_var(values: list[float]) -> tuple[float, float]:
    """(mean, unbiased sample variance ``sum (x - mean)^2 / (n - 1)``; nan for one value)."""
    n = len(values)
    mean = math.fsum(values) / n
    return mean, (math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n >= 2 else float("nan"))


def t_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% Student-t interval); half-width nan for one value."""
    from scipy import stats  # noqa: PLC0415

    n = len(values)
    mean, var = _mean_var(values)
    if n < 2:
        return mean, float("nan")
    return mean, float(stats.t.ppf(0.975, n - 1)) * math.sqrt(var) / math.sqrt(n)


def welch_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean difference ``mean(b) - mean(a)`` of two independent samples, the half-width of
    its 95% Welch interval ``t_{0.975, nu} sqrt(s_a^2/n_a + s_b^2/n_b)`` and the
    Welch-Satterthwaite ``nu = (s_a^2/n_a + s_b^2/n_b)^2 / sum_i (s_i^2/n_i)^2 / (n_i - 1)``;
    half-width and ``nu`` nan unless both samples have two values and some spread."""
    from scipy import stats  # noqa: PLC0415

    (mean_a, var_a), (mean_b, var_b) = _mean_var(a), _mean_var(b)
    diff = mean_b - mean_a
    if min(len(a), len(b)) < 2:
        return diff, float("nan"), float("nan")
    va, vb = var_a / len(a), var_b / len(b)  # squared standard errors
    if va + vb == 0:
        return diff, float("nan"), float("nan")
    nu = (va + vb) ** 2 / math.fsum((va**2 / (len(a) - 1), vb**2 / (len(b) - 1)))
    return diff, float(stats.t.ppf(0.975, nu)) * math.sqrt(va + vb), nu


def at_steps(curve: list[dict[str, float]], steps: float) -> dict[str, float]:
    """The curve's first record at or past ``steps`` env steps (its last if none)."""
    return next((r for r in curve if r["env_steps"] >= steps), curve[-1])


def differences(curves: dict[str, list[list[dict[str, float]]]]) -> list[dict[str, Any]]:
    """Ours - OmniSafe in return and cost at each of ``CHECKPOINTS`` (fractions of the
    shortest run), with the 95% Welch interval and the verdict it supports."""
    if not all(curves.get(side) for side in SIDES):
        return []
    total = min(c[-1]["env_steps"] for side in SIDES for c in curves[side])
    rows = []
    for frac in CHECKPOINTS:
        steps = frac * total
        row: dict[str, Any] = {"env_steps": int(steps)}
        for key, name in (("ep_return", "return"), ("ep_cost", "cost")):
            a, b = ([at_steps(c, steps)[key] for c in curves[side]] for side in SIDES)
            diff, hw, _ = welch_interval(a, b)
            row[f"{name}_diff"], row[f"{name}_diff_ci95"] = round(diff, 2), round(hw, 2)
            # Rounded for the files (byte-stable across machines); the verdict from the exact values.
            row[f"{name}_verdict"] = (
                "no interval" if not math.isfinite(hw) else "not separated" if abs(diff) <= hw
                else ("ours higher" if diff > 0 else "ours lower")
            )
        rows.append(row)
    return rows


def _cell(value: float, half_width: float, missing: str = "no CI") -> str:
    """``value +- half_width``, or ``value (missing)`` where the data give no interval."""
    return f"{value} +- {half_width}" if math.isfinite(half_width) else f"{value} ({missing})"


def table(args: argparse.Namespace) -> None:
    runs, out = Path(args.runs), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves, commands = [], {}, []
    for side in SIDES:
        seeds = sorted((runs / side).glob("seed_*/curve.csv"))
        if not seeds:
            continue
        curves[side] = [_read_curve(p) for p in seeds]
        metas = [json.loads((p.parent / "meta.json").read_text()) for p in seeds]
        commands += [m["command"] for m in metas if "command" in m]
        finals = [c[-1] for c in curves[side] if c]
        ret, ret_hw = t_interval([f["ep_return"] for f in finals])
        cost, cost_hw = t_interval([f["ep_cost"] for f in finals])
        length = math.fsum(f["ep_length"] for f in finals) / len(finals)
        lengths = " ".join(f"{f['ep_length']:.0f}" if math.isfinite(f["ep_length"]) else "-" for f in finals)
        speed = math.fsum(m["env_steps_per_s"] for m in metas) / len(metas)
        rows.append({"side": side, "algo": metas[0]["algo"], "seeds": len(finals),
                     "env_steps": int(min(f["env_steps"] for f in finals)),
                     "return": round(ret, 2), "return_ci95": round(ret_hw, 2),
                     "cost": round(cost, 2), "cost_ci95": round(cost_hw, 2),
                     "ep_length": round(length, 1), "ep_lengths": lengths,
                     "env_steps_per_s": round(speed)})
    if not rows:
        raise SystemExit(f"no runs under {runs}: run `python -m constrained_grpo.eval.studies.parity run ...` first")
    diffs = differences(curves)
    for name, table_rows in (("parity.csv", rows), ("difference.csv", diffs)):
        if not table_rows:
            (out / name).unlink(missing_ok=True)  # a stale comparison must not outlive its runs
        else:
            with open(out / name, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(table_rows[0]))
                w.writeheader()
                w.writerows(table_rows)
    lines = ["| side | algorithm | seeds | env steps | final return (95% CI) | final cost (95% CI) "
             "| final episode length, per seed | env-steps/s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one_seed = f"n={r['seeds']}: no CI"
        lines.append(f"| {r['side']} | {r['algo']} | {r['seeds']} | {r['env_steps']} "
                     f"| {_cell(r['return'], r['return_ci95'], one_seed)} | {_cell(r['cost'], r['cost_ci95'], one_seed)} "
                     f"| {r['ep_lengths']} | {r['env_steps_per_s']} |")
    lines += ["", f"Final = mean of the last {WINDOW} training episodes at the end of the run (OmniSafe's "
              "Metrics/EpRet, Metrics/EpCost); CI: Student t over seeds."]
    if diffs:
        lines += ["", "Ours - OmniSafe (95% Welch interval over the independent seeds of the two sides; "
                  "'not separated': the interval covers 0):", "",
                  "| env steps | return difference | return | cost difference | cost |", "|---|---|---|---|---|"]
        lines += [f"| {d['env_steps']} | {_cell(d['return_diff'], d['return_diff_ci95'])} | {d['return_verdict']} "
                  f"| {_cell(d['cost_diff'], d['cost_diff_ci95'])} | {d['cost_verdict']} |" for d in diffs]
    lines += ["", "Commands:", "",
              *[f"    {c}" for c in commands],
              f"    python -m constrained_grpo.eval.studies.parity table --runs {runs} --out {out}"]
    (out / "parity.md").write_text("\n".join(lines) + "\n")
    _plot(curves, out / "curves.png")
    print("\n".join(lines))


def _plot(curves: dict[str, list[list[dict[str, float]]]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    from constrained_grpo.eval.scoring.plots import env_steps_axis, outside_legend  # noqa: PLC0415

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    for side, color in zip(SIDES, ("tab:blue", "tab:orange")):
        for i, curve in enumerate(curves.get(side, [])):
            x = [r["env_steps"] for r in curve]
            for ax, key in zip(axes, ("ep_return", "ep_cost")):
                ax.plot(x, [r[key] for r in curve], color=color, alpha=0.8, marker="o", ms=3, label=side if i == 0 else None)
    for ax, title in zip(axes, ("episode return", "episode cost")):
        env_steps_axis(ax)
        ax.set_title(f"{title} (last {WINDOW} episodes)")
    outside_legend(fig)
    fig.savefig(path, dpi=120, metadata={"Software": None})  # no version string: deterministic bytes
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "omnisafe-worker":
        task, steps, seed, spe, out = argv[1:6]
        omnisafe_worker(task, int(steps), int(seed), int(spe), Path(out))
        return
    parser = argparse.ArgumentParser(prog="python -m constrained_grpo.eval.studies.parity", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one seed of one side")
    r.add_argument("--side", choices=SIDES, required=True)
    r.add_argument("--task", default="SafetyHopperVelocity-v1")
    r.add_argument("--steps", type=int, required=True)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default="results/parity/runs")
    r.add_argument("--steps-per-epoch", type=int, default=20_000, help="OmniSafe's steps_per_epoch = our n_steps")
    r.add_argument("--eval-episodes", type=int, default=5, help="our side's final evaluation (not in the table)")
    r.add_argument("--parity-python", default=os.environ.get("PARITY_PYTHON", str(PARITY_PYTHON)))
    t = sub.add_parser("table", help="parity.csv, parity.md and curves.png from the runs")
    t.add_argument("--runs", default="results/parity/runs")
    t.add_argument("--out", default="results/parity")
    args = parser.parse_args(argv)
    if args.cmd == "run":
        if args.steps < args.steps_per_epoch:
            raise SystemExit(f"--steps {args.steps} < --steps-per-epoch {args.steps_per_epoch}: give at least one epoch")
        our_task(args.task)
        run(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
