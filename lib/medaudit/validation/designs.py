"""The worlds the coverage simulation (:mod:`medaudit.validation.coverage`) draws its data sets
from: the symmetric settings (a logit with question effects u ~ N(0, SIGMA_U²) and cue-by-question
effects v ~ N(0, SIGMA_V²), a condition shifting every question by β), the paired, gap, culture,
option and factorial layouts the notebooks' tables read, and the designs identity bias makes
(:class:`Design`, :data:`DESIGNS`: one-way changes, ceiling accuracy, few strong flippers, unequal
rows per question, a cue effect the cultures share), each with the truth an interval must cover.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.special import expit


SIGMA_U, SIGMA_V = 1.0, 0.5


def truth(mu: float, beta: float = 0.0) -> tuple[float, float]:
    """(E expit(μ + Z), E expit(μ + β + Z) − E expit(μ + Z)), Z ~ N(0, σ_u² + σ_v²)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    s = np.sqrt(SIGMA_U ** 2 + SIGMA_V ** 2)
    w = w / w.sum()
    pa, pb = float((w * expit(mu + s * x)).sum()), float((w * expit(mu + beta + s * x)).sum())
    return pa, pb - pa


def simulate(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """(y_a, y_b, clusters): n·k rows, the k answers of a question adjacent."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    pa = expit(mu + u + rng.normal(0, SIGMA_V, (n, 1)))
    pb = expit(mu + beta + u + rng.normal(0, SIGMA_V, (n, 1)))
    ya = (rng.random((n, k)) < pa).astype(float).ravel()
    yb = (rng.random((n, k)) < pb).astype(float).ravel()
    return ya, yb, np.repeat(np.arange(n), k)


def simulate_gap(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """A change in a paired gap (08's Δgap, 07's and 03's change of a cue's
    effect under an arm): four answers per question and sample, the plain
    prompt under a and b (b shifted by β) and the arm under a and b (no
    shift); y_a = the plain gap a − b, y_b = the arm's, each in [−1, 1], so
    mean(y_b − y_a) estimates the same Δ as :func:`simulate`."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    y = [(rng.random((n, k)) < expit(mu + s + u + rng.normal(0, SIGMA_V, (n, 1)))).astype(float).ravel()
         for s in (0.0, beta, 0.0, 0.0)]
    return y[0] - y[1], y[2] - y[3], np.repeat(np.arange(n), k)


