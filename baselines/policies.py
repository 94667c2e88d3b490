"""An SB3 actor-critic policy with a multi-head cost critic.

``CostActorCriticPolicy`` is SB3's ``ActorCriticPolicy`` (SB3 2.9.2) plus
``cost_value_net``: an MLP on the critic's features with one output per constraint,
``V_c(s) = (V_c1(s), ..., V_cK(s))``. It has its own hidden layers, so that the cost
regression (fuel costs count in tens) does not pull on the reward critic's features.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import create_mlp
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

__all__ = ["CostActorCriticPolicy"]


class CostActorCriticPolicy(ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` with a cost critic ``V_c: S -> R^K``.

    Extra keywords (all other keywords are SB3's):
        n_costs: K, the number of constraints (outputs of the cost critic).
        cost_net_arch: hidden sizes of the cost critic; default: the value net's.
    """

    def __init__(self, *args: Any, n_costs: int = 1, cost_net_arch: list[int] | None = None, **kwargs: Any):
        if n_costs < 1:
            raise ValueError(f"n_costs={n_costs} must be >= 1 (one cost critic head per constraint)")
        # Read by _build(), which SB3's __init__ calls.
        self.n_costs = int(n_costs)
        self.cost_net_arch = None if cost_net_arch is None else list(cost_net_arch)
        if kwargs.get("optimizer_class", th.optim.Adam) is th.optim.Adam and kwargs.get("optimizer_kwargs") is None:
            # SB3's Adam (eps 1e-5), updating all parameters in one multi-tensor pass: the
            # same arithmetic as the per-tensor loop, without a dozen small ops per tensor.
            kwargs["optimizer_kwargs"] = {"eps": 1e-5, "foreach": True}
        super().__init__(*args, **kwargs)

    def _build(self, lr_schedule: Schedule) -> None:
        # Built before SB3's _build, which creates the optimizer over self.parameters():
        # the cost critic then trains with the same optimizer (saved as "policy.optimizer").
        arch = self.cost_net_arch
        if arch is None:
            arch = list(self.net_arch["vf"]) if isinstance(self.net_arch, dict) else list(self.net_arch)
        self.cost_value_net = nn.Sequential(*create_mlp(self.features_dim, self.n_costs, arch, self.activation_fn))
        if self.ortho_init:
            # SB3's gains: sqrt(2) for hidden layers, 1 for a value output.
            layers = [m for m in self.cost_value_net if isinstance(m, nn.Linear)]
            for layer in layers[:-1]:
                self.init_weights(layer, gain=float(np.sqrt(2)))
            self.init_weights(layers[-1], gain=1.0)
        super()._build(lr_schedule)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(n_costs=self.n_costs, cost_net_arch=self.cost_net_arch)
        return data

    def predict_cost_values(self, obs: PyTorchObs) -> th.Tensor:
        """``V_c(s)``, shape ``(B, K)``, on the critic's features."""
        features = super(ActorCriticPolicy, self).extract_features(obs, self.vf_features_extractor)
        return self.cost_value_net(features)

    def _latents(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Actor latent, critic latent and the critic's features, from one feature pass."""
        features = self.extract_features(obs)
        if self.share_features_extractor:
            latent_pi, latent_vf = self.mlp_extractor(features)
            return latent_pi, latent_vf, features  # type: ignore[return-value]
        pi_features, vf_features = features
        return self.mlp_extractor.forward_actor(pi_features), self.mlp_extractor.forward_critic(vf_features), vf_features

    def evaluate_actions_with_costs(
        self, obs: PyTorchObs, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor | None]:
        """SB3's ``evaluate_actions`` plus ``V_c``: ``(values, cost_values, log_prob, entropy)``."""
        latent_pi, latent_vf, vf_features = self._latents(obs)
        distribution = self._get_action_dist_from_latent(latent_pi)
        return (
            self.value_net(latent_vf),
            self.cost_value_net(vf_features),
            distribution.log_prob(actions),
            distribution.entropy(),
        )
