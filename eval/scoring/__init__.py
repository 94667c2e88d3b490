"""The read side: run directories -> the long table -> metrics, verdicts, ranks, figures.

* :mod:`.loader`: run directories and submitted tables -> the long table, validated;
* :mod:`.verdict`: the constraint verdict (exact bounds for indicator costs), the
  constraint-aware score and the evaluation-size rule;
* :mod:`.metrics`, :mod:`.stability`, :mod:`.stats`: return, satisfaction and score per
  run; multiplier stability; IQM, exact permutation tests, intervals;
* :mod:`.leaderboard`, :mod:`.explain`, :mod:`.plots`, :mod:`.colors`: the Markdown/HTML/CSV
  board, why a row ranks where it does, PNG figures.

Everything here works from what the runs recorded (their configs name the algorithm and its
capabilities), so ranking a submission needs no training stack: these modules import
numpy, scipy, pandas, matplotlib and the core's schema, never torch, SB3, a trainer, a task
family or the harness (of which only :mod:`constrained_grpo.eval.storage`, the records'
format). A task's registered facts are looked up lazily, by id, only where a check needs them.
"""
