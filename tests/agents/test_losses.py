"""Hand-worked tests of the policy-loss pieces."""

from __future__ import annotations

import math

import pytest
import torch

from constrained_grpo.agents.losses import (
    kl_k3,
    masked_mean,
    negative_advantage_veto,
    pg_loss_clipped,
    policy_loss,
)

# Two samples of two steps; logp_old = 0, so the ratios are exp(logp):
#   sample 0 (A = +1): ratios 1.5, 0.5      sample 1 (A = -1): ratios 1.1, 1.0
LOGP = torch.log(torch.tensor([[1.5, 0.5], [1.1, 1.0]], dtype=torch.float64))
OLD = torch.zeros(2, 2, dtype=torch.float64)
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)
MASK = torch.ones(2, 2, dtype=torch.bool)


def test_masked_mean_aggregations() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert masked_mean(values, mask, "token").item() == pytest.approx(7 / 3)  # (1 + 2 + 4) / 3
    assert masked_mean(values, mask, "sequence").item() == pytest.approx(2.75)  # mean(1.5, 4)
    assert masked_mean(values, mask, "sum").item() == pytest.approx(7 / 6)  # 7 / (N T)
    with pytest.raises(ValueError, match="token"):
        masked_mean(values, mask, "mean")


def test_clipped_surrogate_by_hand() -> None:
    # A=+1: min(1.5, 1.2) = 1.2, min(0.5, 0.8) = 0.5;  A=-1: min(-1.1, -1.1), min(-1, -1)
    loss, stats = pg_loss_clipped(LOGP, OLD, ADV, MASK, 0.2, 0.2)
    assert loss.item() == pytest.approx(-(1.2 + 0.5 - 1.1 - 1.0) / 4)
    assert stats["clip_frac"].item() == pytest.approx(0.25)  # only step (0, 0) is clipped


def test_asymmetric_clip_higher() -> None:
    # eps_high = 0.6 lets ratio 1.5 through for A > 0
    loss, _ = pg_loss_clipped(LOGP, OLD, ADV, MASK, 0.2, 0.6)
    assert loss.item() == pytest.approx(-(1.5 + 0.5 - 1.1 - 1.0) / 4)
    # eps_low bounds the downward ratio for A < 0: ratio 0.5 with A = -1, eps_low 0.2
    logp = torch.log(torch.tensor([[0.5]], dtype=torch.float64))
    loss, _ = pg_loss_clipped(logp, torch.zeros(1, 1, dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64),
                              torch.ones(1, 1, dtype=torch.bool), 0.2, 0.6)
    assert loss.item() == pytest.approx(0.8)  # -min(-0.5, -0.8)


def test_sequence_level_ratio_by_hand() -> None:
    # s0 = exp(mean(ln 1.5, ln 0.5)) = sqrt(0.75); s1 = sqrt(1.1); both inside [0.8, 1.2]
    loss, _ = pg_loss_clipped(LOGP, OLD, ADV, MASK, 0.2, 0.2, ratio_level="sequence")
    s0, s1 = math.sqrt(0.75), math.sqrt(1.1)
    assert loss.item() == pytest.approx(-(2 * s0 - 2 * s1) / 4)


def test_clipped_steps_carry_no_gradient() -> None:
    logp = LOGP.clone().requires_grad_(True)
    loss, _ = pg_loss_clipped(logp, OLD, ADV, MASK, 0.2, 0.2)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0  # A > 0, ratio 1.5 > 1.2: clipped
    # unclipped step: d(-r A / 4) / d logp = -r A / 4
    assert logp.grad[0, 1].item() == pytest.approx(-0.5 / 4)


def test_padding_is_ignored() -> None:
    mask = torch.tensor([[True, False], [True, True]])
    loss, _ = pg_loss_clipped(LOGP, OLD, ADV, mask, 0.2, 0.2)
    assert loss.item() == pytest.approx(-(1.2 - 1.1 - 1.0) / 3)


def test_negative_advantage_veto_masks_steps_after_first_outlier() -> None:
    ratio = torch.tensor([[1.0, 1.5, 1.0, 0.5], [1.0, 1.5, 1.0, 0.5], [0.7, 1.0, 1.0, 1.0]])
    adv = torch.tensor([-1.0, 1.0, -2.0])
    mask = torch.tensor([[True] * 4, [True] * 4, [True, True, True, False]])
    out = negative_advantage_veto(ratio, adv, mask, 0.2, 0.2)
    expected = torch.tensor(
        [
            [True, True, False, False],  # A < 0: first outlier at step 1, steps 2-3 dropped
            [True, True, True, True],  # A > 0: untouched
            [True, False, False, False],  # outlier at step 0; padding stays masked
        ]
    )
    assert torch.equal(out, expected)
    # asymmetric region: with eps_high = 0.6, ratio 1.5 is inside; 0.5 at step 3 is the first outlier
    out = negative_advantage_veto(ratio[:1], adv[:1], mask[:1], 0.2, 0.6)
    assert torch.equal(out, torch.tensor([[True, True, True, True]]))


def test_veto_in_the_loss() -> None:
    logp = torch.log(torch.tensor([[1.0, 1.5, 1.0]], dtype=torch.float64))
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    plain, _ = pg_loss_clipped(logp, old, adv, mask, 0.2, 0.2)
    vetoed, stats = pg_loss_clipped(logp, old, adv, mask, 0.2, 0.2, veto=True)
    assert plain.item() == pytest.approx((1.0 + 1.5 + 1.0) / 3)
    # step 2 (after the outlier) contributes 0 but still counts in the denominator
    assert vetoed.item() == pytest.approx((1.0 + 1.5 + 0.0) / 3)
    assert stats["veto_frac"].item() == pytest.approx(1 / 3)


def _veto_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Issue 16: 2 samples x 10 steps. Sample 0 (A = -1) leaves the region at step 0
    (ratio 1.5 > 1.2), so steps 1-9 are vetoed; sample 1 (A = +1) has ratios 1."""
    ratios = torch.ones(2, 10, dtype=torch.float64)
    ratios[0, 0] = 1.5
    logp = torch.log(ratios).requires_grad_(True)
    adv = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    return logp, torch.zeros(2, 10, dtype=torch.float64), adv, torch.ones(2, 10, dtype=torch.bool)


@pytest.mark.parametrize("agg", ["token", "sequence"])
def test_veto_drops_the_suffix_without_reweighting_the_kept_steps(agg: str) -> None:
    grads = {}
    for veto in (False, True):
        logp, old, adv, mask = _veto_case()
        loss, _ = pg_loss_clipped(logp, old, adv, mask, 0.2, 0.2, agg=agg, veto=veto)
        loss.backward()
        grads[veto] = logp.grad
    # Trigger step: A < 0 and r = 1.5 > 1.2, so min() takes the unclipped r A = -1.5; its
    # gradient -(r A) / 20 = 0.075 (token: 20 valid steps; sequence: / 10 per sample / 2
    # samples). Before the fix the veto shrank the denominator: 1.5 / 11 = 0.136 (token),
    # 1.5 / 1 / 2 = 0.75 (sequence).
    assert grads[True][0, 0].item() == pytest.approx(0.075)
    # An untouched step of the A > 0 sample: -(1 * 1) / 20 = -0.050 (was -1 / 11 = -0.091).
    assert grads[True][1, 3].item() == pytest.approx(-0.050)
    # Vetoed steps get no gradient; every kept step keeps exactly its unvetoed gradient.
    assert torch.all(grads[True][0, 1:] == 0.0)
    assert grads[False][0, 5].item() == pytest.approx(0.05)  # -(1 * -1) / 20
    kept = torch.ones(2, 10, dtype=torch.bool)
    kept[0, 1:] = False
    torch.testing.assert_close(grads[True][kept], grads[False][kept], rtol=0, atol=1e-15)


def test_veto_trigger_below_the_region_is_clipped() -> None:
    # A < 0 with r = 0.5 < 0.8: min(-0.5, -0.8) = -0.8 is the clipped term, so no gradient,
    # with or without the veto; the suffix is vetoed.
    logp = torch.log(torch.tensor([[0.5, 1.0, 1.0]], dtype=torch.float64)).requires_grad_(True)
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    loss, stats = pg_loss_clipped(logp, old, adv, torch.ones(1, 3, dtype=torch.bool), 0.2, 0.2, veto=True)
    loss.backward()
    assert loss.item() == pytest.approx(0.8 / 3)
    assert torch.all(logp.grad == 0.0)
    assert stats["veto_frac"].item() == pytest.approx(2 / 3)


def test_approx_kl_is_the_k3_estimate_of_kl_old_new() -> None:
    # r = 2 on every step: (r - 1) - ln r = 1 - ln 2 = 0.3069 (the form PPO-Lagrangian logs);
    # the old 1/r - 1 + ln r gave 0.1931.
    logp = torch.full((1, 3), math.log(2.0), dtype=torch.float64)
    _, stats = pg_loss_clipped(logp, torch.zeros(1, 3, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                               torch.ones(1, 3, dtype=torch.bool))
    assert stats["approx_kl"].item() == pytest.approx(1.0 - math.log(2.0))
    assert stats["approx_kl"].item() == pytest.approx(0.30685, abs=1e-5)
    # padding does not count: a masked step with a huge ratio changes nothing
    logp2 = torch.tensor([[math.log(2.0), 5.0]], dtype=torch.float64)
    _, stats2 = pg_loss_clipped(logp2, torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                                torch.tensor([[True, False]]))
    assert stats2["approx_kl"].item() == pytest.approx(1.0 - math.log(2.0))


def test_kl_k3_by_hand() -> None:
    # pi = 0.5, pi_ref = 0.25: d = ln(0.25 / 0.5) = -ln 2;  e^d - d - 1 = 0.5 + ln 2 - 1
    kl = kl_k3(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert kl.item() == pytest.approx(math.log(2) - 0.5)
    assert kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0


def test_policy_loss_combines_terms() -> None:
    entropy = torch.full((2, 2), 1.2, dtype=torch.float64)
    ref = LOGP - 0.1
    terms = policy_loss(LOGP, OLD, ADV, MASK, entropy, ref, kl_coef=0.5, entropy_coef=0.01)
    pg = -(1.2 + 0.5 - 1.1 - 1.0) / 4
    kl = math.exp(-0.1) + 0.1 - 1.0
    assert terms.pg_loss.item() == pytest.approx(pg)
    assert terms.kl.item() == pytest.approx(kl)
    assert terms.entropy.item() == pytest.approx(1.2)
    assert terms.loss.item() == pytest.approx(pg + 0.5 * kl - 0.01 * 1.2)
    no_ref = policy_loss(LOGP, OLD, ADV, MASK, entropy)
    assert no_ref.kl.item() == 0.0
    assert no_ref.loss.item() == pytest.approx(pg)


@pytest.mark.parametrize("agg", ["token", "sequence", "sum"])
@pytest.mark.parametrize("with_ref", [False, True])
def test_linear_categorical_grads_match_autograd(agg: str, with_ref: bool) -> None:
    """The closed-form gradient of the linear softmax policy equals autograd's on policy_loss.

    Padded [N, T] data (some steps masked) through nn.Linear + log_softmax + policy_loss,
    against the same valid steps flat; ratios spread over [0.5, 1.6] so the clip binds.
    """
    import numpy as np
    from torch import nn

    from constrained_grpo.agents.losses import linear_categorical_grads

    gen = torch.Generator().manual_seed(3)
    n, t, d, a = 5, 4, 6, 3
    layer = nn.Linear(d, a)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(a, d, generator=gen))
        layer.bias.copy_(torch.randn(a, generator=gen))
    obs = torch.randn(n, t, d, generator=gen)
    actions = torch.randint(0, a, (n, t), generator=gen)
    mask = torch.arange(t).expand(n, t) < torch.tensor([4, 1, 3, 2, 4]).unsqueeze(1)
    adv = torch.randn(n, generator=gen)
    with torch.no_grad():
        logp_true = torch.log_softmax(layer(obs), -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    logp_old = logp_true - torch.log(0.5 + 1.1 * torch.rand(n, t, generator=gen))
    logp_ref = logp_true + 0.3 * torch.randn(n, t, generator=gen) if with_ref else None
    kwargs = {"eps_low": 0.2, "eps_high": 0.28, "kl_coef": 0.1 if with_ref else 0.0, "entropy_coef": 0.05}

    logp_all = torch.log_softmax(layer(obs), -1)
    logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    terms = policy_loss(logp, logp_old, adv, mask, entropy, logp_ref, agg=agg, **kwargs)
    terms.loss.backward()

    flat = mask.reshape(-1)
    steps_of = mask.sum(1).repeat_interleave(mask.sum(1)).to(torch.float32)
    weight = {"token": torch.full_like(steps_of, 1.0 / float(flat.sum())),
              "sequence": 1.0 / (n * steps_of),
              "sum": torch.full_like(steps_of, 1.0 / (n * t))}[agg]

    def pick(v: torch.Tensor) -> np.ndarray:
        return v.reshape(n * t, *v.shape[2:])[flat].detach().numpy()

    grad_w, grad_b, stats = linear_categorical_grads(
        pick(obs), pick(actions), pick(logp_old), adv.repeat_interleave(mask.sum(1)).numpy(), weight.numpy(),
        layer.weight.detach().numpy(), layer.bias.detach().numpy(), None if logp_ref is None else pick(logp_ref),
        **kwargs,
    )
    np.testing.assert_allclose(grad_w, layer.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_b, layer.bias.grad.numpy(), rtol=1e-5, atol=1e-6)
    expected = [terms.loss, terms.pg_loss, terms.kl, terms.entropy, terms.clip_frac, terms.approx_kl]
    np.testing.assert_allclose(stats, [float(v.detach()) for v in expected], rtol=1e-5, atol=1e-6)
    assert 0.0 < stats[4] < 1.0  # some steps clipped, some not: both branches exercised


def test_matmul_pieces_equal_one_product() -> None:
    """Products above the single-thread size are split; the rows (and, within float32
    round-off, the split inner dimension) give the whole product."""
    import numpy as np

    from constrained_grpo.agents.losses import NUMPY_MATMUL_MAX, matmul

    rng = np.random.default_rng(0)
    tall = rng.random((NUMPY_MATMUL_MAX // 200 + 7, 50), dtype=np.float32)
    w = rng.random((50, 4), dtype=np.float32)
    np.testing.assert_array_equal(matmul(tall, w), tall @ w)
    wide = np.ascontiguousarray(tall.T[:4])
    np.testing.assert_allclose(matmul(wide, tall), wide @ tall, rtol=1e-5)
