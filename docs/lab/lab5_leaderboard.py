# %% [markdown]
# # Lab 5: reading the board and its verdicts (tutorial, section 5)
#
# The leaderboard orders algorithms per task by their mean score (return against `R*`, minus
# the worst violation) and tests every pair over seeds with an exact permutation test: the
# rank cell is the position by mean score with an interval [L, U], L = 1 + the algorithms
# separated above, U = n - those separated below; algorithms that share a group letter are
# not told apart. Run lab 4 first: this lab ranks its four runs.

# %%
from pathlib import Path

from constrained_grpo.eval.scoring.explain import explain
from constrained_grpo.eval.scoring.focus import focus
from constrained_grpo.eval.scoring.leaderboard import build_leaderboard, render_markdown, seeds_to_separate
from constrained_grpo.eval.scoring.loader import load_results

results = load_results(Path("lab_runs"))
lb = build_leaderboard(results.table, results.tasks)
md = render_markdown(focus(lb, highlight="cgrpo"))  # cgrpo's rows marked; the ranks are the whole board's
print(md[md.index("## Task"):md.index("## Suite")])
print(explain(lb, results.tasks))

# %% [markdown]
# ## Exercise
#
# 1. From `lb.per_task[TASK]` (columns `algo`, `rank`, `rank_lo`, `rank_hi`, `letters`,
#    `feasible_seeds`, `seeds`): which places can the data give the first algorithm?
# 2. How many seeds per algorithm would the exact test need to separate a pair at all
#    (`seeds_to_separate(pairs)`, with one pair here)? Why can two seeds never separate two
#    algorithms, whatever their scores?
# 3. Which verdict would you print for each algorithm, and with what words ("feasible",
#    "too close to call", ...)?

# %%
# Your answer here.

# %% [markdown]
# ## Solution

# %%
TASK = "Grid/HazardFuel3x3-v0"
ranked = lb.per_task[TASK]
print(ranked[["algo", "rank", "rank_lo", "rank_hi", "letters", "feasible_seeds", "seeds"]].to_string(index=False))
need = seeds_to_separate(1)
print(f"seeds per algorithm to separate one pair: {need}")
# With n = 2 seeds each the exact test's smallest two-sided p-value is 2 / C(4, 2) = 1/3 > 0.05:
# no pair can be separated, so every interval spans every place and all share one letter; the
# positions still follow the mean scores (an order, not a verdict).
n = len(ranked)
assert (ranked["rank_lo"] == 1).all() and (ranked["rank_hi"] == n).all() and ranked["letters"].nunique() == 1
assert need > 2
# The verdicts are per seed, from its evaluation episodes: "feasible seeds" counts the seeds
# whose every cost's upper bound is within d(1 + 0.1); an algorithm is not "feasible" on 2 seeds.
