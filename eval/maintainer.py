"""Policy submissions evaluated by the maintainer, not by the submitter.

A submitter sends the run folders ``cgrpo train`` writes (``config.json``, ``progress.csv``
and the saved agent, ``agent/``: safetensors). The maintainer rebuilds each agent as its run
built it (only registered algorithms, or user modules the maintainer imports with
``--import``: :func:`~constrained_grpo.eval.replay.load_saved_agent`), evaluates it on the
registered task's plan from a first reset seed kept private (an option or
``$CGRPO_PRIVATE_SEED``; never the public 1,000,000, which anyone can tune against), and
writes a run folder of the result: the submitted ``config.json`` and ``progress.csv``, the
maintainer's ``eval.csv``, and ``done.json`` recording who evaluated it, from which seed, with
which package versions and commit. The board ranks these folders like any run folders.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from constrained_grpo.eval import storage

__all__ = ["PRIVATE_SEED_ENV", "MaintainerError", "private_first_seed", "reevaluate_submission"]

#: The environment variable holding the maintainer's private first reset seed.
PRIVATE_SEED_ENV = "CGRPO_PRIVATE_SEED"
#: Evaluation episodes a first seed leaves room for (plans cap at 20,000 per policy).
_EPISODE_ROOM = 1_000_000


class MaintainerError(ValueError):
    """A submission or a setting the maintainer's re-evaluation cannot take; the message names it."""


def private_first_seed(value: int | str | None = None) -> int:
    """The private first reset seed: ``value``, else ``$CGRPO_PRIVATE_SEED``; a whole number
    in [0, 2^63 - 10^6), at least 10^6 from the public one (``evaluation.EVAL_SEED``), so
    that no private episode is a public one."""
    from constrained_grpo.eval.evaluation import EVAL_SEED

    raw = value if value is not None else os.environ.get(PRIVATE_SEED_ENV)
    if raw is None or str(raw).strip() == "":
        raise MaintainerError(f"no private first seed: pass --private-seed N or set ${PRIVATE_SEED_ENV} (keep it out of the "
                              "repository and of the page)")
    try:
        seed = int(str(raw).strip())
    except ValueError:
        raise MaintainerError(f"private first seed {str(raw)[:40]!r} is not a whole number; give one such as 734912") from None
    if not 0 <= seed < 2**63 - _EPISODE_ROOM:
        raise MaintainerError(f"private first seed {seed} is outside [0, 2^63 - 10^6); give a smaller one")
    if abs(seed - EVAL_SEED) < _EPISODE_ROOM:
        raise MaintainerError(f"private first seed {seed} is within {_EPISODE_ROOM:,} of the public first seed "
                              f"{EVAL_SEED:,}: their episodes could overlap; choose one far from it, kept private")
    return seed


def reevaluate_submission(runs: str | Path, out: str | Path, first_seed: int, trusted: Collection[str] = (),
                          name: str | None = None) -> list[Path]:
    """Every complete run folder under ``runs``, evaluated again by the maintainer (module
    docstring) into ``out/<task>/<algo>/seed_<n>/``; returns those folders. A run folder
    without a saved agent, of an algorithm that is neither registered nor trusted, or whose
    task settings differ from the registered task's is refused before anything is written.

    ``name``: rank the runs under this algorithm name instead of their own (a submission of
    an algorithm the board already holds, e.g. its own runs re-evaluated on private seeds);
    the agent is still rebuilt as its run recorded it. Only for runs of one algorithm."""
    from constrained_grpo.eval.evaluation import evaluate_agent
    from constrained_grpo.eval.replay import RenderError, load_saved_agent, run_spec
    from constrained_grpo.eval.runner import _write_eval, environment_versions, git_commit
    from constrained_grpo.eval.scoring.loader import find_runs

    runs, out = Path(runs), Path(out)
    found = [p for p in find_runs(runs) if storage.is_complete(p)]
    if not found:
        raise MaintainerError(f"{runs} holds no complete run folder (config.json, done.json and agent/ from cgrpo train)")
    if name is not None:
        from constrained_grpo.eval.scoring.loader import ALGO_NAME

        if not ALGO_NAME.fullmatch(name):
            raise MaintainerError(f"algorithm name {name[:40]!r} has characters a board name cannot have; use letters, "
                                  "digits and ._:+- (e.g. cgrpo-private)")
        algos = sorted({run_spec(p).algo for p in found})
        if len(algos) > 1:
            raise MaintainerError(f"{runs} holds runs of {len(algos)} algorithms ({', '.join(algos[:3])}); one name "
                                  "renames one algorithm: re-evaluate each folder on its own")
    agents: list[tuple[Path, Any, Any]] = []
    for path in found:  # everything loads before anything is written
        spec = run_spec(path)
        if spec.config.get("env_kwargs") or spec.config.get("limits") is not None:
            raise MaintainerError(f"{path}: trained with env_kwargs/limits of its own; the board ranks runs of the "
                                  "registered task: submit runs made with the task's default settings")
        try:
            agents.append((path, spec, load_saved_agent(path, trusted)))
        except RenderError as err:
            raise MaintainerError(str(err)) from None
    provenance = {"evaluated_by": "maintainer", "versions": environment_versions(), "git": git_commit()}
    written = []
    for path, spec, agent in agents:
        results, protocol = evaluate_agent(agent, spec.task, None, None, first_seed)
        config = storage.read_json(path / storage.CONFIG_FILE)
        names = [c["name"] for c in config["task"]["constraints"]]
        algo = spec.algo if name is None else name
        dest = out / storage.run_dir("", spec.task, algo, spec.seed)
        dest.mkdir(parents=True, exist_ok=True)
        if name is not None:  # ranked under the new name; the rebuilt learner stays on record
            config["algo"] = {**config["algo"], "name": name, "submitted_as": spec.algo}
            config["run"] = {**config["run"], "algo": name}
        config.setdefault("eval", {})["first_seed"] = first_seed
        config["eval"]["episodes"] = None
        storage.atomic_write_json(dest / storage.CONFIG_FILE, config)
        shutil.copyfile(path / storage.PROGRESS_FILE, dest / storage.PROGRESS_FILE)
        done = storage.read_json(path / storage.DONE_FILE)
        done["eval_rows"] = _write_eval(dest / storage.EVAL_FILE, results, protocol, names)
        done["eval"] = protocol.to_dict()
        done["submission"] = provenance
        storage.atomic_write_json(dest / storage.DONE_FILE, done)  # last: the folder is complete
        written.append(dest)
    return written
