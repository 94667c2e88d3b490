"""Evaluation harness, metrics, leaderboard and plots.

Modules (flat, imported on demand so that ``import constrained_grpo.eval`` stays light):

* :mod:`.runner`: :class:`~.runner.RunSpec` and ``execute_run``, one run into its directory,
  with the harness's paired final evaluation (``evaluate_agent``);
* :mod:`.storage`: the run directory layout and atomic writes (Contract 3);
* :mod:`.sweep`: task x algorithm x seed grids on a local process pool or on Ray;
* :mod:`.presets`: the ``quick``, ``standard`` and ``paper`` grids;
* :mod:`.loader`: run directories -> the long table, and its validation;
* :mod:`.metrics`, :mod:`.stability`, :mod:`.stats`: return, satisfaction, the
  constraint-aware score and multiplier stability; IQM, stratified bootstrap, paired
  differences, probability of improvement;
* :mod:`.leaderboard`, :mod:`.plots`: Markdown/HTML rankings and PNG figures;
* ``speed*``: the speed benchmarks of ``make bench``.

The command line is ``cgrpo`` (``constrained_grpo.cli``).
"""
