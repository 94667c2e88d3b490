"""Options added to the GRPO agent at a null default leave recorded runs as they were: the
committed standard record's runs still resolve as recorded (``--skip-recorded`` skips them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from constrained_grpo.eval.presets import PRESETS
from constrained_grpo.eval.runner import _without_new_nulls
from constrained_grpo.eval.scoring.record import load_record

RECORD = Path(__file__).resolve().parents[2] / "results" / "standard"


def test_new_null_options_are_dropped_and_others_kept() -> None:
    then = {"config": {"lr": 0.1, "multiplier": {"rule": "pid"}}, "lm": {"temperature": 1.0}}
    now = {"config": {"lr": 0.1, "kl_coef_neg": None, "mdp_alpha": 0.2, "multiplier": {"rule": "pid", "kd": None}},
           "lm": {"temperature": 1.0, "sample_temperatures": None}, "extra": None}
    assert _without_new_nulls(now, then) == {
        "config": {"lr": 0.1, "mdp_alpha": 0.2, "multiplier": {"rule": "pid"}}, "lm": {"temperature": 1.0}}
    # A key the record has stays, null or not.
    assert _without_new_nulls({"a": None}, {"a": 1}) == {"a": None}


@pytest.mark.slow
def test_the_committed_standard_records_grpo_runs_resolve_as_recorded() -> None:
    record = load_record(RECORD, configs=True)
    specs = [s for s in PRESETS["standard"].runs() if (s.task, s.algo, s.seed) in record.configs]
    # cgrpo-best's selection rule changed on purpose (a group-aware bound, not the batch mean:
    # tests/core/test_recorded_upgrade.py); every other GRPO run is the run it was.
    grpo = [s for s in specs if s.algo.startswith(("cgrpo", "grpo")) and s.algo != "cgrpo-best"]
    assert len(grpo) > 500
    differ = [s.key for s in grpo if s.difference(record.configs[(s.task, s.algo, s.seed)][0]) is not None]
    assert not differ, differ[:5]
