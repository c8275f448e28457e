"""The token covariance that Clip-Cov and KL-Cov select on (arXiv:2505.22617)."""

from torch import Tensor

from ascent.algos.losses.common import CleanInputs
from ascent.algos.masking import masked_mean


def centred_covariance(x: CleanInputs) -> Tensor:
    """(A_t - mean A)(lp_t - mean lp) per token, means over valid tokens; detached, (B, T).

    Tokens where it is large are those whose probability rises with their advantage, the
    ones that drive the entropy collapse these losses aim to prevent.
    """
    log_probs = x.log_probs.detach()
    advantage_dev = x.advantages - masked_mean(x.advantages, x.mask)
    return advantage_dev * (log_probs - masked_mean(log_probs, x.mask))
