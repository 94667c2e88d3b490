"""The GRPO agents' deployment rules: :mod:`constrained_grpo.deploy`, shared with the SB3-based
learners (the baselines import no GRPO module), re-exported under the name the agents use."""

from __future__ import annotations

from constrained_grpo.deploy import (
    BUFFER_FROM,
    DEPLOY_RULES,
    FINAL_POLICIES,
    LEGACY_DEPLOY_KEYS,
    SELECTION_ALPHA,
    TAIL,
    FinalPolicyKeeper,
    check_deploy,
    cost_upper_bound,
    load_params,
    member_rows,
    params_of,
)

__all__ = ["BUFFER_FROM", "DEPLOY_RULES", "FINAL_POLICIES", "LEGACY_DEPLOY_KEYS", "SELECTION_ALPHA", "TAIL",
           "FinalPolicyKeeper", "check_deploy", "cost_upper_bound", "load_params", "member_rows", "params_of"]
