"""Paired comparisons over seeds: the mean difference, its 95% Student t interval and two-sided p-value, and whether
the interval shows the difference (excludes 0).

Each seed pairs two results that share everything the seed decides (the labelled subset, the initialisation), so the
differences are what vary; with n seeds the interval is mean ± t(0.975, n - 1) · sd / √n. The t distribution is
computed here (its CDF through the regularised incomplete beta function), so the package needs no SciPy.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

# The names meant for use outside the package (study/, tools/ and users)
__all__ = [
    "PairedDifference", "describe_difference", "holm_adjusted", "paired_difference", "paired_t_power",
    "seeds_for_power", "student_t_two_sided_p",
]

MOST_SEEDS = 1000  # seeds_for_power gives up beyond this
NO_SPREAD = 1e-9  # paired differences whose SD is below this share of their size are taken as all equal
PLANNED_POWER = 0.8  # the power a table's "N seeds for power 0.8" plans for, at level 0.05


def regularised_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 <= x <= 1 and a, b > 0, by its continued fraction (modified Lentz), which converges quickly
    for x < (a + 1) / (a + b + 2); above that, by the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)."""
    if x <= 0.0 or x >= 1.0:
        return max(0.0, min(1.0, x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - regularised_incomplete_beta(1.0 - x, b, a)
    tiny, eps = 1e-300, 1e-15
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        # The even and the odd step of the fraction's m-th pair of terms.
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return math.exp(log_front) * fraction / a


def student_t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for T with ``df`` degrees of freedom."""
    return regularised_incomplete_beta(df / (df + t * t), df / 2, 0.5)


def student_t_quantile(probability: float, df: float) -> float:
    """The t with P(T <= t) = ``probability`` (>= 0.5), by bisection on the two-sided p-value."""
    if not 0.5 <= probability < 1.0:
        raise ValueError(f"probability {probability} must lie in [0.5, 1)")
    low, high = 0.0, 1.0
    while student_t_two_sided_p(high, df) > 2 * (1 - probability):
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_two_sided_p(middle, df) > 2 * (1 - probability) else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class PairedDifference:
    """``better`` - ``worse`` over n paired seeds, in the units of the values given."""

    mean: float
    sd: float  # of the differences
    n: int
    low: float  # the 95% interval of the mean difference (equal to the mean where n < 2)
    high: float
    p_value: Optional[float]  # two-sided, against no difference; None where it cannot be computed (n < 2, sd = 0)

    @property
    def shown(self) -> bool:
        """The interval excludes 0 (and there are at least two seeds with some spread to make one)."""
        return self.n >= 2 and self.p_value is not None and (self.low > 0 or self.high < 0)

    def planned_seeds(self) -> Optional[int]:
        """The seeds a new experiment would plan to find this mean difference, were it the truth with this spread,
        with power ``PLANNED_POWER`` in the two-sided paired t-test at 5% (``seeds_for_power``); None where there is
        no spread or no difference to plan for, or beyond ``MOST_SEEDS``. Not the chance that more seeds of this
        experiment would show it: that is about half, even were this mean true."""
        if self.sd == 0 or self.mean == 0:
            return None
        return seeds_for_power(abs(self.mean), self.sd, power=PLANNED_POWER)


def interval_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    return student_t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)


def paired_difference(better: Sequence[float], worse: Sequence[float], scale: float = 1.0) -> PairedDifference:
    """The paired difference of two results per seed (``scale`` multiplies them first: 100 for points)."""
    if len(better) != len(worse) or not better:
        raise ValueError(f"paired results need as many values on each side, at least one: {len(better)}, "
                         f"{len(worse)}")
    differences = [scale * (b - w) for b, w in zip(better, worse, strict=True)]
    n, mean = len(differences), statistics.fmean(differences)
    if n < 2:
        return PairedDifference(mean, 0.0, n, mean, mean, None)
    sd = statistics.stdev(differences)
    # Every seed agrees (to rounding: stepped accuracies differ by the same count of images on every seed): no spread
    # to test against, so no t-test and no interval, and no place in a Holm family
    if sd <= NO_SPREAD * max(1.0, *map(abs, differences)):
        return PairedDifference(mean, 0.0, n, mean, mean, None)
    half = interval_half_width(sd, n)
    p_value = student_t_two_sided_p(mean / (sd / math.sqrt(n)), n - 1)
    return PairedDifference(mean, sd, n, mean - half, mean + half, p_value)


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def paired_t_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """The probability that the two-sided paired t-test at level ``alpha`` over ``n`` seeds finds a true mean
    difference ``effect`` whose paired differences spread with ``sd``: the noncentral t's mass beyond the critical
    values, integrated over the chi distribution of the sample spread (Simpson's rule; error below 1e-6)."""
    if n < 2:
        raise ValueError(f"a paired t-test needs at least 2 seeds, not {n}")
    df = n - 1
    critical = student_t_quantile(1 - alpha / 2, df)
    shift = effect * math.sqrt(n) / sd  # the noncentrality
    # s = sqrt(chi-square(df)): its density, and P(T > c or T < -c | s) with T = (Z + shift) / (s / sqrt(df)).
    log_norm = (df / 2 - 1) * math.log(2) + math.lgamma(df / 2)

    def integrand(s: float) -> float:
        if s <= 0:
            return 0.0
        density = math.exp((df - 1) * math.log(s) - s * s / 2 - log_norm)
        bound = critical * s / math.sqrt(df)
        return density * (normal_cdf(shift - bound) + normal_cdf(-shift - bound))

    top, steps = math.sqrt(df) + 12.0, 4000
    width = top / steps
    total = integrand(0.0) + integrand(top)
    total += sum((4 if i % 2 else 2) * integrand(i * width) for i in range(1, steps))
    return min(1.0, total * width / 3)


def seeds_for_power(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> Optional[int]:
    """The fewest seeds (at least 2) at which the two-sided paired t-test at level ``alpha`` finds a true difference
    ``effect`` of spread ``sd`` with probability ``power``; None beyond ``MOST_SEEDS``."""
    if paired_t_power(effect, sd, MOST_SEEDS, alpha) < power:
        return None
    low, high = 1, MOST_SEEDS  # the power grows with the seeds: low falls short (or is no test), high reaches it
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if paired_t_power(effect, sd, middle, alpha) < power else (low, middle)
    return high


def describe_difference(difference: PairedDifference, claimed: bool = False) -> str:
    """One table cell: "+3.2 [+1.0, +5.4], shown (p 0.012)" or "+2.2 [-1.3, +5.7], not shown (p 0.18; power 0.8
    needs 12 seeds at this mean and SD)": the seeds a new experiment would plan for this mean (``planned_seeds``).
    Where a claim says the difference is positive (``claimed``), one shown below 0 is "the opposite shown"."""
    said = f"{difference.mean:+.1f}"
    if difference.n < 2:
        return f"{said}, one seed: no interval"
    if difference.sd == 0 and difference.mean == 0:  # e.g. two deterministic readings agreeing on every seed
        return f"{said} on every seed: no difference, no interval"
    if difference.sd == 0:
        return f"{said} on every seed: no spread, no t-test"
    said += f" [{difference.low:+.1f}, {difference.high:+.1f}]"
    p = "" if difference.p_value is None else f"p {difference.p_value:.2g}"
    if difference.shown:
        return f"{said}, {'the opposite ' if claimed and difference.mean < 0 else ''}shown ({p})"
    seeds = difference.planned_seeds()
    plan = (f"power {PLANNED_POWER:g} needs {seeds} seeds at this mean and SD" if seeds
            else f"power {PLANNED_POWER:g} needs more than {MOST_SEEDS} seeds at this mean and SD")
    return f"{said}, not shown ({'; '.join(part for part in (p, plan) if part)})"


def holm_adjusted(p_values: Sequence[Optional[float]]) -> list[Optional[float]]:
    """Holm's step-down adjustment of a family of two-sided p-values, in their order: the i-th smallest of m becomes
    the largest of (m - j + 1) p_(j) over j <= i, at most 1. A finding stays shown at level 5% across the family
    where its adjusted p-value is below 0.05. Comparisons without a p-value (None) are left out of m and stay None."""
    ordered = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    adjusted: list[Optional[float]] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p))
        adjusted[index] = running
    return adjusted
