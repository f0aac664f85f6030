"""Figures: each function returns a matplotlib Figure; :func:`save` writes it
as PNG and PDF under ``outputs/<profile>/figures/``."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from medaudit import atomic, paths
from medaudit.report import exhibits


def save(fig, name: str, profile: str, caption: str = "") -> str:
    """Write ``figures/<name>.png`` and ``.pdf``, and the caption (shown
    under the figure in the report) as ``figures/<name>.md``; in a notebook,
    show the saved PNG where it is made, under a caption naming it as the
    paper does (:func:`medaudit.report.exhibits.show_figure`); return the PNG's
    path relative to the compendium root (``outputs/<profile>/figures/<name>.png``).

    The three files are written atomically (:mod:`medaudit.atomic`): rendered
    to temporary files and renamed over the old ones only when all three
    succeeded; a figure that fails to render leaves the old files as they were."""
    folder = paths.written(profile, "figures")
    try:
        with atomic.atomic_paths([folder / f"{name}.{ext}" for ext in ("png", "pdf", "md")]) as (png, pdf, md):
            fig.savefig(png, dpi=130, bbox_inches="tight")
            fig.savefig(pdf, bbox_inches="tight")
            md.write_text(caption.strip() + "\n" if caption.strip() else "", encoding="utf-8")
    finally:
        plt.close(fig)
    final = paths.run_outputs(profile, "figures", f"{name}.png").relative_to(paths.project_root()).as_posix()
    exhibits.show_figure(folder / f"{name}.png", name, caption, final)
    # relative to the compendium root: a notebook cell that shows it reads the same on every checkout
    return final


def empty(message: str):
    """A small figure that says why there is nothing to draw (no agent
    rounds, no question scored), so a notebook saves and shows a figure
    either way, and the report says why it is blank."""
    fig, ax = plt.subplots(figsize=(4, 2))
    ax.text(0.5, 0.5, message, ha="center", va="center")
    ax.set_axis_off()
    return fig


def token_sizes(tokens: pd.Series, smallest: float = 20.0, largest: float = 300.0,
                unknown: float = 40.0) -> pd.Series:
    """Marker areas (points²) for a cost in tokens per answer: the area grows
    with the square root of the count (so a 100-token chain of thought does
    not swamp a 1-token answer), from ``smallest`` at the fewest tokens
    shown to ``largest`` at the most; ``unknown`` where the count is NaN."""
    t = pd.to_numeric(tokens, errors="coerce")
    root = np.sqrt(t.clip(lower=0))
    lo, hi = root.min(), root.max()
    scaled = (smallest + (root - lo) / (hi - lo) * (largest - smallest) if hi > lo
              else pd.Series(np.where(t.notna(), (smallest + largest) / 2, np.nan), index=t.index))
    return scaled.fillna(unknown)


def arm_tradeoff(frame: pd.DataFrame, x: str, y: str, label: str, annotate: str, xlabel: str, ylabel: str,
                 title: str):
    """Mitigation arms: a change in bias (``y``) against a change in
    accuracy (``x``), one point per row, one colour per ``label``, each point
    annotated with its ``annotate`` value; the area grows with the arm's
    ``tokens per answer`` (:func:`token_sizes`; its cost), filled where the
    count is known, open where it is not (a released arm keeps only its
    letters)."""
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    tokens = frame["tokens per answer"] if "tokens per answer" in frame else pd.Series(np.nan, index=frame.index)
    sizes = token_sizes(tokens)
    for i, (name, g) in enumerate(frame.groupby(label, sort=False)):
        t = tokens.loc[g.index]
        if t.notna().any():
            ax.scatter(g[x], g[y], s=sizes.loc[g.index], color=f"C{i % 10}",
                       label=f"{name} ({t.mean():.0f} tokens/answer)")
        else:
            ax.scatter(g[x], g[y], s=sizes.loc[g.index], facecolors="none", edgecolors=f"C{i % 10}",
                       label=f"{name} (tokens not known)")
        for a, b, text in zip(g[x], g[y], g[annotate]):
            ax.annotate(str(text), (a, b), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, color="grey", lw=0.6)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=6)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def reliability(rel: pd.DataFrame, model: str, conditions: list[str] | None = None):
    """Reliability diagram of one model: accuracy against confidence per bin,
    one line per condition (from ``metrics.reliability_table``)."""
    r = rel[(rel["model"] == model) & (rel["n"] > 0)]
    conditions = conditions or list(dict.fromkeys(r["condition"]))
    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfect calibration")
    for c in conditions:
        g = r[r["condition"] == c]
        ax.plot(g["confidence"], g["accuracy"], marker="o", ms=3, lw=1.2, label=c)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (1 − normalised entropy)",
           ylabel="accuracy (majority vote)", title=f"Reliability: {model}")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def risk_coverage(rc: pd.DataFrame, model: str, conditions: list[str] | None = None):
    """Selective prediction: risk (error rate of the answers kept) against
    coverage (share of questions answered, most confident first)."""
    r = rc[rc["model"] == model]
    conditions = conditions or list(dict.fromkeys(r["condition"]))
    fig, ax = plt.subplots(figsize=(5, 4.5))
    for c in conditions:
        g = r[r["condition"] == c]
        ax.plot(g["coverage"], g["risk"], lw=1.2, label=c)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="coverage (answered, most confident first)",
           ylabel="risk (error rate among answered)", title=f"Risk–coverage: {model}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def delta_heatmap(values: pd.DataFrame, p: pd.DataFrame, title: str, center: float = 0.0,
                  cmap: str = "RdBu", fmt: str = "+.2f"):
    """Heatmap of a delta table (models × conditions, the base column
    dropped); cells with p ≤ 0.05 are outlined."""
    v = values[p.columns]
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * v.shape[1], 1.2 + 0.5 * v.shape[0]))
    lim = np.nanmax(np.abs(v.to_numpy(float))) if np.isfinite(v.to_numpy(float)).any() else 1.0
    sns.heatmap(v.astype(float), annot=True, fmt=fmt, cmap=cmap, center=center, vmin=-lim, vmax=lim,
                cbar=False, ax=ax, annot_kws={"fontsize": 8})
    for i, m in enumerate(v.index):
        for j, c in enumerate(v.columns):
            if p.loc[m, c] <= 0.05:
                ax.add_patch(plt.Rectangle((j, i), 1, 1, fill=False, lw=2, ec="black"))
    ax.set(title=title, xlabel="", ylabel="")
    fig.tight_layout()
    return fig


def dialog_turns(dialogs: pd.DataFrame, min_turns: int | None = None):
    """Turns per dialog, one histogram per dataset (log-spaced bins); a
    dashed line at ``min_turns`` (shorter MTS-Dialog dialogs are dropped)."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    bins = np.unique(np.geomspace(max(1, dialogs["turns"].min()), dialogs["turns"].max() + 1, 30).astype(int))
    for ds, g in dialogs.groupby("dataset"):
        ax.hist(g["turns"], bins=bins, alpha=0.6, label=f"{ds} (n = {len(g)})")
    if min_turns:
        ax.axvline(min_turns, ls="--", color="black", lw=1, label=f"{min_turns} turns (MTS minimum)")
    ax.set_xscale("log")
    ax.set_xlabel("turns per dialog")
    ax.set_ylabel("dialogs")
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig
