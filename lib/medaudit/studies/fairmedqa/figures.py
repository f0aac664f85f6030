"""FairMedQA's figures.

Seed 004 §5.2 "Cross-Model Analysis of Bias in LLMs" ("Figures 3 and 4
illustrate the diagnostic accuracy, counterfactual fairness rate, and
accuracy disparity": :func:`accuracy_plot`, :func:`fairness_plot`), A.3
(Fig. 5, the bias-triggering rate per round: :func:`trigger_plot`; Fig. 6,
the Validation-Agent's accuracy: :func:`validator_accuracy_plot`), seed
001's Fig. 7 (answer distribution per pair: :func:`answer_distribution_plot`)
and the mitigation arms' change in AD against change in accuracy
(:func:`arm_plot`).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from medaudit.studies.fairmedqa.config import FairMedQAConfig


def arm_plot(bias: pd.DataFrame):
    """Change in bias against change in accuracy, one point per arm and
    attribute: ΔAcc (points) on x, ΔAD (points; below 0: a smaller accuracy
    gap between the pair's groups) on y; the point's area grows with the
    arm's output tokens per answer (:func:`medaudit.report.plots.arm_tradeoff`)."""
    from medaudit.report import plots

    if bias.empty:
        return plots.empty("no mitigation arm in this run")
    return plots.arm_tradeoff(bias, "ΔAcc", "ΔAD", "new", "attribute",
                              "Δ accuracy vs the plain prompt (points)", "Δ accuracy difference AD (points)",
                              "Mitigation arms: bias against accuracy")


def validator_accuracy_plot(acc: pd.DataFrame, gaps: pd.DataFrame):
    """Seed 001 Fig. 6: (a) the Validation-Agent's accuracy per text by
    Generation-Agent, (b) the accuracy gap per counterfactual pair. A
    placeholder that says why when there is no agent output, or no text the
    Validation-Agent answered (every accuracy NaN)."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt
    import seaborn as sns

    if acc.empty:
        return plots.empty("no agent rounds in this run")
    acc = acc[acc["accuracy"].notna()]                 # a text with no scored variant has no accuracy to draw
    gaps = gaps[gaps["gap"].notna()] if len(gaps) else gaps
    if acc.empty:
        return plots.empty("no adversarial variant the Validation-Agent answered\n"
                           "in this run: no accuracy to draw")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    sns.barplot(acc, x="condition", y="accuracy", hue="generator", ax=axes[0])
    axes[0].set_ylim(0, 100)
    axes[0].set_ylabel("Validation-Agent accuracy (%)")
    axes[0].set_title("(a) accuracy by Generation-Agent", fontsize=10)
    if len(gaps):
        sns.barplot(gaps, x="pair", y="gap", hue="generator", ax=axes[1])
    else:
        axes[1].text(0.5, 0.5, "no counterfactual pair has validator\nanswers under both members",
                     ha="center", va="center", transform=axes[1].transAxes, fontsize=9, color="#555555")
    axes[1].axhline(0, color="black", linewidth=0.8)
    axes[1].set_ylabel("accuracy gap (pp, first − second)")
    axes[1].set_title("(b) accuracy gap per counterfactual pair", fontsize=10)
    for ax in axes:
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=25)
    fig.tight_layout()
    return fig


def accuracy_plot(acc: pd.DataFrame, config: FairMedQAConfig):
    """Accuracy (%) per model and condition (the shape of seed 001 Fig. 3)."""
    from medaudit.report import plots  # noqa: F401
    import matplotlib.pyplot as plt
    import seaborn as sns

    order = [c for c in config.conditions() if c in set(acc["condition"])]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(order), 3.6))
    sns.barplot(acc, x="condition", y="accuracy", hue="model", order=order, ax=ax)
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (% of parsed answers)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=30)
    ax.set_title("Accuracy on original, neutralised and adversarial vignettes")
    fig.tight_layout()
    return fig


def fairness_plot(pairs_: pd.DataFrame):
    """CFR and AD per model and counterfactual pair (seed 001 Fig. 4); one
    legend of the models below both panels, off the bars."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt
    import seaborn as sns

    if not len(pairs_):
        return plots.empty("no counterfactual pair with answers in this run")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), layout="constrained")
    for ax, metric, lim in zip(axes, ("CFR", "AD"), ((0, 1), (0, 1))):
        sns.barplot(pairs_, x="pair", y=metric, hue="model", ax=ax)
        ax.set_ylim(*lim)
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=25)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes:
        if ax.get_legend():
            ax.get_legend().remove()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), fontsize=8, frameon=False)
    axes[0].set_title("Counterfactual fairness rate (higher: fairer)")
    axes[1].set_title("Accuracy disparity (lower: fairer)")
    return fig


