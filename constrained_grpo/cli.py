"""The ``cgrpo`` command: tasks, algorithms, training, sweeps, leaderboard and plots.

::

    cgrpo envs                       every registered task with its constraints and limits
    cgrpo check ENV_ID               the constrained env checker on one task
    cgrpo algos                      every registered algorithm
    cgrpo train TASK ALGO [--seed N --steps N --out DIR --config.FIELD VALUE ...]
    cgrpo bench [--preset quick|standard|paper --tasks ... --algos ... --seeds N --steps N
                 --backend local|ray --workers N --out DIR --ray-address ADDR]
    cgrpo leaderboard DIR [--check FILE] [--add FILE ...] [--out DIR] [--algos A ... --tasks T ... --highlight A]
                          [--allow-modified-tasks]
    cgrpo leaderboard DIR --reevaluate RUNS --private-seed N --out DIR   maintainer: evaluate submitted agents
    cgrpo plot DIR [--out DIR] [--add FILE ...] [--algos A ... --tasks T ... --highlight A]
    cgrpo eval RUN_DIR [--episodes N]   re-evaluate a saved agent with the harness protocol
    cgrpo render RUN_DIR --out FILE.gif [--sampled --seed N]   replay one episode as a GIF

Every command takes ``--import MODULE`` (repeatable): the module is imported first, in this
process and in every run's worker, so the tasks and algorithms it registers can be named;
a task may also be given as ``MODULE:Task-v0`` (gymnasium's syntax).

``--config.FIELD VALUE`` (or ``--config.FIELD=VALUE``) sets an agent config field; the
value is parsed as JSON when it is JSON (``0.1``, ``true``, ``[1, 2]``) and kept as a
string otherwise. For ``bench``, ``--config.ALGO.FIELD VALUE`` sets it for one algorithm.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from constrained_grpo.registry import ResolvedConfig

__all__ = ["main", "parse_config_args"]


class CliError(Exception):
    """A user error: printed as one message, exit status 2."""


def parse_config_args(argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """Split ``--config.NAME VALUE`` / ``--config.NAME=VALUE`` out of ``argv``.

    Returns the remaining arguments and ``{NAME: value}`` (JSON-parsed when possible).

    >>> parse_config_args(["train", "--config.lr", "0.01", "--config.opt=adam", "--seed", "1"])
    (['train', '--seed', '1'], {'lr': 0.01, 'opt': 'adam'})
    """
    rest: list[str] = []
    config: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config."):
            name, eq, value = arg[len("--config."):].partition("=")
            if not eq:
                if i + 1 >= len(argv):
                    raise CliError(f"{arg} needs a value: {arg} VALUE or {arg}=VALUE")
                value = argv[i + 1]
                i += 1
            if not name or name.startswith(".") or name.endswith("."):
                raise CliError(f"malformed option {arg!r}; write --config.FIELD VALUE")
            config[name] = _config_value(arg, value)
        else:
            rest.append(arg)
        i += 1
    return rest, config


#: A value that starts like JSON (a number, list, object, quoted string) must be JSON.
_JSON_START = re.compile(r"\s*([\[{\"0-9]|[-+.][0-9.]|-?Infinity|NaN)")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _config_value(arg: str, value: str) -> Any:
    """``value`` parsed as JSON; a bare word (``adam``) is a string. JSON-looking text
    that does not parse, and NaN or infinity, are errors naming the option."""
    try:
        return json.loads(value, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        if not _JSON_START.match(value):
            return value
        why = str(err)
    except ValueError as err:  # NaN or Infinity
        why = str(err)
    raise CliError(f"{arg}: {value!r} is not a valid value ({why}); write e.g. 0.01, true, [64, 64], "
                   '{"size": 8} or a plain word')


def _whole(text: str) -> int:
    """A whole number written as ``20000``, ``20_000`` or ``2e4`` (SB3's ``total_timesteps=1e5``)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; write a whole number such as 20000 or 2e4") from None
    if not (math.isfinite(value) and value.is_integer() and abs(value) < 2**53):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; write one such as 20000 or 2e4")
    return int(value)


#: Seeds are stored as int64 (the long table, ``config.json``): a seed is in [0, 2^63).
SEED_LIMIT = 2**63
#: The most seeds one sweep expands (a range is held in memory as its seeds).
MAX_SEEDS = 100_000


def _seeds(text: str) -> int | tuple[int, ...]:
    """``--seeds``: a count ``N`` (seeds 0..N-1), a range ``A-B`` (A..B, both included) or a
    list ``A,B,C``; at most :data:`MAX_SEEDS` seeds, each below :data:`SEED_LIMIT`."""
    span = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
    if span:
        first, last = int(span[1]), int(span[2])
        if last < first:
            raise argparse.ArgumentTypeError(f"--seeds {text}: the range ends before it starts; write A-B with A <= B")
        if last >= SEED_LIMIT:
            raise argparse.ArgumentTypeError(f"--seeds {text}: seed {last} is beyond the largest, 2^63 - 1; give seeds below it")
        if last - first + 1 > MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"--seeds {text}: {last - first + 1:,} seeds, at most {MAX_SEEDS:,} in one "
                                             "sweep; give a smaller range")
        return tuple(range(first, last + 1))
    try:
        if "," not in text:
            return _whole(text)  # a count (>= 1, checked with the other numbers)
        seeds = tuple(_whole(part) for part in text.split(",") if part.strip())
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give a count (10), a range (100-109) or a list (0,3,7)") from None
    if not seeds or any(s < 0 or s >= SEED_LIMIT for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: seeds are distinct whole numbers >= 0, below 2^63")
    if len(seeds) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"--seeds: {len(seeds):,} seeds, at most {MAX_SEEDS:,} in one sweep")
    return seeds


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cgrpo",
        description="constrained-grpo: a Gymnasium benchmark suite for constrained RL.",
        epilog="Agent options: --config.FIELD VALUE (JSON if it parses, else a string); "
        "for bench also --config.ALGO.FIELD VALUE.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (your tasks and algorithms register on import); repeatable")

    e = sub.add_parser("envs", parents=[common], help="list the registered tasks with their constraints")
    e.add_argument("--family", default=None, help="only this task family (e.g. gridworld)")

    c = sub.add_parser("check", parents=[common], help="run the constrained env checker on a task")
    c.add_argument("env_id", metavar="ENV_ID")
    c.add_argument("--steps", type=_whole, default=300, help="random steps to check (default 300)")

    al = sub.add_parser("algos", parents=[common], help="list the registered algorithms; with NAME --task ID, its whole configuration")
    al.add_argument("name", nargs="?", metavar="NAME", help="show this algorithm's resolved configuration")
    al.add_argument("--task", metavar="ID", help="the task the configuration is resolved for (with NAME)")

    t = sub.add_parser("train", parents=[common], help="train and evaluate one run", epilog="Agent options: --config.FIELD VALUE.")
    t.add_argument("task", metavar="TASK")
    t.add_argument("algo", metavar="ALGO")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--steps", type=_whole, default=20_000, help="env-step budget (default 20000)")
    t.add_argument("--eval-episodes", type=_whole, default=None,
                   help="final-evaluation episodes per policy (default: the task family's plan from its limits)")
    t.add_argument("--out", type=Path, default=Path("runs"), help="results root (default runs/)")
    t.add_argument("--force", action="store_true", help="rerun even if the run is complete")
    t.add_argument("--no-save", action="store_true", help="do not save the agent")
    t.add_argument("--quiet", action="store_true", help="no per-iteration progress lines")
    _monitor_options(t)

    from constrained_grpo.eval.presets import PRESETS

    b = sub.add_parser("bench", parents=[common], help="sweep tasks x algorithms x seeds",
                       epilog="Presets: " + "; ".join(f"{n}: {pr.description}" for n, pr in PRESETS.items()))
    b.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    b.add_argument("--tasks", nargs="+", default=None, help="replace the preset's tasks")
    b.add_argument("--algos", nargs="+", default=None, help="replace the preset's algorithms")
    b.add_argument("--seeds", type=_seeds, default=None,
                   help="a count N (seeds 0..N-1), a range A-B (held-out seeds, e.g. 100-109) or a list A,B,C")
    b.add_argument("--steps", type=_whole, default=None, help="env-step budget of every run")
    b.add_argument("--eval-episodes", type=_whole, default=None,
                   help="final-evaluation episodes per policy (default: the preset's, else each task family's plan)")
    b.add_argument("--backend", choices=["local", "ray"], default="local")
    b.add_argument("--workers", type=int, default=None, help="parallel runs (default: CPU count, or the Ray cluster's)")
    b.add_argument("--ray-address", default=None, help="address of a running Ray cluster (default: start a local one)")
    b.add_argument("--out", type=Path, default=None, help="results root (default runs/<preset>)")
    b.add_argument("--retries", type=int, default=1, help="retries of a crashed run (default 1)")
    b.add_argument("--no-save", action="store_true", help="do not save the agents")
    b.add_argument("--no-progress", action="store_true", help="no progress bars")
    b.add_argument("--force", action="store_true", help="redo completed runs recorded with other settings")
    b.add_argument("--yes", action="store_true",
                   help=f"start a sweep far larger than its preset (over {LARGE_SWEEP_RUNS} runs and more than the preset's own)")
    b.add_argument("--skip-recorded", type=Path, action="append", default=[], metavar="DIR",
                   help="skip the runs a compact record holds with this very configuration (a sweep in parts)")
    _monitor_options(b)

    lb = sub.add_parser("leaderboard", parents=[common], help="rank the results in DIR; or validate a submission")
    lb.add_argument("dir", metavar="DIR", type=Path, help="results root, or a long-table CSV")
    lb.add_argument("--check", type=Path, default=None, metavar="FILE", help="only validate a submission CSV")
    lb.add_argument("--add", type=Path, nargs="+", default=[], metavar="FILE", help="submissions to rank too")
    lb.add_argument("--out", type=Path, default=None, help="output folder (default DIR)")
    lb.add_argument("--tol", type=float, default=None, help="feasibility tolerance on normalised violation (default 0.1)")
    lb.add_argument("--allow-incomplete", action="store_true", help="rank the complete runs, list the others")
    lb.add_argument("--reevaluate", type=Path, nargs="+", default=[], metavar="RUNS",
                    help="maintainer: evaluate the saved agents of the run folders under RUNS (cgrpo train's) from the "
                    "private first seed, write them under OUT/reevaluated and rank them (user code only under --import)")
    lb.add_argument("--reevaluate-as", default=None, metavar="NAME",
                    help="rank the re-evaluated runs (of one algorithm) under NAME, e.g. an algorithm the board holds")
    lb.add_argument("--private-seed", default=None, metavar="N",
                    help="the private first reset seed of --reevaluate (default $CGRPO_PRIVATE_SEED; keep it private)")
    lb.add_argument("--allow-modified-tasks", action="store_true",
                    help="rank runs whose task settings (limits, R*, plan) differ from the registered task's; the page says so")
    lb.add_argument("--table", action="store_true",
                    help="also write OUT/results.csv, the long table with every iteration and evaluation episode "
                         "(of a compact record: OUT/train.csv and OUT/evals.csv, its train rows and evaluation summaries)")
    lb.add_argument("--quiet", action="store_true", help="do not print the Markdown")
    lb.add_argument("--explain", action="store_true",
                    help="end with one plain sentence per algorithm and task (limits kept, return against R*)")
    _focus_options(lb, "print only")


    pl = sub.add_parser("plot", parents=[common], help="draw learning curves, multipliers, return vs violation")
    pl.add_argument("dir", metavar="DIR", type=Path, help="results root, or a long-table CSV")
    pl.add_argument("--out", type=Path, default=None, help="output folder (default DIR/plots)")
    pl.add_argument("--allow-incomplete", action="store_true")
    pl.add_argument("--add", type=Path, nargs="+", default=[], metavar="FILE",
                    help="submission CSVs to draw beside the results (checked as leaderboard --add checks them)")
    _focus_options(pl, "draw only")

    ev = sub.add_parser("eval", parents=[common], help="re-evaluate a saved agent with the harness protocol")
    ev.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="OUT/<task>/<algo>/seed_<n> of a completed run")
    ev.add_argument("--episodes", type=_whole, default=None, help="episodes per policy (default: the run's)")

    rd = sub.add_parser("render", parents=[common], help="replay one episode of a saved agent as a GIF")
    rd.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="OUT/<task>/<algo>/seed_<n> of a completed run")
    rd.add_argument("--out", type=Path, required=True, metavar="FILE", help="the GIF to write")
    rd.add_argument("--sampled", action="store_true", help="sample the actions (default: the greedy policy)")
    rd.add_argument("--seed", type=int, default=None, help="reset seed (default: the first evaluation seed)")
    rd.add_argument("--max-steps", type=_whole, default=500)
    return p


