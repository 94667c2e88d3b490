# %% [markdown]
# # Lab 1: a constrained environment step (tutorial, section 1)
#
# A constrained task is a plain Gymnasium env whose `step` also returns the step's costs,
# one per constraint, in `info["costs"]`; the limits `d_k` are on the task
# (`env.unwrapped.constraints`). The map of `Grid/HazardFuel3x3-v0`:
#
# ```
# .$.
# .M.
# SHG
# ```
#
# Start at `S`, reach `G` (reward 1). The short route crosses the hazard `H`; the gem `$`
# pays 0.5 more but costs fuel (1 per step). Actions: 0 up, 1 down, 2 left, 3 right.

# %%
import numpy as np

import constrained_grpo.envs  # registers every task id with gymnasium
from constrained_grpo import make_env

env = make_env("Grid/HazardFuel3x3-v0")
print([(c.name, c.limit, c.indicator) for c in env.unwrapped.constraints])


def play(actions: list[int]) -> tuple[float, np.ndarray]:
    """The return and the cost vector of one episode that takes ``actions``."""
    obs, info = env.reset(seed=0)
    episode_return, episode_costs = 0.0, np.zeros(len(env.unwrapped.constraints))
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        episode_return += reward
        episode_costs += info["costs"]
        if terminated or truncated:
            break
    return episode_return, episode_costs


print("safe route (up, right, right, down):", play([0, 3, 3, 1]))

# %% [markdown]
# ## Exercise
#
# Play the short route (through `H`) and the gem route (through `$`). For each, give its
# return and cost vector, and say which limit it breaks when it is the only route taken
# (hazard is an *indicator*: its limit 0.2 is a probability of an episode with a hazard
# event; fuel's limit 4.4 is a mean per episode).

# %%
# Your answer here: short = play([...]); gem = play([...])

# %% [markdown]
# ## Solution

# %%
short, gem = play([3, 3]), play([0, 0, 3, 3, 1, 1])
print("short:", short, " gem:", gem)
assert short[0] == 1.0 and list(short[1]) == [1.0, 2.0]  # hazard every time: rate 1 > 0.2
assert gem[0] == 1.5 and list(gem[1]) == [0.0, 6.0]  # fuel 6 > 4.4
# A policy keeping both limits must mix routes: at most 20% short, and the fuel mean
# 2 p_short + 4 p_safe + 6 p_gem <= 4.4 (lab 2 finds the best mixture).