def simulate_cultures(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """07's design: per question one answer under the reference and one
    under each of three cultures' variants (each shifted by β). Returns the
    Δ Avg rows (y_a: the reference repeated, y_b: the three variants,
    clusters: the question), as :func:`medaudit.studies.cultural.delta_avg_errors`
    builds them; ``k`` is not used (one answer per question and condition)."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    y = (rng.random((n, 4)) < expit(mu + np.r_[0.0, beta, beta, beta] + u
                                     + rng.normal(0, SIGMA_V, (n, 4)))).astype(float)
    return np.tile(y[:, 0], 3), y[:, 1:].T.ravel(), np.tile(np.arange(n), 3)


@functools.lru_cache(maxsize=None)
def pair_truth(mu: float, beta: float) -> dict:
    """The population rates of a question's pair of answers (a, b) under
    :func:`simulate`, by Monte Carlo over (u, v_a, v_b) (2·10⁶ draws of a
    fixed seed; error below 0.001): ``flip`` P(a ≠ b), ``harmful``
    P(b wrong | a right) (eq. 4 of seed 003), ``log_or`` the conditional
    log odds ratio of b against a, log P(a wrong, b right) / P(a right,
    b wrong) (what a conditional logit of two conditions estimates: c/b)."""
    rng = np.random.default_rng(20261127)
    u = rng.normal(0, SIGMA_U, 2_000_000)
    pa = expit(mu + u + rng.normal(0, SIGMA_V, u.size))
    pb = expit(mu + beta + u + rng.normal(0, SIGMA_V, u.size))
    only_a, only_b = float((pa * (1 - pb)).mean()), float((pb * (1 - pa)).mean())
    return {"flip": only_a + only_b, "harmful": only_a / float(pa.mean()), "log_or": float(np.log(only_b / only_a))}


def simulate_options(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """Answers among four options (07's flips, Stuart–Maxwell): question i
    pulls towards its right option (0) by μ + u_i and towards each wrong one
    by w_io ~ N(0, σ_u²); a condition adds v ~ N(0, σ_v²) per option and b
    shifts the right option by β. Returns (option under a, option under b,
    clusters), one answer per question and condition per sample."""
    eta = np.column_stack([mu + rng.normal(0, SIGMA_U, n), rng.normal(0, SIGMA_U, (n, 3))])

    def draw(shift):
        z = eta + rng.normal(0, SIGMA_V, (n, 4)) + np.r_[shift, 0.0, 0.0, 0.0]
        p = np.exp(z - z.max(axis=1, keepdims=True))
        cum = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
        return (rng.random((n, k, 1)) > cum[:, None, :3]).sum(axis=2).astype(float).ravel()

    return draw(0.0), draw(beta), np.repeat(np.arange(n), k)


FACTORIAL = ("base", "+homo", "+Cat", "+homo+Cat")


def simulate_factorial(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """04's non-additivity design: each question answered under base, +homo,
    +Cat and +homo+Cat (:data:`FACTORIAL`), logit μ + u_i + v_ic, β added
    to both single cues and twice to the joint one (additive: no
    interaction). Returns (answers: rows × 4, None, clusters)."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    eta = mu + np.r_[0.0, beta, beta, 2 * beta] + u + rng.normal(0, SIGMA_V, (n, 4))
    y = (rng.random((n, k, 4)) < expit(eta)[:, None, :]).astype(float).reshape(n * k, 4)
    return y, None, np.repeat(np.arange(n), k)


# --- the designs identity bias makes ------------------------------------------
# Beyond the symmetric settings: a cue that only costs (down-flips, never
# up), accuracy near the ceiling (most questions always right), a few strong
# flippers among many unchanged questions, unequal rows per question, and the
# three cultures' variants sharing one cue effect (07).

CEIL_HI, CEIL_LO = (40.0, 0.4), (2.0, 1.5)     # Beta components: questions near 1, and the rest


def ceiling_accuracy(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    """Per-question accuracy from a Beta mixture with mean ``mean``: most
    questions near 1 (Beta(40, 0.4), mean 0.990), the rest Beta(2, 1.5)
    (mean 0.571); the share near 1 is set for the mean (0.79 for 0.90, 0.95
    for 0.97)."""
    m_hi, m_lo = CEIL_HI[0] / sum(CEIL_HI), CEIL_LO[0] / sum(CEIL_LO)
    near_one = rng.random(n) < (mean - m_lo) / (m_hi - m_lo)
    return np.where(near_one, rng.beta(*CEIL_HI, n), rng.beta(*CEIL_LO, n))


@dataclass(frozen=True)
class Design:
    """A data-generating design beyond :data:`SETTINGS`: accuracy under a is
    ``base`` (``"logit"``: μ = 1.1 with :func:`simulate`'s question effects,
    0.72; a number: :func:`ceiling_accuracy` with that mean); b takes each of
    a's answers and turns a right one wrong with chance f (one way: never
    wrong to right), f the same for every question (``flippers`` None) or
    0.8 for a share of questions and 0 for the rest; ``drop`` the resulting
    fall in accuracy (points/100), the paired target −drop; ``drop`` 0
    draws b afresh from the same per-question accuracy (no change, both
    ways by chance). ``unequal``: with K > 1, each question gets a number of
    rows drawn from 1 … 2K − 1 (mean K)."""
    name: str
    base: object
    drop: float
    flippers: bool = False
    unequal: bool = False

    def accuracy(self) -> float:
        """The accuracy under condition a: 0.72 from :func:`truth` at μ = 1.1 for a logit
        base, else the base's number."""
        return truth(1.1)[0] if self.base == "logit" else float(self.base)

    def _questions(self, rng: np.random.Generator, n: int, k: int):
        """(per-question accuracy p, the rows' question g)."""
        ks = rng.integers(1, 2 * k, n) if (self.unequal and k > 1) else np.full(n, k)
        if self.base == "logit":
            p = expit(1.1 + rng.normal(0, SIGMA_U, n) + rng.normal(0, SIGMA_V, n))
        else:
            p = ceiling_accuracy(rng, n, float(self.base))
        return p, np.repeat(np.arange(n), ks)

    def _flip_chance(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Per question, the chance that b turns a right answer wrong."""
        acc = self.accuracy()
        return (np.where(rng.random(n) < self.drop / (0.8 * acc), 0.8, 0.0) if self.flippers
                else np.full(n, self.drop / acc))

    def _after(self, rng: np.random.Generator, ya: np.ndarray, p: np.ndarray, g: np.ndarray, f=None):
        """The answers under b given a's: drawn afresh from p (no change), else a's with a right answer
        turned wrong with chance f (one way; drawn here unless given)."""
        if self.drop == 0:
            return (rng.random(g.size) < p[g]).astype(float)
        f = self._flip_chance(rng, p.size) if f is None else f
        return ya * (rng.random(g.size) >= f[g])

    def simulate(self, rng: np.random.Generator, n: int, k: int):
        """(y_a, y_b, clusters), the rows of a question adjacent."""
        p, g = self._questions(rng, n, k)
        ya = (rng.random(g.size) < p[g]).astype(float)
        return ya, self._after(rng, ya, p, g), g

    def simulate_gap(self, rng: np.random.Generator, n: int, k: int):
        """A change in a paired gap (as :func:`simulate_gap`): the plain
        prompt's gap a − b under this design (b one way below a), the arm's
        gap with no change (b drawn afresh); each question's rows shared by
        the four answers. Δ = −drop, as :meth:`simulate`'s."""
        p, g = self._questions(rng, n, k)
        ya = (rng.random(g.size) < p[g]).astype(float)
        plain = ya - self._after(rng, ya, p, g)
        arm = (rng.random(g.size) < p[g]).astype(float) - (rng.random(g.size) < p[g]).astype(float)
        return plain, arm, g

    def simulate_cultures(self, rng: np.random.Generator, n: int, k: int):
        """07's design (as :func:`simulate_cultures`): one answer per question
        under the reference and under each of three cultures' variants, each
        variant drawn from the reference as b is from a (independently per
        variant). Δ Avg rows; ``k`` not used."""
        p, g = self._questions(rng, n, 1)
        f = self._flip_chance(rng, n)             # a question's flipper status is shared by its variants
        y0 = (rng.random(n) < p).astype(float)
        var = np.concatenate([self._after(rng, y0, p, g, f) for _ in range(3)])
        return np.tile(y0, 3), var, np.tile(np.arange(n), 3)

    def simulate_options(self, rng: np.random.Generator, n: int, k: int):
        """Answers among four options (as :func:`simulate_options`): the right
        option (0) with this design's per-question accuracy, a wrong one by
        per-question weights ~ Dirichlet(1, 1, 1); under b a's answer, a right
        one moved to a wrong option with chance f (one way), or drawn afresh
        (no change)."""
        p, g = self._questions(rng, n, k)
        f = self._flip_chance(rng, n)
        w = rng.dirichlet(np.ones(3), n)
        cum = np.cumsum(w, axis=1)

        def wrong():
            return 1.0 + (rng.random((g.size, 1)) > cum[g, :2]).sum(axis=1)

        a = np.where(rng.random(g.size) < p[g], 0.0, wrong())
        if self.drop == 0:
            return a, np.where(rng.random(g.size) < p[g], 0.0, wrong()), g
        return a, np.where((a == 0) & (rng.random(g.size) < f[g]), wrong(), a), g

    def pair_rates(self) -> tuple[float, float]:
        """(p_b, p_c) of one row per question, for exact enumeration: one way,
        P(right under a only) = drop, P(right under b only) = 0; with no
        change both are E p(1 − p) (Monte Carlo over the questions, fixed
        seed)."""
        if self.drop > 0:
            return self.drop, 0.0
        rng = np.random.default_rng(20261129)
        p = (expit(1.1 + rng.normal(0, np.hypot(SIGMA_U, SIGMA_V), 400_000)) if self.base == "logit"
             else ceiling_accuracy(rng, 400_000, float(self.base)))
        q = float((p * (1 - p)).mean())
        return q, q


DESIGNS = (
    Design("one way −4 (accuracy 0.72)", "logit", 0.04),
    Design("one way −10 (accuracy 0.72)", "logit", 0.10),
    Design("ceiling 0.97, one way −2", 0.97, 0.02),
    Design("ceiling 0.97, one way −5", 0.97, 0.05),
    Design("ceiling 0.97, one way −10", 0.97, 0.10),
    Design("ceiling 0.90, one way −5", 0.90, 0.05),
    Design("ceiling 0.97, few strong flippers −5", 0.97, 0.05, flippers=True),
    Design("ceiling 0.97, unequal rows, one way −10", 0.97, 0.10, unequal=True),
    Design("ceiling 0.97, no change", 0.97, 0.0),
    Design("ceiling 0.90, no change, unequal rows", 0.90, 0.0, unequal=True),
)


def simulate_cultures_shared(rng: np.random.Generator, n: int, k: int, mu: float, beta: float):
    """:func:`simulate_cultures` with the cue-by-question effect shared by
    the three cultures' variants (one v per question for the cue, as the
    same cue phrase is in all three; the reference its own): the variants are
    correlated given the question, which a conditional logit's model-based
    SE ignores (it covered 93.0–94.0 % at n = 50 on 200 data sets per setting
    where the clustered SE covered 95.0–98.5 %)."""
    u = rng.normal(0, SIGMA_U, (n, 1))
    v = np.column_stack([rng.normal(0, SIGMA_V, (n, 1)), np.repeat(rng.normal(0, SIGMA_V, (n, 1)), 3, axis=1)])
    y = (rng.random((n, 4)) < expit(mu + np.r_[0.0, beta, beta, beta] + u + v)).astype(float)
    return np.tile(y[:, 0], 3), y[:, 1:].T.ravel(), np.tile(np.arange(n), 3)