def _focus_options(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument("--algos", nargs="+", default=None, metavar="ALGO",
                   help=f"{verb} these algorithms (ranks stay the whole board's)")
    p.add_argument("--tasks", nargs="+", default=None, metavar="TASK", help=f"{verb} these tasks")
    p.add_argument("--highlight", default=None, metavar="ALGO",
                   help="single this algorithm out: on top in a reserved colour, the others muted (marked in tables)")


def _monitor_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                   help="write TensorBoard scalars (return, costs, limits, lambdas, losses, KL, steps/s; at the "
                   "end the evaluation's eval/return, eval/cost/NAME, eval/feasible, ...) under DIR (extra [tb])")
    p.add_argument("--wandb", default=None, metavar="PROJECT", help="log the same scalars to this W&B project (needs wandb)")


# ------------------------------------------------------------------------------ validation


def _writable_dir(path: Path, option: str) -> None:
    """Prove that ``path`` is, or can be made, a folder to write in, before any work and
    without creating it: a temporary file in the folder, or in its nearest existing parent."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "not a folder", str(existing))
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise CliError(f"{option} {path} is not a writable folder ({err.strerror or err}); choose another one") from None


def _check_ray_address(address: str, timeout_s: float = 3.0) -> None:
    """A Ray cluster's ``HOST:PORT`` (or ``ray://HOST:PORT``) that answers a TCP connection
    within ``timeout_s``, or a one-line error: Ray itself retries an unreachable address for
    minutes."""
    import socket

    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CliError(f"--ray-address {address}: give the cluster's HOST:PORT (e.g. 10.0.0.5:6379), 'auto', or leave it "
                       "out to start a local cluster")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise CliError(f"--ray-address {address}: nothing answers at {host}:{port} ({err.strerror or err}); start the "
                       "cluster (`ray start --head`) or leave --ray-address out to start a local one") from None


def _resolve(algo: str, task: str, config: dict[str, Any]) -> "ResolvedConfig":
    """The run's whole configuration (``registry.resolve``), or a one-line error
    naming the option, before any folder is made or any run starts."""
    from constrained_grpo.registry import resolve

    try:
        resolved = resolve(algo, task, **config)
    except (ValueError, TypeError) as err:
        raise CliError(f"--config for {algo} on {task}: {err}") from None
    if config.get("env_kwargs") or config.get("limits") is not None:
        from constrained_grpo.eval.runner import RunSpec, run_meta

        try:  # the task as the run will build it: a bad keyword or limit fails here, not in the run
            run_meta(RunSpec(task, algo, 0, 1, 1, config, False))
        except (ValueError, TypeError, KeyError) as err:
            raise CliError(f"--config.env_kwargs / --config.limits for {task}: {err}") from None
    return resolved


def _check_args(args: argparse.Namespace) -> None:
    """Bad numbers and paths as one-line errors naming the option, before anything runs."""
    def at_least(option: str, value: int | None, low: int) -> None:
        if value is not None and value < low:
            raise CliError(f"{option} must be >= {low}, got {value}")

    def below(option: str, value: int | None, high: int, what: str) -> None:
        if value is not None and value >= high:
            raise CliError(f"{option} {value} is beyond {what}; give a smaller one")

    if args.command == "check":
        at_least("--steps", args.steps, 1)
    if args.command == "train":
        at_least("--seed", args.seed, 0)
        below("--seed", args.seed, SEED_LIMIT, "the largest seed, 2^63 - 1 (seeds are stored as int64)")
        at_least("--steps", args.steps, 1)
        at_least("--eval-episodes", args.eval_episodes, 1)
        _writable_dir(args.out, "--out")
    if args.command == "bench":
        if isinstance(args.seeds, int):  # a list or a range was checked as it was parsed
            at_least("--seeds", args.seeds, 1)
            below("--seeds", args.seeds, MAX_SEEDS + 1, f"the most seeds of one sweep, {MAX_SEEDS:,}")
        if args.backend == "ray" and args.ray_address not in (None, "auto", "local"):
            _check_ray_address(args.ray_address)
        at_least("--steps", args.steps, 1)
        at_least("--eval-episodes", args.eval_episodes, 1)
        at_least("--workers", args.workers, 1)
        at_least("--retries", args.retries, 0)
        from constrained_grpo.eval.scoring.record import MANIFEST, is_record

        for folder in args.skip_recorded:
            if not is_record(folder):
                raise CliError(f"--skip-recorded {folder} holds no compact record ({MANIFEST}); give a folder packed "
                               "by `python -m constrained_grpo.eval.scoring.record pack`")
        if args.out is not None:
            _writable_dir(args.out, "--out")
    if args.command == "leaderboard" and args.tol is not None and not (math.isfinite(args.tol) and args.tol >= 0):
        raise CliError(f"--tol must be a finite number >= 0 (a tolerance on (J - d)/d), got {args.tol}")
    if args.command in ("leaderboard", "plot"):
        for option, files in (("--check", [args.check] if getattr(args, "check", None) is not None else []),
                              ("--add", args.add)):
            for file in files:
                if file.is_dir():
                    raise CliError(f"{option} {file} is a folder; give the submission's CSV file (a results folder's is "
                                   f"written by `cgrpo leaderboard {file} --table`: {file / 'results.csv'})")
                if not file.is_file():
                    raise CliError(f"{option} {file} does not exist; give the submission's CSV file")
        if args.out is not None and getattr(args, "check", None) is None:
            _writable_dir(args.out, "--out")
        for folder in getattr(args, "reevaluate", None) or []:
            if not folder.is_dir():
                raise CliError(f"--reevaluate {folder} is not a folder; give the folder holding the submitted run folders")
        if getattr(args, "reevaluate_as", None) is not None and not getattr(args, "reevaluate", None):
            raise CliError("--reevaluate-as names the runs of --reevaluate; give --reevaluate RUNS too")
        if getattr(args, "reevaluate", None):
            if args.check is not None:
                raise CliError("--reevaluate ranks the re-evaluated runs; leave out --check")
            if args.out is None or args.out.resolve() == (args.dir.parent if args.dir.is_file() else args.dir).resolve():
                raise CliError("--reevaluate writes the re-evaluated runs under OUT/reevaluated, which must not be "
                               "among the board's runs: give --out OUT, another folder than DIR")
            from constrained_grpo.eval.maintainer import MaintainerError, private_first_seed

            try:
                private_first_seed(args.private_seed)
            except MaintainerError as err:
                raise CliError(f"--reevaluate: {err}") from None
    if args.command in ("eval", "render"):
        at_least("--episodes", getattr(args, "episodes", None), 1)
        at_least("--max-steps", getattr(args, "max_steps", None), 1)
        if not (args.run_dir / "config.json").is_file():
            from constrained_grpo.eval.replay import not_a_run_dir

            raise CliError(not_a_run_dir(args.run_dir))
    if args.command == "render":
        if args.out.suffix.lower() != ".gif":
            raise CliError(f"--out {args.out}: give a file name ending in .gif")
        _writable_dir(args.out.parent, "--out's folder")


def _trusted_modules(args: argparse.Namespace) -> set[str]:
    """The modules the user named to import (``--import`` and ``$CGRPO_IMPORT``): the only
    code a run directory's recorded names may bring in."""
    from constrained_grpo.tasks import IMPORT_ENV

    return {*args.imports, *(m for m in os.environ.get(IMPORT_ENV, "").split(",") if m)}


