"""The GRPO algorithm family as one table: a registry name is a set of config options.

Every variant shares the entry point :func:`constrained_grpo.agents.agent.make_grpo_agent`
and the ``standard`` preset; its row says only what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from constrained_grpo.registry import DEPLOY_ALIAS_SUFFIXES, register_agent

__all__ = ["ALIASES", "DEPLOY_ALIAS_SUFFIXES", "VARIANTS", "Variant", "register_variants"]

ENTRY_POINT = "constrained_grpo.agents.agent:make_grpo_agent"


@dataclass(frozen=True)
class Variant:
    """One registry row: name, one-line description, the options it sets."""

    name: str
    description: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def constrained(self) -> bool:
        return self.options.get("aggregator", "scadv") != "reward"

    @property
    def lambda_in_reward_units(self) -> bool:
        """ScRew scalarizes R - sum lambda C before normalizing: lambda is in reward units."""
        return self.options.get("aggregator") == "screw"


_TABLE: tuple[Variant, ...] = (
    Variant("cgrpo", "Constrained GRPO: scalarize z-scored reward and cost advantages (ScAdv, arXiv 2602.05863)"),
    Variant(
        "grpo-screw",
        "GRPO with reward scalarization R - sum lambda C, then z-score (ScRew, the standard practice)",
        {"aggregator": "screw"},
    ),
    Variant("grpo", "unconstrained GRPO on the reward (costs logged, ignored)", {"aggregator": "reward"}),
    Variant("cgrpo-norm", "ScAdv divided by 1 + sum lambda (PPO-Lagrangian's normalization)", {"scadv_normalize": True}),
    Variant("cgrpo-gdpo", "GDPO: batch-normalized sum of z-scored components (arXiv 2601.05242)", {"aggregator": "gdpo"}),
    Variant("cgrpo-dara", "DARA: density-weighted components, symmetric form, batch-normalized", {"aggregator": "dara"}),
    Variant(
        "cgrpo-dara-asym",
        "DARA, asymmetric form: only the good side of a sparse component is amplified",
        {"aggregator": "dara", "dara_symmetric": False},
    ),
    Variant("cgrpo-softmax", "ScAdv with SoftmaxGRPO's G softmax(x/tau) - 1 estimator (arXiv 2608.09271)", {"estimator": "softmax"}),
    Variant(
        "cgrpo-maxrl",
        "ScAdv with MaxRL's (x - mean) / mean estimator (arXiv 2602.02710); a negative batch minimum is shifted to 0",
        {"estimator": "maxrl"},
    ),
    Variant(
        "cgrpo-drgrpo",
        "ScAdv with Dr. GRPO: mean-only baseline, no length normalization of the loss",
        {"estimator": "mean", "loss_agg": "sum"},
    ),
    Variant(
        "cgrpo-corr",
        "CorrGRPO: centred weighted sum over the root of the summed within-group correlations (arXiv 2609.36820)",
        {"aggregator": "corr"},
    ),
    Variant(
        "cgrpo-is",
        "IS-GRPO (importance-sampled GRPO, derived from its paper's statement: docs/papers.md): "
        "z-scores on starts drawn in proportion to their std, in expectation",
        {"estimator": "is"},
    ),
    Variant(
        "cgrpo-mdp",
        "MDP-GRPO: dual-anchor (group and goal) advantages with prospect-theoretic shaping (arXiv 2606.06058)",
        {"aggregator": "mdp"},
    ),
    Variant("cgrpo-batchstd", "ScAdv with a group mean and a batch std (TRL scale_rewards='batch')", {"estimator": "batch_std"}),
    Variant(
        "cgrpo-mu",
        "Mu-GRPO: few large generation stages, many passes, relaxed clip, negative-advantage veto (arXiv 2605.17570)",
        {
            "num_groups": 64,
            "epochs": 4,
            "minibatches": 16,
            "clip_eps_low": 0.2,
            "clip_eps_high": 0.4,
            "neg_adv_veto": True,
        },
    ),
    Variant("cgrpo-gspo", "ScAdv with one length-normalized ratio per episode (GSPO)", {"ratio_level": "sequence"}),
    # ``cgrpo`` already runs a PI controller on control tasks (CONTROL_OVERRIDES), so the
    # variant adds what it lacks, the derivative term; kd = 1 matches the control kp so that
    # a rising cost counts as much as the violation itself.
    Variant(
        "cgrpo-pid",
        "ScAdv with the full PID Lagrangian (Stooke et al. 2020): a derivative term kd=1 on a rising cost",
        {"multiplier": {"rule": "pid", "kd": 1.0}},
    ),
    # Last-iterate rules (constrained_grpo.multipliers; docs/papers.md): the PI multiplier of
    # ``cgrpo`` is replaced by each rule at the library's defaults.
    Variant(
        "cgrpo-ogda",
        "ScAdv with optimistic gradient steps on policy and multiplier (ReLOAD, arXiv 2302.01275)",
        {"multiplier": {"rule": "dual_ascent", "optimistic": True}, "policy_optimism": 1.0},
    ),
    Variant(
        "cgrpo-reg",
        "ScAdv with regularised dual ascent lambda <- [lambda + eta (e - tau lambda)]+ and the entropy bonus (RPG-PD, arXiv 2306.11700)",
        {"multiplier": {"rule": "regularized"}},
    ),
    # RPG-PD's regularised dual direction taken optimistically. Not OPG-PD (arXiv 2306.11700),
    # which is optimistic on the unregularised Lagrangian: that update is cgrpo-ogda's (tau = 0
    # here would duplicate it); this one keeps tau = 0.01 and so RPG-PD's bias tau lambda*.
    Variant(
        "cgrpo-oreg",
        "ScAdv with optimistic steps on RPG-PD's regularised Lagrangian: lambda <- [lambda + eta (2 g_t - g_{t-1})]+, g = e - tau lambda, tau = 0.01 (arXiv 2306.11700's RPG-PD made optimistic)",
        {"multiplier": {"rule": "regularized", "optimistic": True}, "policy_optimism": 1.0},
    ),
    Variant(
        "cgrpo-al",
        "ScAdv with the augmented Lagrangian: cost weight max(0, lambda + rho e) on the batch's violation",
        {"multiplier": {"rule": "augmented"}},
    ),
    Variant(
        "cgrpo-crpo",
        "GRPO with CRPO's switch: the reward's z-score while every cost is within its limit, else the most violated cost's (arXiv 2011.05869)",
        {"multiplier": {"rule": "crpo"}},
    ),
    # Aliases of ``cgrpo`` with a deployment rule (constrained_grpo.agents.final_policy): the
    # same trainings seed for seed, another policy deployed. Deployment is an option of every
    # learner (``deploy``), so these are not listed or ranked as algorithms of their own.
    Variant(
        "cgrpo-best",
        "cgrpo with deploy='best-feasible' (an alias): the top batch return among iterations whose batch costs are within every limit by a one-sided 95% bound over the batch's starts",
        {"deploy": "best-feasible"},
    ),
    Variant(
        "cgrpo-mix",
        "cgrpo with deploy='tail-mixture' (an alias): a mixture of 10 policies of its last 20% of iterations, one per episode",
        {"deploy": "tail-mixture"},
    ),
)

# Every other learning algorithm of the family gets the same two aliases (``grpo-best``,
# ``cgrpo-al-mix``, ...), so a board can hold every learner under each deployment rule, each
# run named apart and paired with its learner's by seed (one training serves all three in a
# sweep: eval.runner.deployment_of).
_TABLE = _TABLE + tuple(
    Variant(f"{v.name}-{suffix}", f"{v.name} with deploy={rule!r} (an alias)", {**v.options, "deploy": rule})
    for v in _TABLE if "deploy" not in v.options and v.name != "cgrpo"
    for suffix, rule in DEPLOY_ALIAS_SUFFIXES.items()
)

#: Alias names: the learning algorithm each one trains (its ``deploy`` option aside).
ALIASES: dict[str, str] = {v.name: v.name.rsplit("-", 1)[0] for v in _TABLE if "deploy" in v.options}

#: Variants by registry name.
VARIANTS: dict[str, Variant] = {v.name: v for v in _TABLE}


def register_variants() -> None:
    """Register every row of the table (idempotent)."""
    for v in _TABLE:
        register_agent(
            v.name,
            ENTRY_POINT,
            defaults={"algo": v.name, **v.options},
            description=v.description,
            constrained=v.constrained,
            lambda_in_reward_units=v.lambda_in_reward_units,
            # make_grpo_agent builds the language-model agent on a text task, which deploys its
            # last iterate only (the remedies keep snapshots of control policies).
            acts_on_text=v.options.get("deploy", "last") == "last",
            alias_of=ALIASES.get(v.name),
        )
