"""MDP-GRPO's options beyond its advantage (arXiv 2606.06058): the asymmetric KL coefficient
and multi-temperature sampling within a group."""

from __future__ import annotations

import pytest
import torch

from constrained_grpo.agents.config import make_config
from constrained_grpo.agents.losses import kl_k3, policy_loss


def _batch() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    logp = torch.log(torch.rand(4, 3, generator=g) * 0.8 + 0.1)
    logp_old = logp.detach() + 0.05 * torch.randn(4, 3, generator=g)
    logp_ref = logp.detach() - 0.3 * torch.rand(4, 3, generator=g)
    adv = torch.tensor([1.5, -0.5, 0.0, -2.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    return logp, logp_old, logp_ref, adv, mask


def test_asymmetric_kl_weighs_negative_advantage_samples_by_kl_coef_neg() -> None:
    logp, logp_old, logp_ref, adv, mask = _batch()
    entropy = torch.zeros_like(logp)
    sym = policy_loss(logp, logp_old, adv, mask, entropy, logp_ref, kl_coef=0.01)
    same = policy_loss(logp, logp_old, adv, mask, entropy, logp_ref, kl_coef=0.01, kl_coef_neg=0.01)
    torch.testing.assert_close(same.loss, sym.loss)
    asym = policy_loss(logp, logp_old, adv, mask, entropy, logp_ref, kl_coef=0.01, kl_coef_neg=0.025)
    # Token aggregation by hand: sum_i beta_i sum_t kl_it over the 9 valid tokens.
    kl = kl_k3(logp, logp_ref) * mask
    beta = torch.tensor([0.01, 0.025, 0.01, 0.025])
    expected_kl_term = (beta[:, None] * kl).sum() / 9.0
    torch.testing.assert_close(asym.loss - asym.pg_loss, expected_kl_term)
    torch.testing.assert_close(asym.kl, sym.kl)  # the logged KL is the unweighted mean
    assert float(asym.loss) > float(sym.loss)


def test_kl_coef_neg_is_validated_and_builds_a_reference() -> None:
    with pytest.raises(ValueError, match="kl_coef_neg=-1"):
        make_config("standard", kl_coef_neg=-1.0)
    assert make_config("standard").kl_coef_neg is None


def test_kl_coef_neg_alone_keeps_a_reference_and_trains() -> None:
    """kl_coef 0 with kl_coef_neg > 0: the reference exists (else the KL term would vanish) and
    the generic update path runs (the linear fast path has one coefficient)."""
    import constrained_grpo

    agent = constrained_grpo.make_agent("cgrpo-mdp", "Grid/HazardFuel3x3-v0", seed=0, preset="quick", kl_coef_neg=0.05)
    records: list[dict] = []
    agent.learn(2_000, records.append)
    assert agent.trainer.reference is not None
    assert records[-1]["kl"] > 0.0


def test_multi_temperature_draws_each_row_at_its_temperature_and_reports_the_policys_logp() -> None:
    from constrained_grpo.agents.lm_base import sample_from_logits

    rows = 4000
    logits = torch.tensor([3.0, 0.0, 0.0]).repeat(rows, 1)
    temps = torch.tensor([0.05, 50.0]).repeat(rows // 2)
    token, logp = sample_from_logits(logits, 1.0, False, torch.Generator().manual_seed(0), temps)
    cold, hot = token[0::2], token[1::2]
    assert bool((cold == 0).all())  # T = 0.05: the argmax every time
    # T = 50: softmax([0.06, 0, 0]) gives token 0 with probability 0.347 (the policy, T = 1: 0.909).
    share = float((hot == 0).float().mean())
    assert 0.347 - 0.03 < share < 0.347 + 0.03
    policy_logp = torch.log_softmax(logits, dim=-1).gather(-1, token[:, None]).squeeze(-1)
    torch.testing.assert_close(logp, policy_logp)
    with pytest.raises(ValueError, match="3 sampling temperatures for 2 prompts"):
        from constrained_grpo.agents.lm_base import row_temperatures

        row_temperatures([1.0, 1.0, 1.0], 2)


def test_text_agent_samples_a_group_at_the_releases_temperatures() -> None:
    """lm.sample_temperatures on the text agent: sample i of every group is drawn at
    T[i mod 4]; the recorded log-probabilities are the policy's, so the first ratio is 1."""
    from constrained_grpo import make_agent

    agent = make_agent("cgrpo-mdp", "Math/ChainSum-v0", seed=0, preset="quick",
                       lm={"sample_temperatures": [0.1, 0.4, 0.7, 1.0]})
    calls: list[list[float] | None] = []
    generate = agent.policy.generate

    def recording(*args, **kwargs):
        calls.append(kwargs.get("sample_temperatures"))
        return generate(*args, **kwargs)

    agent.policy.generate = recording  # type: ignore[method-assign]
    batch = agent.adapter.collect(agent.policy, 2, 4)
    assert calls == [[0.1, 0.4, 0.7, 1.0] * 2]
    gen = batch.data.generation
    with torch.no_grad():
        logp, _ = agent.policy.completion_logprobs(gen.prompt_ids, gen.prompt_mask, gen.tokens, gen.mask)
    torch.testing.assert_close(logp * gen.mask, gen.logp * gen.mask, atol=1e-4, rtol=1e-4)
    records: list[dict] = []
    agent.learn(16, records.append)
    assert len(records) == 1 and records[0]["env_steps"] == 16