def _current_folder_on_path() -> None:
    """Let ``--import mymodule`` (and ``mymodule:Task-v0``, ``mymodule:Factory``) find
    ``./mymodule.py`` as ``python -m`` does: the current folder on ``sys.path``, last, so that
    it shadows no installed package, and on ``PYTHONPATH`` for the runs' worker processes."""
    here = os.getcwd()
    if "" in sys.path or here in sys.path:
        return
    sys.path.append(here)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), here) if p)


def _user_code(args: argparse.Namespace) -> None:
    """Import ``--import`` modules and the modules of ``MODULE:Task-v0`` task ids (which become
    plain ids), and start the requested metric sinks' packages, before any work."""
    from constrained_grpo.tasks import IMPORT_ENV, import_user_modules, split_task_id

    named = [getattr(args, "task", None), getattr(args, "algo", None), getattr(args, "env_id", None),
             *(getattr(args, "algos", None) or []), *(getattr(args, "tasks", None) or [])]
    if args.imports or os.environ.get(IMPORT_ENV) or any(isinstance(n, str) and ":" in n for n in named):
        _current_folder_on_path()  # only where user code is named
    modules = list(args.imports)

    def plain(task: str | None) -> str | None:
        if task is None:
            return None
        module, name = split_task_id(task)
        if module is not None:
            modules.append(module)
        return name

    if args.command == "train":
        args.task = plain(args.task)
    elif args.command == "check":
        args.env_id = plain(args.env_id)
    elif args.command == "algos":
        args.task = plain(args.task)
    elif args.command == "bench" and args.tasks is not None:
        args.tasks = [plain(t) for t in args.tasks]
    try:
        import_user_modules(modules)
    except ImportError as err:
        raise CliError(str(err)) from None
    import gymnasium as gym

    from constrained_grpo.tasks import check_task_id

    for task in (getattr(args, "task", None), getattr(args, "env_id", None)):
        if task is not None:
            try:
                check_task_id(task)
            except gym.error.Error as err:
                raise CliError(str(err)) from None
    if getattr(args, "tensorboard", None) is not None:
        try:
            import torch.utils.tensorboard  # noqa: F401
        except ImportError as err:
            raise CliError(f"--tensorboard needs the tensorboard package ({err}); pip install 'constrained-grpo[tb]'") from None
        _writable_dir(args.tensorboard, "--tensorboard")
        from constrained_grpo.eval.monitor import TENSORBOARD_ENV

        os.environ[TENSORBOARD_ENV] = str(args.tensorboard.resolve())  # sweep workers inherit it
    if getattr(args, "wandb", None) is not None:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise CliError("--wandb needs the wandb package: pip install wandb (and wandb login)") from None
        from constrained_grpo.eval.monitor import WANDB_ENV

        os.environ[WANDB_ENV] = args.wandb