def answer_distribution_plot(pairs_: pd.DataFrame):
    """Seed 001 Fig. 7: per pair and model, the share of vignettes (parsed
    under both members) answered correctly under both, only under the first,
    only under the second, and under neither ("both correct/incorrect means
    no bias triggered").

    The panels share one y-axis: one row per model of any pair, in the
    same place in every panel, each bar drawn at its own model's row (issue
    50: models answer different pairs — the embedded model only the
    neutralisation check — and a panel that labelled its own rows put its
    labels on the other panels' bars). A model that did not answer a pair
    says so in its row; each bar ends with its n; the legend stands below
    the panels, off the bars."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    parts = [("n11", "both correct", "#4c9a5f"), ("mcnemar_b", "only first correct", "#e0a030"),
             ("mcnemar_c", "only second correct", "#c05050"), ("n00", "both incorrect", "#8a8a8a")]
    if not len(pairs_):
        return plots.empty("no pair with answers under both members in this run")
    names = list(dict.fromkeys(pairs_["pair"]))
    models = list(dict.fromkeys(pairs_["model"]))
    rows = {m: len(models) - 1 - i for i, m in enumerate(models)}        # the first model at the top
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names), 1.5 + 0.4 * len(models)),
                             squeeze=False, sharey=True, layout="constrained")
    for ax, name in zip(axes[0], names):
        g = pairs_[pairs_["pair"] == name].drop_duplicates("model").set_index("model")
        y = np.array([rows[m] for m in g.index], float)
        n = g["n"].replace(0, np.nan)
        left = np.zeros(len(g))
        for col, label, colour in parts:
            share = (100 * g[col] / n).fillna(0).to_numpy(float)
            ax.barh(y, share, left=left, color=colour, label=label)
            left += share
        for m, yi in rows.items():
            if m not in g.index:
                ax.text(50, yi, "not answered", ha="center", va="center", fontsize=7, color="#555555")
            elif not g.loc[m, "n"]:
                ax.text(50, yi, "n = 0: no vignette parsed under both", ha="center", va="center", fontsize=7,
                        color="#555555")
            else:
                ax.text(99, yi, f"n={int(g.loc[m, 'n'])}", ha="right", va="center", fontsize=6, color="white")
        ax.set_xlim(0, 100)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("% of vignettes")
    axes[0][0].set_yticks(list(rows.values()), list(rows))
    axes[0][0].set_ylim(-0.6, len(models) - 0.4)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(parts), fontsize=7, frameon=False)
    return fig


TRIGGER_LABELS = {"direction": "% of variants that moved the validator's correctness the attacked way",
                  "change": "% of variants that changed the answer"}


def trigger_plot(rates: pd.DataFrame, rule: str = "direction"):
    """Seed 001 Fig. 5: % of variants that triggered the validator's bias,
    stacked by the round in which they first did. The axis names the success
    rule in force (params/fairmedqa.yaml ``success``, see round_success): A.3's
    "does not align with the baseline" is ``change``."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if rates.empty:                      # no agent loop in this run (02 wrote no variants)
        return plots.empty("no agent rounds in this run")
    w = rates.pivot_table(index="condition", columns="round", values="rate", sort=False)
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(w), 3.4))
    bottom = np.zeros(len(w))
    for r in w.columns:
        ax.bar(range(len(w)), w[r].to_numpy(), bottom=bottom, label=f"round {r}")
        bottom += np.nan_to_num(w[r].to_numpy())
    n = (rates.groupby("condition", sort=False)["variants"].max().reindex(w.index)
         if "variants" in rates else pd.Series(np.nan, index=w.index))
    ax.set_xticks(range(len(w)), [f"{c} (n={int(k)})" if pd.notna(k) else c for c, k in n.items()],
                  rotation=25, ha="right")
    ax.set_ylabel(TRIGGER_LABELS[rule], fontsize=8)
    ax.set_ylim(0, 100)
    if not np.nansum(w.to_numpy(float)):       # all bars of height 0: say so rather than show a blank plot
        ax.text(0.5, 0.5, "no variant triggered the bias in any round", ha="center", va="center",
                transform=ax.transAxes, fontsize=9, color="#555555")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title("Bias-triggering rate per round")
    fig.tight_layout()
    return fig
