"""KL-Cov (arXiv:2505.22617): an unclipped policy gradient with a KL penalty on the tokens of
highest covariance.

The top max(1, floor(kl_cov_ratio * N_valid)) valid tokens by centred covariance
cov_t = (A_t - mean A)(lp_t - mean lp) get  -A r + kl_coef * |lp_new - lp_old|;
all other valid tokens get  -A r  (no clipping). Metrics: kl_cov_frac, ppo_kl, ppo_kl_abs.
The means and the top-k are those of the micro-batch in hand (as in the paper and verl), so
unlike the other losses the selection depends on how a mini-batch is cut.
"""

import torch

from ascent.algos.losses.common import clean, masked
from ascent.algos.losses.covariance import centred_covariance
from ascent.algos.masking import masked_mean
from ascent.algos.types import PolicyLossInputs, TokenLoss


def kl_cov(
    inputs: PolicyLossInputs, *, kl_cov_ratio: float = 2e-4, kl_coef: float = 1.0
) -> TokenLoss:
    """Per-token KL-Cov loss."""
    x = clean(inputs)
    loss = -x.advantages * x.ratio
    abs_log_ratio = x.log_ratio.abs()

    num_valid = int(x.mask.sum())
    penalised = torch.zeros(x.mask.numel(), dtype=torch.bool, device=x.mask.device)
    if num_valid > 0:
        covariance = torch.where(x.mask, centred_covariance(x), -torch.inf).flatten()
        count = min(max(int(num_valid * kl_cov_ratio), 1), num_valid)
        top = torch.topk(covariance, count).indices
        penalised[top] = True
    penalised = penalised.view_as(x.mask)

    loss = torch.where(penalised, loss + kl_coef * abs_log_ratio, loss)
    metrics = {
        "kl_cov_frac": x.fraction(penalised),
        "ppo_kl": x.ppo_kl(),
        "ppo_kl_abs": masked_mean(abs_log_ratio.detach(), x.mask),
    }
    return TokenLoss(masked(loss, x.mask), metrics)