# ---------------------------------------------------------------------------------- commands


def _unavailable_fix(err: Exception, task: str) -> str:
    """Why a task's envs cannot be made here, and the fix: its family's pip extra
    (``Family.extra``); the bridge's message carries its own."""
    from constrained_grpo.tasks import task_info

    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "fix" in text.lower():
        return text
    if isinstance(err, ImportError):
        extra = task_info(task).family.extra
        fix = f"pip install 'constrained-grpo[{extra}]'" if extra else "install the missing package"
        return f"{text}. To fix: {fix}"
    return f"{type(err).__name__}: {text}"


def _cmd_envs(args: argparse.Namespace) -> int:
    from constrained_grpo.constraints import get_constraints
    from constrained_grpo.envs import list_tasks
    from constrained_grpo.tasks import known_task_ids, make_env, task_info

    suite = set(list_tasks())

    def family(task: str) -> str:
        return task_info(task).family.name

    tasks = [t for t in known_task_ids() if args.family is None or family(t) == args.family]
    if not tasks:
        families = sorted({family(t) for t in known_task_ids()})
        raise CliError(f"no task in family {args.family!r}; families: {families}")
    broken: dict[str, str] = {}  # family -> why its envs cannot be made here
    for task in tasks:
        fam = family(task)
        description = task_info(task).description or gym_spec_entry(task)
        if fam in broken:
            print(f"{task}  [{fam}]  {description}\n    UNAVAILABLE here (see above)")
            continue
        try:
            env = make_env(task)
            try:
                constraints = get_constraints(env)
            finally:
                env.close()
        except Exception as err:  # one family that cannot start must not hide the others
            broken[fam] = _unavailable_fix(err, task)
            print(f"{task}  [{fam}]  {description}\n    UNAVAILABLE here: {broken[fam]}")
            continue
        print(f"{task}  [{fam}]  {description}")
        for c in constraints:
            kind = "indicator, limit is a probability" if c.indicator else "cumulative"
            print(f"    {c.name:<10} <= {c.limit:<8g} ({kind}) {c.description}")
    for fam, why in broken.items():
        print(f"warning: the {fam} tasks cannot be made here: {why}", file=sys.stderr)
    return 0


def gym_spec_entry(task: str) -> str:
    """A user task's one-line summary: its entry point."""
    import gymnasium as gym

    entry = gym.spec(task).entry_point
    return f"user task ({entry if isinstance(entry, str) else getattr(entry, '__qualname__', entry)})"


def _cmd_check(args: argparse.Namespace) -> int:
    from constrained_grpo import check_constrained_env
    from constrained_grpo.tasks import make_env

    env = make_env(args.env_id)
    try:
        report = check_constrained_env(env, num_steps=args.steps)
    finally:
        env.close()
    print(f"{args.env_id}: OK (gymnasium check_env and the cost contract)")
    for key, value in report.items():
        print(f"    {key}: {value}")
    return 0


def _cmd_algos(args: argparse.Namespace) -> int:
    from constrained_grpo.registry import agent_spec, list_agents

    if args.name is not None:
        agent_spec(args.name)
        if args.task is None:
            raise CliError(f"cgrpo algos {args.name} needs --task ID: the configuration depends on the task's family")
        print(json.dumps(_resolve(args.name, args.task, {}).to_dict(), indent=2, sort_keys=True))
        return 0
    names = list_agents(aliases=False)  # deployment is an option of a run (deploy=...), not an algorithm
    if not names:
        print("no algorithm is registered (constrained_grpo.agents and constrained_grpo.baselines register theirs on import)")
        return 0
    width = max(len(n) for n in names)
    for name in names:
        spec = agent_spec(name)
        kind = "reference" if spec.reference else "constrained" if spec.constrained else "unconstrained"
        print(f"{name:<{width}}  {kind:<13}  {spec.description}")
    aliases = [a for a in list_agents() if agent_spec(a).alias_of is not None]
    if aliases:
        print("aliases (a learning algorithm with a deployment rule, --config.deploy): " + ", ".join(
            f"{a} = {agent_spec(a).alias_of} deploy={agent_spec(a).defaults.get('deploy')}" for a in aliases))
    return 0


