"""Evaluation: the harness and its records, and beside it three subpackages.

This folder holds four kinds of code, one place each (imported on demand, so that
``import constrained_grpo.eval`` stays light):

* the **harness and its records** (this folder): :mod:`.runner` (``RunSpec``,
  ``execute_run``: one run into its directory, with the paired final evaluation of
  :mod:`.evaluation`), :mod:`.storage` (the run directory layout and atomic writes, Contract 3),
  :mod:`.sweep` (task x algorithm x seed grids on a process pool or Ray), :mod:`.presets`
  (the ``cgrpo bench`` grids), :mod:`.monitor` and :mod:`.replay`. It reaches algorithms and
  task families only through their registries;
* :mod:`.scoring`, **the read side**: run directories to the long table, metrics, verdicts,
  statistics, the leaderboard and its figures. It imports no torch, SB3, trainer or task
  family, and of the harness only the records' format (:mod:`.storage`);
* :mod:`.studies`, **experiments with their analysis** (coupling, parity): each measures
  named internals and may import any layer;
* :mod:`.bench`, **the speed benchmarks** of ``make bench``, also free to import any layer.

Nothing outside ``studies`` and ``bench`` imports them (tests/core/test_import_direction.py).
The command line is ``cgrpo`` (``constrained_grpo.cli``).
"""
