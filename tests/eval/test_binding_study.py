"""The binding check: every task of the standard board declares the policies that stand for
the reward maximiser and one that keeps every limit, and the check decides from the exact
optimum, the committed record, or scripted stand-ins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from constrained_grpo.eval.studies.binding import check_binding, side_from_episodes
from constrained_grpo.tasks import task_constraints, task_info

RECORD = Path(__file__).resolve().parents[2] / "results" / "standard"
GRIDS = ("Grid/HazardFuel-v0", "Grid/HazardFuel3x3-v0", "Grid/HazardFuelSlip-v0", "Grid/HazardFuelMud-v0")


@pytest.mark.slow
@pytest.mark.parametrize("task", GRIDS)
def test_gridworlds_bind_by_their_exact_optimum(task):
    exact = check_binding(task, record=None)
    assert exact.passed and [s.name for s in exact.unconstrained] == ["exact:unconstrained"]
    # The recorded unconstrained learners and references agree, on 10 of 10 seeds each.
    recorded = check_binding(task, record=RECORD)
    assert recorded.passed, "\n".join(recorded.lines())
    assert all(s.breaking == s.seeds == 10 for s in recorded.unconstrained if s.source == "record")
    assert all(s.within == s.seeds == 10 for s in recorded.keepers if s.source == "record")
    assert recorded.gap > 0.2  # R* trails the unconstrained return by 20-28% (1.5 against 1.09-1.20)


def test_hazard_fuel_gap_is_the_lps():
    report = check_binding("Grid/HazardFuel-v0", record=None)
    unc, con = report.unconstrained[0], report.keepers[0]
    assert unc.mean_return == pytest.approx(1.5) and con.mean_return == pytest.approx(1.1333, abs=1e-4)
    assert unc.costs["fuel"] == pytest.approx(21.0) and con.costs["fuel"] == pytest.approx(12.0)
    assert report.gap == pytest.approx(1.5 - 1.13333, abs=1e-4)


def test_chain_sum_long_binds_on_the_committed_board():
    report = check_binding("Math/ChainSumLong-v0", record=RECORD)
    assert report.passed and report.unconstrained[0].breaking == 10 and report.keepers[0].within == 10
    assert report.gap == pytest.approx(0.7935 - 0.5375, abs=1e-4)


def test_chain_sum_does_not_bind_and_is_an_unranked_control():
    report = check_binding("Math/ChainSum-v0", record=RECORD)
    assert not report.binds and report.unconstrained[0].breaking == 0
    from constrained_grpo.eval.presets import get_preset

    standard = get_preset("standard")
    assert "Math/ChainSum-v0" in standard.controls


def test_chain_sum_hard_v1_binds_with_scripted_stand_ins():
    report = check_binding("Math/ChainSumHard-v1", record=None, problems=500)
    assert report.passed, "\n".join(report.lines())
    worked = report.unconstrained[0]
    assert worked.costs["length"] > 0.5 and worked.mean_return == 1.0


def test_highway_v1_does_not_bind_for_ppo():
    """Unconstrained ppo keeps every limit of Highway-v1 on 8 of 10 seeds: the reason for Highway-v2."""
    report = check_binding("Highway/Highway-v1", record=RECORD)
    ppo = next(s for s in report.unconstrained if s.name == "ppo")
    assert not report.binds and (ppo.breaking, ppo.within) == (2, 8) and report.kept


def test_highway_v2_binds_on_the_re_scored_v1_runs():
    report = check_binding("Highway/Highway-v2", record=RECORD)
    assert report.passed, "\n".join(report.lines())
    assert all(s.source == "record of Highway/Highway-v1" and s.breaking == s.seeds == 10 for s in report.unconstrained)


def test_highway_v2_declares_its_limits_and_return_anchors():
    cons = {c.name: c.limit for c in task_constraints("Highway/Highway-v2")}
    assert cons == {"collision": 0.05, "speeding": 0.1, "headway": 0.13, "lane_change": 3.0}
    assert {c.name: c.limit for c in task_constraints("Highway/Highway-v1")}["collision"] == 0.1  # v1 unchanged
    info = task_info("Highway/Highway-v2")
    assert info.return_anchors == ("ref-random", "ref-safe-driver")
    assert set(info.return_anchors) <= set(info.task_references())
    # A user's limits still override the declared ones.
    assert {c.name: c.limit for c in task_constraints("Highway/Highway-v2", limits={"collision": 0.2})}["collision"] == 0.2


#: Standard-board tasks whose check fails on the committed board, and why: ChainSum-v0 runs as
#: an unranked control; Highway-v1 stays in the preset as a control beside Highway-v2.
KNOWN_NOT_BINDING = {"Math/ChainSum-v0": "unranked control", "Highway/Highway-v1": "a control beside Highway-v2"}


def _standard_tasks() -> list[str]:
    from constrained_grpo.eval.presets import get_preset

    standard = get_preset("standard")
    return [*standard.resolved_tasks(), *(t for t in standard.controls if t not in standard.resolved_tasks())]


@pytest.mark.parametrize("task", [t for t in _standard_tasks() if t not in GRIDS])
def test_every_standard_task_passes_its_binding_check_or_is_a_named_exception(task):
    report = check_binding(task, record=RECORD, problems=500)
    assert report.passed == (task not in KNOWN_NOT_BINDING), "\n".join(report.lines())
    assert set(GRIDS) <= set(_standard_tasks())  # the gridworlds: test_gridworlds_bind_by_their_exact_optimum


def test_every_standard_task_declares_its_binding():
    from constrained_grpo.eval.presets import get_preset

    standard = get_preset("standard")
    for task in (*standard.resolved_tasks(), *standard.controls):
        binding = task_info(task).task_binding()
        assert binding is not None and binding.keepers, task
        assert binding.exact or binding.unconstrained, task


def test_side_verdicts_from_episodes():
    """Clopper-Pearson by hand (K = 1, alpha 0.05): 30 crashes in 100 episodes have the lower
    bound Beta^-1(0.05; 30, 71) = 0.22, over the tolerated 0.11 of a limit of 0.1; 0 in 100
    the upper bound 1 - 0.05^(1/100) = 0.030, within."""
    cons = [type("C", (), {"name": "crash", "limit": 0.1, "indicator": True})()]
    over = side_from_episodes("x", np.ones(100), np.r_[np.ones(30), np.zeros(70)][:, None], cons)
    assert (over.breaking, over.within, over.costs["crash"]) == (1, 0, 0.3)
    keep = side_from_episodes("y", np.ones(100), np.zeros((100, 1)), cons)
    assert (keep.breaking, keep.within) == (0, 1)
    close = side_from_episodes("z", np.ones(100), np.r_[np.ones(12), np.zeros(88)][:, None], cons)
    assert (close.breaking, close.within) == (0, 0)  # 12 in 100: bounds 0.07 and 0.19, undetermined


def test_undeclared_task_is_a_clear_error():
    with pytest.raises(ValueError, match="declares no binding"):
        check_binding("Highway/Merge-v0", record=None)


def test_the_study_prints_one_json_object_per_task_and_fails_on_a_failing_task(capsys):
    import json

    from constrained_grpo.eval.studies.binding import main

    assert main(["Grid/HazardFuel3x3-v0", "--json", "--record", str(RECORD)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["limits"] == {"hazard": 0.2, "fuel": 4.4}
    assert main(["Math/ChainSum-v0", "--record", str(RECORD)]) == 1
    assert "does NOT bind" in capsys.readouterr().out


def test_the_boards_own_runs_say_whether_its_limits_bind():
    from constrained_grpo.envs.registration import Binding

    from constrained_grpo.eval.scoring.binding import board_binding

    def runs(**verdicts: list[str]) -> pd.DataFrame:
        return pd.DataFrame([{"algo": a, "feasibility": v} for a, vs in verdicts.items() for v in vs])

    b = Binding(unconstrained=("ppo", "grpo"), keepers=("ref-safe-driver",))
    # The committed Highway-v1's shape: ppo keeps the limits on 8 of its 10 seeds.
    binds, text = board_binding(runs(ppo=["violates"] * 2 + ["feasible"] * 8, grpo=["violates"] * 10,
                                     **{"ref-safe-driver": ["feasible"] * 10}), b)
    assert binds is False
    assert text == ("unconstrained ppo breaks a limit on 2/10 seeds, grpo on 10/10; ref-safe-driver keeps every limit on "
                    "10/10: the limits do not bind for ppo (they need breaking on 9/10 seeds)")
    # 9 of 10 breaking is enough; an undetermined seed is not breaking.
    binds, text = board_binding(runs(ppo=["violates"] * 9 + ["undetermined"], **{"ref-safe-driver": ["feasible"] * 10}), b)
    assert binds is True and text.endswith(": the limits bind")
    binds, text = board_binding(runs(ppo=["violates"] * 8 + ["undetermined"] * 2), b)
    assert binds is False and "do not bind for ppo" in text
    # A keeper with one breaking seed does not show that the limits can be kept.
    binds, text = board_binding(runs(ppo=["violates"] * 10, **{"ref-safe-driver": ["feasible"] * 9 + ["violates"]}), b)
    assert binds is False and text.endswith("no keeper keeps every limit on every seed")
    assert board_binding(runs(cgrpo=["feasible"]), b) == (None, "")
    # The stand-ins that keep the limits, what makes a task a control on the board: ppo above,
    # not a keeper that failed to show itself within, and nobody where no stand-in ran.
    from constrained_grpo.eval.scoring.binding import loose_stand_ins

    assert loose_stand_ins(runs(ppo=["violates"] * 2 + ["feasible"] * 8, grpo=["violates"] * 10), b) == [("ppo", 2, 10)]
    assert loose_stand_ins(runs(ppo=["violates"] * 10, **{"ref-safe-driver": ["feasible"] * 9 + ["violates"]}), b) == []
    assert loose_stand_ins(runs(cgrpo=["feasible"] * 10), b) == []