class _ProgressLines:
    """One console line per training iteration (at most one per ``every_s`` seconds, the
    first always): iteration, env steps, return, each cost against its limit, each lambda,
    steps/s over the run so far, and ETA = (budget - steps) / (steps/s)."""

    def __init__(self, budget: int, limits: dict[str, float], every_s: float = 1.0, file: Any = None) -> None:
        self.budget, self.limits, self.every_s = budget, limits, every_s
        self.file = sys.stderr if file is None else file
        self._last: float | None = None

    def __call__(self, run_path: Path, row: dict[str, Any]) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.every_s:
            return
        self._last = now
        print(format_progress(row, self.budget, self.limits), file=self.file, flush=True)


def format_progress(row: dict[str, Any], budget: int, limits: dict[str, float]) -> str:
    """The console line of one progress row.

    >>> format_progress({"iteration": 3, "env_steps": 500, "wall_s": 2.0, "return": 1.25, "cost_fuel": 13.0,
    ...                  "lambda_fuel": 0.5}, 1000, {"fuel": 12.0})
    'it 3  steps 500/1,000 (50%)  return 1.25  fuel 13/12 (over)  lambda fuel 0.5  250 steps/s  ETA 2 s'
    """
    steps = int(row.get("env_steps", 0))
    parts = [f"it {int(row.get('iteration', 0))}", f"steps {steps:,}/{budget:,} ({min(steps / budget, 1):.0%})"]
    if row.get("return") is not None:
        parts.append(f"return {float(row['return']):.4g}")
    costs = [f"{n} {float(row[f'cost_{n}']):.4g}/{d:g}{' (over)' if float(row[f'cost_{n}']) > d else ''}"
             for n, d in limits.items() if row.get(f"cost_{n}") is not None]
    if costs:
        parts.append("  ".join(costs))
    lams = [f"{n} {float(row[f'lambda_{n}']):.3g}" for n in limits if row.get(f"lambda_{n}") is not None]
    if lams:
        parts.append("lambda " + " ".join(lams))
    wall = float(row.get("wall_s") or 0.0)
    if wall > 0 and steps > 0:
        rate = steps / wall
        parts.append(f"{rate:,.0f} steps/s")
        from constrained_grpo.eval.eval_progress import format_duration  # the evaluation lines' format too

        parts.append(f"ETA {format_duration(max(budget - steps, 0) / rate)}")
    return "  ".join(parts)


def _check_acts_on(name: str, spec: Any, task: str) -> None:
    """A text task with a registered algorithm that acts on vectors: one line naming the ones
    that can (a dotted path's agent says what it acts on by what it does)."""
    from constrained_grpo.registry import agent_spec, list_agents
    from constrained_grpo.tasks import task_info

    if ":" in name:
        return
    try:
        family = task_info(task).family
    except Exception:  # an unknown task: _resolve names it
        return
    if family.text and not spec.acts_on_text:
        capable = [a for a in list_agents() if agent_spec(a).acts_on_text and not agent_spec(a).reference]
        raise CliError(f"{name} cannot train on {task}: the {family.name} tasks take and give text, and {name}'s policy "
                       f"acts on vectors; use one that trains a language model: {', '.join(capable)} (see `cgrpo algos`)")


