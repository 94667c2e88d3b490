# %% [markdown]
# # Lab 3: ScRew's coupling against ScAdv (tutorial, section 4)
#
# GRPO standardises within a group of episodes. *ScRew* standardises the scalarised reward
# `R - sum_k lambda_k C_k` once, so every component shares one denominator `sigma_S`: the
# effective weight of component j is `w_j = lambda_j sigma_j / sigma_S`, and raising one
# multiplier shrinks the weight on the return and on every other cost. *ScAdv* (`cgrpo`)
# standardises each component on its own, then adds them with the multipliers: `w_j = lambda_j`.

# %%
import numpy as np

from constrained_grpo.agents.advantages import AdvantageSpec, effective_weights

# One group of 8 episodes; columns: return R, hazard C_1, fuel C_2.
routes = {"short": [1.0, 1.0, 2.0], "safe": [1.0, 0.0, 4.0], "gem": [1.5, 0.0, 6.0]}
group = np.array([routes[r] for r in ["short", "short", "safe", "safe", "safe", "gem", "gem", "gem"]])
x = group[None]  # [groups P = 1, group size G = 8, components 1 + K = 3]
for lam in ([0.5, 0.25], [2.0, 0.25], [8.0, 0.25]):
    screw = effective_weights(x, np.array(lam), AdvantageSpec("screw"))
    scadv = effective_weights(x, np.array(lam), AdvantageSpec("scadv"))
    print(f"lambda = {lam}:  ScRew (R, hazard, fuel) = {screw.round(3)}   ScAdv = {scadv.round(3)}")

# %% [markdown]
# At `lambda* = (0.5, 0.25)` ScRew's weights are all 0: on this group the scalarised reward is
# the same for every route (the optimum's multipliers make the routes equally good), so its
# standardised advantage is 0/0, set to 0, and the policy gets no gradient at all.
#
# ## Exercise
#
# Keep `lambda_fuel = 0.25` and sweep `lambda_hazard` over `np.linspace(1, 8, 71)` (past the
# degenerate point). Find the smallest `lambda_hazard` at which ScRew's weight on the *return*
# falls below 0.1, and the fuel weight there. What does a rising hazard price do to the weight
# of fuel, whose price stays 0.25, under ScRew, and under ScAdv?

# %%
# Your answer here.

# %% [markdown]
# ## Solution

# %%
grid = np.linspace(1, 8, 71)
weights = np.array([effective_weights(x, np.array([h, 0.25]), AdvantageSpec("screw")) for h in grid])
first = int(np.argmax(weights[:, 0] < 0.1))
print(f"ScRew's return weight falls below 0.1 at lambda_hazard = {grid[first]:.1f} "
      f"(fuel weight there {weights[first, 2]:.3f}, against 0.25 under ScAdv)")
assert weights[first, 0] < 0.1 and (first == 0 or weights[first - 1, 0] >= 0.1)
scadv = np.array([effective_weights(x, np.array([h, 0.25]), AdvantageSpec("scadv")) for h in grid])
assert np.allclose(scadv[:, 0], 1.0) and np.allclose(scadv[:, 2], 0.25)  # ScAdv: the weights are the prices
# Under ScRew the fuel weight moves with the hazard price, which it should not: the coupling.
assert weights[0, 2] > 1.5 and weights[-1, 2] < 0.15
