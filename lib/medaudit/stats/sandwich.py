"""Cluster-robust (sandwich) covariance of a conditional logit's estimate.

07's cue regression pools the three cultures' variants of a cue: each
question (the matched set) holds the reference answer and three answers
under the cue. statsmodels' ``ConditionalLogit`` treats those answers as
independent given the question; where the question's variants share more
than the question effect (a cue-by-question effect common to the three
cultures, as the same cue phrase is in all three), its model-based SE is too
small. The sandwich treats each matched set as a cluster instead:

    V = B · (Σ_g s_g s_gᵀ) · B · G / (G − 1),   B = (−H)⁻¹,

with s_g the score of matched set g at the estimate, H the Hessian of the
conditional log-likelihood and G the number of informative matched sets
(statsmodels drops the sets whose outcome does not vary: their score is 0);
intervals and p then use a t on G − 1 degrees of freedom (few clusters).
With two conditions and one answer each (a matched pair) the sandwich is the
model-based variance times G/(G − 1), G being the discordant pairs
(``tests/test_sandwich.py`` checks it by hand), so nothing is lost where the
model is right. statsmodels 0.15 has no cluster covariance for
``ConditionalLogit``; ``score_grp`` and ``hessian`` are its own.
"""

from __future__ import annotations

import numpy as np


def conditional_logit_cluster_cov(model, params) -> tuple[np.ndarray, int]:
    """(covariance of ``params``, G) for a fitted statsmodels
    ``ConditionalLogit`` ``model``, clustered by its matched sets (CR1)."""
    params = np.asarray(params, dtype=float)
    n = int(model._n_groups)
    if n < 2:
        raise ValueError(f"a clustered covariance needs two informative matched sets or more, not {n}")
    scores = np.array([np.atleast_1d(model.score_grp(g, params)) for g in range(n)])
    bread = np.linalg.inv(-np.atleast_2d(model.hessian(params)))
    return bread @ (scores.T @ scores) @ bread * n / (n - 1), n