def _cmd_train(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from constrained_grpo.eval import storage
    from constrained_grpo.eval.runner import RunSpec, recorded_config, check_run_eval_size, execute_run, run_meta, task_meta
    from constrained_grpo.eval.scoring.verdict import EvalSizeError
    from constrained_grpo.registry import agent_spec

    algo = agent_spec(args.algo)  # unknown algorithm: a clear error before anything is written
    _check_acts_on(args.algo, algo, args.task)
    resolved = _resolve(args.algo, args.task, config)  # misspelled or mistyped options too
    spec = RunSpec(args.task, args.algo, args.seed, args.steps, args.eval_episodes, config, not args.no_save)
    meta = run_meta(spec, task_meta(args.task))  # the limits (and optimum) the run trains with
    try:
        check_run_eval_size(spec, meta, "--eval-episodes")
    except EvalSizeError as err:
        raise CliError(str(err)) from None
    path = spec.run_dir(args.out)
    if storage.is_complete(path):
        differs = spec.difference(recorded_config(path))
        if not args.force:
            if differs is not None:
                raise CliError(f"{path} holds a completed run with {differs}; pass --force to replace it, or use another --out")
            print(f"{path} is complete already; pass --force to rerun it")
            return 0
        with storage.run_lock(path):
            (path / storage.DONE_FILE).unlink()
    remove = storage.add_record_hook(_ProgressLines(spec.steps, meta.limits)) if not args.quiet else None
    try:
        stage = None if args.quiet else (lambda line: print(f"[cgrpo train] {line}", file=sys.stderr, flush=True))
        outcome = execute_run(spec, args.out, meta=meta, on_stage=stage, resolved=resolved)
    finally:
        if remove is not None:
            remove()
    if outcome.status != "done":
        print(f"run {spec.key} {outcome.status}:\n{outcome.error}", file=sys.stderr)
        return 1
    from constrained_grpo.eval.scoring.loader import load_run
    from constrained_grpo.eval.scoring.metrics import run_metrics

    table, meta = load_run(path, known_algos=None)  # the task as config.json records it
    m = run_metrics(table, {meta.task: meta}).iloc[0]
    print(f"{spec.key}: done in {outcome.wall_s:.1f} s -> {path}")
    print_summary(m, meta)
    return 0


def print_summary(m: Any, meta: Any) -> None:
    """The verdict of one run's metrics row ``m`` (``eval.metrics.run_metrics``) for task ``meta``."""
    first = m["eval_first_seed"]
    # NaN first seed: an agent without act() evaluated itself (protocol owner "agent").
    where = f"from reset seeds {int(first)}+i" if first == first else "from the agent's own evaluate()"
    from constrained_grpo.eval.scoring.leaderboard import DEFAULT_TOL as tol  # run_metrics' default too

    verdict = {"feasible": "FEASIBLE", "violates": "INFEASIBLE", "undetermined": "TOO CLOSE TO CALL"}[m["feasibility"]]
    print(f"  final policy, {int(m['eval_episodes'])} episodes {where}, "
          f"{m['primary_policy']} actions: {verdict} (one-sided 95% bounds of each cost against d(1 + {tol:g}))")
    line = f"  return {m['eval_return']:.4f}"
    if meta.optimum_return is not None:
        line += f" (optimum R* {meta.optimum_return:.4f} for these limits, normalised {m['eval_return_norm']:.3f})"
    print(line)
    for c in meta.constraints:
        v, verdict_k = m[f"violation_{c.name}"], m[f"verdict_{c.name}"]
        point = "at or under it" if v <= 0 else f"over by {v:.1%}"
        ok = {"within": "kept", "over": "VIOLATED", "undetermined": "too close to call"}[verdict_k]
        lower, upper = m[f"eval_cost_lo_{c.name}"], m[f"eval_cost_hi_{c.name}"]
        print(f"  {c.name}: cost {m[f'eval_cost_{c.name}']:.4f} in [{lower:.4f}, {upper:.4f}] vs limit {c.limit:g} "
              f"({point}; {ok}); {m[f'within_{c.name}']:.0%} of episodes within")
    greedy = {"feasible": "feasible", "violates": "infeasible", "undetermined": "too close to call"}.get(
        m.get("greedy_feasibility", ""), "not evaluated")
    tail = "feasible" if m["tail_feasible"] else "infeasible"
    print(f"  greedy policy: return {m['greedy_return']:.4f}, {greedy}; average iterate (last 20% of training): "
          f"return {m['final_return']:.4f}, {tail}")


def _split_bench_config(config: dict[str, Any], algos: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{FIELD: v}`` applies to every algorithm; ``{ALGO.FIELD: v}`` to one."""
    per: dict[str, dict[str, Any]] = {a: {} for a in algos}
    for name, value in config.items():
        algo, dot, field = name.rpartition(".")
        if not dot:
            for a in algos:
                per[a][field] = value
        elif algo in per:
            per[algo][field] = value
        else:
            raise CliError(f"--config.{name}: {algo!r} is not one of this sweep's algorithms {list(algos)}")
    return per


#: A sweep of more runs than this, and than its preset's own, asks for ``--yes`` before it starts.
LARGE_SWEEP_RUNS = 200


def _large_sweep(args: argparse.Namespace, runs: int, usual: int, steps: int) -> str | None:
    """The one-line refusal of a sweep far larger than usual (``runs`` > :data:`LARGE_SWEEP_RUNS`
    and > ``usual``, the preset's own count) without ``--yes``, naming the seed syntax; else None.

    >>> import argparse
    >>> _large_sweep(argparse.Namespace(yes=False, seeds=400, preset="quick"), 1200, 9, 24_000_000)
    "this sweep plans 1,200 runs (24,000,000 env steps), far more than the quick preset's 9: pass --yes to start it. --seeds 400 means 400 seeds (0-399); for seed 400 alone write --seeds 400-400"
    """
    if args.yes or runs <= max(LARGE_SWEEP_RUNS, usual):
        return None
    line = (f"this sweep plans {runs:,} runs ({steps:,} env steps), far more than the {args.preset} preset's {usual:,}: "
            "pass --yes to start it.")
    if isinstance(args.seeds, int):
        line += (f" --seeds {args.seeds} means {args.seeds} seeds (0-{args.seeds - 1}); for seed {args.seeds} alone "
                 f"write --seeds {args.seeds}-{args.seeds}")
    else:
        line += " --seeds N means N seeds (0..N-1), A-B the seeds A to B, A,B,C a list"
    return line


def _cmd_bench(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from dataclasses import replace

    from constrained_grpo.eval.presets import resolve
    from constrained_grpo.eval.sweep import run_sweep
    from constrained_grpo.options import merge_options

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        preset = resolve(args.preset, tasks=args.tasks, algos=args.algos, seeds=args.seeds,
                         steps=args.steps, eval_episodes=args.eval_episodes)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    per_algo = _split_bench_config(config, preset.algos)
    merged = {a: merge_options(preset.config.get(a, {}), per_algo[a]) for a in preset.algos}
    preset = replace(preset, config=merged)
    specs = preset.runs(save_agent=not args.no_save)
    checked: set[str] = set()
    for spec in specs:  # configuration errors are the user's to fix, never a run to retry
        key = json.dumps([spec.algo, spec.task, spec.config], sort_keys=True)
        if key not in checked:
            checked.add(key)
            _resolve(spec.algo, spec.task, dict(spec.config))
    if args.skip_recorded:
        from constrained_grpo.eval.sweep import without_recorded

        specs, recorded = without_recorded(specs, args.skip_recorded)
        print(f"[bench] {len(recorded)} run(s) held with this configuration by {', '.join(map(str, args.skip_recorded))}; "
              "skipping them", file=sys.stderr)
    usual = len(resolve(args.preset).runs(save_agent=False))
    refusal = _large_sweep(args, len(specs), usual, sum(int(s.steps) for s in specs))
    if refusal is not None:
        raise CliError(refusal)
    out = args.out if args.out is not None else Path("runs") / preset.name
    print(f"[bench] preset {preset.name}: {len(specs)} runs, backend {args.backend} -> {out}\n"
          + "\n".join(f"  {line}" for line in preset.summary().splitlines()), file=sys.stderr)
    report = run_sweep(specs, out, backend=args.backend, workers=args.workers, retries=args.retries,
                       ray_address=args.ray_address, progress=False if args.no_progress else None,
                       force=args.force)
    print(report.summary())
    if report.ok:
        print(f"next: cgrpo leaderboard {out}")
    return 0 if report.ok else 1


def _load(path: Path, allow_incomplete: bool, modified: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any], Any]:
    """``(table, tasks, summaries)``: a long table (a CSV file or the runs under a folder),
    and its evaluation summaries when it holds only train rows (a compact record), else None.
    ``modified``: where given, runs on other task settings are allowed and listed in it."""
    from constrained_grpo.eval.scoring.loader import load_results, read_table_csv, validate_table

    if path.is_file():
        return (*validate_table(read_table_csv(path), source=str(path)), None)
    results = load_results(path, allow_incomplete=allow_incomplete, allow_modified_tasks=modified is not None)
    if modified is not None:
        modified.update(results.modified)
    if results.incomplete:
        print(f"warning: left out {len(results.incomplete)} incomplete run(s): "
              + ", ".join(str(p) for p in results.incomplete), file=sys.stderr)
    return results.table, results.tasks, results.summaries


def _algo_properties(path: Path) -> dict[str, dict[str, Any]]:
    """Per algorithm of the runs under ``path``: what its runs record about its multipliers."""
    from constrained_grpo.eval.scoring.loader import algo_properties

    return {} if path.is_file() else algo_properties(path)


def _deployments(path: Path) -> dict[tuple[str, str, int], tuple[str, str]]:
    """Per run under ``path`` (a compact record or run folders), the learner it trained and the
    rule it deploys (``loader.run_deployment`` of its ``config.json``); none for a CSV long table,
    which records no config: every algorithm is then its own learner, on its last iterate."""
    from constrained_grpo.eval.scoring.loader import run_configs, run_deployment

    return {} if path.is_file() else {key: run_deployment(cfg) for key, cfg in run_configs(path).items()}


def _remove_stale_tables(out: Path, written: Sequence[Path], source: Path) -> None:
    """The long tables an earlier ``--table`` wrote beside a board (``results.csv``, or a
    record's ``train.csv`` and ``evals.csv``) that this build did not write: they would
    describe other runs than the board beside them. Never the input itself."""
    for name in ("results.csv", "train.csv", "evals.csv"):
        path = out / name
        if path in written or not path.is_file() or path.resolve() == source.resolve():
            continue
        path.unlink()


def _with_submissions(files: Sequence[Path], table: Any, tasks: dict[str, Any], evals: Any,
                      props: dict[str, dict[str, Any]]) -> tuple[Any, dict[str, Any], Any, set[str]]:
    """``table`` (and its ``evals``, a compact record's) with the submissions ``files`` joined,
    each checked by the rules of ``leaderboard --check``; and the submitted algorithms."""
    import pandas as pd

    from constrained_grpo.eval.scoring.leaderboard import check_submission
    from constrained_grpo.eval.scoring.loader import validate_table

    added: set[str] = set()
    for extra in files:
        sub, sub_tasks = check_submission(extra, tasks, table, [a for a, p in props.items() if p.get("reference")], evals)
        if evals is None:
            table, tasks = validate_table(pd.concat([table, sub], ignore_index=True), {**tasks, **sub_tasks}, source=str(extra))
        else:  # a compact record: its runs were validated when packed, the submission just now
            from constrained_grpo.eval.scoring.loader import join_summarised

            table, tasks, evals = join_summarised(table, tasks, evals, sub, sub_tasks)
        added |= set(sub["algo"])
    return table, tasks, evals, added


def _focus_names(args: argparse.Namespace, algos: set[str], tasks: set[str],
                 deployed: dict[str, tuple[str, str]] | None = None) -> None:
    """``--algos``, ``--tasks`` and ``--highlight`` name what the board holds (one line otherwise);
    ``deployed``: the algorithm names of runs deploying another rule, with their (learner, rule)."""
    from constrained_grpo.eval.scoring.focus import check_names

    try:
        check_names("--algos", args.algos, algos, deployed)
        check_names("--highlight", [args.highlight] if args.highlight is not None else None, algos, deployed)
        check_names("--tasks", args.tasks, tasks)
    except ValueError as err:
        raise CliError(str(err)) from None


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from constrained_grpo.eval.scoring.leaderboard import DEFAULT_TOL, build_leaderboard, check_submission, is_control, render_markdown, write_leaderboard
    from constrained_grpo.eval.scoring.loader import ResultsError

    if args.check is not None:
        tasks, existing, existing_evals = None, None, None
        references: list[str] = []
        if args.dir.exists():  # a results folder or a long table's CSV, as --add reads it
            try:
                existing, tasks, existing_evals = _load(args.dir, True)
                references = [a for a, p in _algo_properties(args.dir).items() if p.get("reference")]
            except ResultsError as err:
                tasks = None  # no usable runs: check against the registered tasks
                print(f"warning: {args.dir} gives no board to check against ({str(err).splitlines()[0]}); checked against the "
                      "registered tasks only", file=sys.stderr)
        try:
            # The rules of --add exactly: the clash with the results and the protocol included.
            table, _ = check_submission(args.check, tasks, existing, references, existing_evals)
        except ResultsError as err:
            reason = str(err).removeprefix(f"{args.check}: ")  # the path once, before the reason
            print(f"REJECTED {args.check}: {reason}")
            return 1
        runs = table.groupby(["task", "algo", "seed"]).ngroups
        print(f"OK {args.check}: {len(table)} rows, {runs} runs, tasks {sorted(table['task'].unique())}, "
              f"algorithms {sorted(table['algo'].unique())}")
        return 0

    modified: dict[str, Any] | None = {} if args.allow_modified_tasks else None
    table, tasks, evals = _load(args.dir, args.allow_incomplete, modified)
    props = _algo_properties(args.dir)
    maintainer: set[str] = set()
    for runs in args.reevaluate:  # the maintainer's evaluation of submitted agents, from the private seed
        import pandas as pd

        from constrained_grpo.eval.maintainer import MaintainerError, private_first_seed, reevaluate_submission
        from constrained_grpo.eval.scoring.loader import load_results, validate_table

        out_dir = args.out / "reevaluated"
        try:
            folders = reevaluate_submission(runs, out_dir, private_first_seed(args.private_seed), _trusted_modules(args),
                                            args.reevaluate_as)
        except MaintainerError as err:
            raise CliError(f"--reevaluate {runs}: {err}") from None
        fresh = load_results(out_dir).table
        names = {str(cfg_algo) for cfg_algo in fresh["algo"].unique()}
        taken = sorted(names & set(table["algo"]))
        if taken:
            raise CliError(f"--reevaluate {runs}: algorithm {taken[0]} is on the board already; rank it under another name "
                           "with --reevaluate-as NAME")
        if evals is None:
            table, tasks = validate_table(pd.concat([table, fresh], ignore_index=True), {**tasks}, source=str(out_dir))
        else:
            from constrained_grpo.eval.scoring.loader import join_summarised

            table, tasks, evals = join_summarised(table, tasks, evals, fresh, tasks)
        maintainer |= names
        print(f"re-evaluated {len(folders)} run(s) of {sorted(names)} into {out_dir}", file=sys.stderr)
    table, tasks, evals, added = _with_submissions(args.add, table, tasks, evals, props)
    # The board's runs only: a submitted or re-evaluated algorithm is its own learner, on its last iterate.
    deployments = _deployments(args.dir)
    lb = build_leaderboard(table, tasks, tol=DEFAULT_TOL if args.tol is None else args.tol, evals=evals,
                           lambda_in_reward_units={a: p["lambda_in_reward_units"] for a, p in props.items()},
                           lambda_max={a: p["lambda_max"] for a, p in props.items() if p["lambda_max"] is not None},
                           references=[a for a, p in props.items() if p.get("reference")], unpaired=maintainer,
                           deployments=deployments)
    shown = lb.runs[lb.runs["deploy"] == "last"]  # what the tables' rows name: learners and references
    other = lb.runs[lb.runs["deploy"] != "last"]
    _focus_names(args, set(shown["learner"].astype(str)), set(lb.runs["task"].astype(str)),
                 dict(zip(other["algo"].astype(str), zip(other["learner"].astype(str), other["deploy"].astype(str)))))
    lb = replace(lb, highlight=args.highlight)  # the page draws it apart; the files hold the whole board
    # A control (its limits do not bind) ranks nobody, a submission included; other reasons refuse it.
    refused = {t: unlike for t, r in lb.not_ranked.items() if (unlike := [x for x in r if not is_control(x)])
               and (added | maintainer) & set(lb.runs.loc[lb.runs["task"] == t, "algo"])}
    if refused:
        raise CliError("refusing to rank the submission with these results: " + "; ".join(
            f"{t}: {', '.join(r)}" for t, r in sorted(refused.items())))
    if added or maintainer:  # the page and runs.csv say who evaluated the submitted rows
        from constrained_grpo.eval.scoring.submission import MAINTAINER, SELF_REPORTED, mark_submitted

        lb = mark_submitted(lb, {**{a: SELF_REPORTED for a in added}, **{a: MAINTAINER for a in maintainer}})
    if modified:  # ranked on other settings than the registered tasks' (--allow-modified-tasks)
        from constrained_grpo.eval.scoring.submission import mark_modified

        lb = mark_modified(lb, modified)
    out = args.out if args.out is not None else (args.dir.parent if args.dir.is_file() else args.dir)
    # A CSV input is the long table already: do not rewrite it beside the leaderboard.
    had_board = (out / "leaderboard.md").is_file()
    paths = write_leaderboard(lb, out, table=table if args.table and not args.dir.is_file() else None, evals=evals)
    if had_board:  # tables an earlier build wrote here, not a file of the user's
        _remove_stale_tables(out, paths, args.dir)
    figures = sorted(f"plots/{p.name}" for p in (out / "plots").glob("*.png")) if (out / "plots").is_dir() else []
    if figures:  # `cgrpo plot` wrote figures beside it: the page links them (relative paths)
        from constrained_grpo.eval import storage
        from constrained_grpo.eval.scoring.leaderboard import render_html

        storage.atomic_write_text(out / "leaderboard.html", render_html(lb, figures))
    from constrained_grpo.eval.scoring.focus import explain_focused, focus

    if not args.quiet:
        print(render_markdown(focus(lb, args.algos, args.tasks, args.highlight)))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    if args.explain:
        print("\nIn words:\n" + explain_focused(lb, tasks, args.algos, args.tasks, args.highlight))
    return 0


def plotted_algos(algos: set[str], deployments: Mapping[tuple[str, str, int], tuple[str, str]],
                  requested: Sequence[str] | None, highlight: str | None) -> set[str]:
    """The algorithms ``cgrpo plot`` draws: those ``requested`` (``--algos``), else every one
    but the second deployments of a learner's trainings (``deployments``: a rule other than
    ``last``, e.g. cgrpo-best), whose training curves are their learner's; and ``highlight``.

    >>> sorted(plotted_algos({"a", "a-best", "b"}, {("T", "a-best", 0): ("a", "best-feasible")}, None, None))
    ['a', 'b']
    """
    others = {a for (_, a, _), (_, rule) in deployments.items() if rule != "last"}
    keep = set(requested) if requested else algos - others
    return keep | ({highlight} if highlight is not None else set())


def _cmd_plot(args: argparse.Namespace) -> int:
    from constrained_grpo.eval.scoring.plots import make_plots

    from constrained_grpo.eval.scoring.leaderboard import DEFAULT_TOL

    table, tasks, evals = _load(args.dir, args.allow_incomplete)
    props = _algo_properties(args.dir)
    table, tasks, evals, _ = _with_submissions(args.add, table, tasks, evals, props)  # no packing: joined here
    _focus_names(args, set(table["algo"].astype(str)), set(table["task"].astype(str)))
    keep = plotted_algos(set(table["algo"].astype(str)), _deployments(args.dir), args.algos, args.highlight)
    shown = table["algo"].isin(keep) & table["task"].isin(set(args.tasks or table["task"]))
    table = table[shown]
    if evals is not None:
        evals = evals[evals["algo"].isin(keep) & evals["task"].isin(set(table["task"]))]
    out = args.out if args.out is not None else (args.dir.parent if args.dir.is_file() else args.dir) / "plots"
    units = {a: bool(p["lambda_in_reward_units"]) for a, p in props.items()}
    for path in make_plots(table, {t: m for t, m in tasks.items() if t in set(table["task"])}, out, tol=DEFAULT_TOL,
                           lambda_in_reward_units=units, evals=evals, highlight=args.highlight):
        print(path)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from constrained_grpo.eval.replay import reevaluate

    start = time.perf_counter()
    m, meta = reevaluate(args.run_dir, args.episodes, trusted=_trusted_modules(args))
    print(f"{args.run_dir}: re-evaluated in {time.perf_counter() - start:.1f} s (the run directory is unchanged)")
    print_summary(m, meta)
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from constrained_grpo.eval.replay import render_run

    path = render_run(args.run_dir, args.out, deterministic=not args.sampled, seed=args.seed, max_steps=args.max_steps,
                      trusted=_trusted_modules(args))
    print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cgrpo``; returns the exit status (0 ok, 1 failed runs or a rejected file, 2 usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        rest, config = parse_config_args(argv)
    except CliError as err:
        parser.error(str(err))
    args = parser.parse_args(rest)
    if config and args.command not in ("train", "bench"):
        parser.error(f"--config.* options apply to train and bench, not {args.command}")
    try:
        _user_code(args)  # unknown ids fail before _check_args makes the --out folder
        _check_args(args)
    except CliError as err:
        parser.error(str(err))
    # Imported once the arguments are known to be good: a usage error costs no pandas or scipy.
    import gymnasium as gym

    from constrained_grpo.constraints import ConstraintError, CostContractError
    from constrained_grpo.eval.replay import RenderError
    from constrained_grpo.eval.scoring.loader import ResultsError
    from constrained_grpo.eval.sweep import SweepConfigError

    start = time.perf_counter()
    try:
        if args.command == "envs":
            return _cmd_envs(args)
        if args.command == "check":
            return _cmd_check(args)
        if args.command == "algos":
            return _cmd_algos(args)
        if args.command == "train":
            return _cmd_train(args, config)
        if args.command == "bench":
            return _cmd_bench(args, config)
        if args.command == "leaderboard":
            return _cmd_leaderboard(args)
        if args.command == "plot":
            return _cmd_plot(args)
        if args.command == "eval":
            return _cmd_eval(args)
        if args.command == "render":
            return _cmd_render(args)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM during a sweep
        how = f" ({err})" if str(err) else ""
        print(f"cgrpo {args.command}: interrupted{how}; every finished run is on disk, rerun the same "
              "command to resume", file=sys.stderr)
        return 130
    except CostContractError as err:
        print(f"cgrpo {args.command}: FAILED the cost contract: {err}", file=sys.stderr)
        return 1
    except (CliError, ResultsError, SweepConfigError, ConstraintError, RenderError, gym.error.Error) as err:
        print(f"cgrpo {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (KeyError, ValueError) as err:
        # Unknown names and bad values from the registries and presets carry a full message.
        msg = err.args[0] if err.args else repr(err)
        print(f"cgrpo {args.command}: error: {msg}", file=sys.stderr)
        return 2
    finally:
        if args.command in ("bench", "train"):
            print(f"[cgrpo {args.command}] {time.perf_counter() - start:.1f} s", file=sys.stderr)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
