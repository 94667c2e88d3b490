# %% [markdown]
# # Lab 2: a Lagrangian by hand (tutorial, sections 2 and 3)
#
# With route probabilities `p = (p_short, p_safe, p_gem)` the 3x3 map's constrained problem
# is a linear program:
#
# ```
# max  1 + 0.5 p_gem
# s.t. p_short                          <= 0.2    (hazard)
#      2 p_short + 4 p_safe + 6 p_gem   <= 4.4    (fuel)
#      p_short + p_safe + p_gem = 1
# ```
#
# Its Lagrangian `L(p, lambda) = J_r(p) - sum_k lambda_k (J_k(p) - d_k)` with
# `lambda_k >= 0`; at the optimum, `lambda*_k` is the return one more unit of limit `k` buys.
# The suite computes both for every gridworld (`task_meta`).

# %%
import numpy as np
from scipy.optimize import linprog

from constrained_grpo.tasks import task_meta

meta = task_meta("Grid/HazardFuel3x3-v0")
print("R* =", round(meta.optimum_return, 6), " lambda* =", np.round(meta.optimal_multipliers, 6))

# %% [markdown]
# Dual ascent moves `lambda_k` by the constraint's violation,
# `lambda_k <- clip(lambda_k + eta (Jhat_k - d_k), 0, lambda_max)` (`make_multiplier`).
# Against a policy that answers a price with a lag, it settles where the cost meets its limit:

# %%
from constrained_grpo import make_multiplier

multiplier = make_multiplier([0.2], {"lr": 0.5})
hazard = 0.6
for _ in range(300):
    hazard += 0.2 * (0.6 / (1 + 4 * multiplier.values[0]) - hazard)  # the policy's lagged answer
    multiplier.update([hazard])
print(f"lambda {multiplier.values[0]:.3f}, hazard rate {hazard:.3f} (limit 0.2)")

# %% [markdown]
# ## Exercise
#
# 1. Solve the linear program with `scipy.optimize.linprog` (it minimises: negate the
#    objective) and check the optimum mixture and `R*` against `meta`.
# 2. Read the multipliers off the solver (`res.ineqlin.marginals`, the sensitivity of the
#    minimised objective to each `b_ub`) and compare them with `meta.optimal_multipliers`.
# 3. By complementary slackness, which limits are active (met with equality)?

# %%
# Your answer here.

# %% [markdown]
# ## Solution

# %%
res = linprog(c=[0.0, 0.0, -0.5], A_ub=[[1, 0, 0], [2, 4, 6]], b_ub=[0.2, 4.4], A_eq=[[1, 1, 1]], b_eq=[1],
              bounds=[(0, 1)] * 3, method="highs")
p = res.x
r_star = 1 - res.fun
lam = -res.ineqlin.marginals  # d(max)/d(limit) = -d(min)/d(limit)
print("p* =", p.round(3), " R* =", round(r_star, 6), " lambda* =", lam.round(6))
assert np.allclose(p, [0.2, 0.4, 0.4]) and np.isclose(r_star, meta.optimum_return)
assert np.allclose(lam, meta.optimal_multipliers)
# Both multipliers are positive, so both limits are active: p_short = 0.2 and a fuel mean of 4.4.
assert np.isclose(p[0], 0.2) and np.isclose(2 * p[0] + 4 * p[1] + 6 * p[2], 4.4)
