"""Experiments with their analysis commands; each writes a committed report under results/.

* :mod:`.coupling`: the coupling experiment (ScAdv ``cgrpo`` vs ScRew ``grpo-screw``) and
  its controlled demonstration, ``results/coupling/``;
* :mod:`.parity`: our PPO-Lagrangian against OmniSafe's on Safety-Gymnasium,
  ``results/parity/``.

A study measures named internals, so it may import any layer (agents, baselines, task
families, the harness, the read side); nothing outside studies imports one. The runs a study
analyses come from ``cgrpo bench --preset NAME`` where one exists.
"""
