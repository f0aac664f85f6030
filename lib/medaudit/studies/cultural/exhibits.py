"""Section 6 of the cultural-cue study (seed 003): tables shaped like Tables I-V, and figures.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from medaudit.stats import equivalence as _equivalence
from medaudit.stats import intervals as _intervals
from medaudit.stats import paired as _stats
from medaudit.stats.scoring import units_of
from .config import BASELINES, CulturalConfig, NEUTRAL, ORIGINAL
from .metrics import MARGIN, delta_avg, rate_interval


# ==========================================================================
# 6. tables shaped like Tables I–V, and figures


def _row_key(df: pd.DataFrame, units: Sequence[str] | None = None) -> list[str]:
    """Row index columns: "model", plus any other unit column that varies."""
    u = units_of(df, units)
    return [c for c in u if c == "model" or df[c].nunique() > 1] or u[:1]


def _fmt(v: float, digits: int, sign: bool = False) -> str:
    if pd.isna(v):
        return "n/a"
    s = f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"
    return s.replace("-", "−") if sign else s


OPTION_FORMATS = ("mcq_option", "mcq")
"""Option prompting (seed 003 §II.C, Table I), in order of preference: the
authors' one-character prompt (``mcq_option``, their released answers), then
seed 000's bracket prompt (``mcq``)."""


def option_formats(formats_: Sequence[str]) -> list[str]:
    """The option-prompting formats among a profile's ``cultural_formats``."""
    return [f for f in formats_ if f in OPTION_FORMATS]


def option_prompting(df: pd.DataFrame) -> pd.DataFrame:
    """Table I's rows of a frame with ``model`` and ``prompt_format``: each
    model's option-prompting answers, under the authors' prompt where the
    model has them, else under the bracket prompt (:data:`OPTION_FORMATS`),
    so no model has two rows and each row says its format."""
    a = df[df["prompt_format"].isin(OPTION_FORMATS)]
    rank = a["prompt_format"].map({f: i for i, f in enumerate(OPTION_FORMATS)})
    return a[rank == rank.groupby(a["model"]).transform("min")]


def table_accuracy(acc: pd.DataFrame, cochran: pd.DataFrame | None = None, *, config: CulturalConfig,
                   digits: int = 2, alpha: float = 0.05, units: Sequence[str] | None = None) -> pd.DataFrame:
    """Tables I/II: rows models; columns N (questions scored: the most of
    any condition; after :func:`medaudit.stats.scoring.drop_incomplete` every condition has it),
    (Baselines: Orig., Neut.), per
    culture (Id, Ctx, Id+Ctx), "Δ Avg (C1-C3)" per cue as
    "Δ_Orig / Δ_Neutral", and, with ``cochran`` (:func:`cochran_table`),
    "Cochran's Q" per cue as "✓/✓" (p ≤ alpha vs original / vs neutral; "–"
    otherwise); a ✓ resting on fewer than 30 questions carries its n and
    the MDE of Δ Avg ("✓/– (vs Orig.: n=8, MDE 35.2 pts)").
    Accuracies in %, as text with ``digits`` decimals."""
    rk = _row_key(acc, units)
    d = delta_avg(acc, config, units)
    rows = {}
    for key, g in acc.groupby(rk, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        a = g.set_index("condition")["accuracy"]
        r = {**({("N", ""): int(g["n"].max())} if "n" in g.columns else {}),
             ("Baselines", config.baselines[ORIGINAL]["label"]): _fmt(a.get(ORIGINAL), digits),
             ("Baselines", config.baselines[NEUTRAL]["label"]): _fmt(a.get(NEUTRAL), digits)}
        for t in config.cultures.values():
            for q in config.cues.values():
                r[(t["label"], q["label"])] = _fmt(a.get(f"{t['name']}:{q['name']}"), digits)
        dd = d.set_index(rk + ["cue"]) if rk else d.set_index("cue")
        for q in config.cues.values():
            x = dd.loc[(*key, q["name"])]
            r[("Δ Avg (C1-C3)", q["label"])] = (f"{_fmt(x['delta_orig'], digits, True)} / "
                                                f"{_fmt(x['delta_neutral'], digits, True)}")
        if cochran is not None:
            cq = cochran.set_index(rk + ["cue", "reference"])
            for q in config.cues.values():
                marks = []
                notes = []
                for ref in BASELINES:
                    k = (*key, q["name"], ref)
                    sig = k in cq.index and cq.loc[k, "p"] <= alpha
                    marks.append("✓" if sig else "–")
                    note = (_stats.significance_note(int(cq.loc[k, "n"]), cq.loc[k, "mde"] / 100)
                            if sig and "mde" in cq.columns else "")
                    if note:
                        notes.append(f"{'vs Orig.' if ref == ORIGINAL else 'vs Neut.'}: {note}")
                r[("Cochran's Q", q["label"])] = "/".join(marks) + (f" ({'; '.join(notes)})" if notes else "")
        rows[key if len(key) > 1 else key[0]] = r
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    out.index.names = rk
    return out


def arm_flips(qt: pd.DataFrame, config: CulturalConfig, reference: str = ORIGINAL,
              margin: float = MARGIN) -> pd.DataFrame:
    """Each mitigation arm's flips beside the plain prompt's, paired.

    ``qt``: question rows (:func:`medaudit.stats.scoring.question_table`) of the
    plain formats and the arms (``<format>+<strategy>``). Per model, option
    form, plain format, arm and condition s, on the questions parsed under
    the reference and s by both the plain prompt and the arm: the flip rate
    (eq. 3) of each, with its Clopper–Pearson interval (``flip plain lo``,
    ``flip plain hi``, …; :func:`rate_interval`), and the change ``Δflip`` = 100 · mean(d), d = flip_arm −
    flip_plain per question (below 0: the arm flips less), with its SE
    clustered by question (:func:`medaudit.stats.paired.paired_delta`), MDE (t on
    C − 1 df, α 0.05, power 0.8), p (the exact sign-flip test), n, the
    covering interval (lo, hi) and the verdict at ``margin`` points
    (:func:`medaudit.stats.equivalence.delta_columns`); the harmful flip rate (eq. 4) of each on the questions both
    answered correctly under the reference, and its change ``Δhflip`` with the same
    errors. ``p_holm``: Δflip's p Holm-adjusted across the arms of a model,
    form, format and condition."""
    from medaudit.llm.mitigations import NONE, split_format

    q = qt.assign(parsed_answer=qt["parsed_answer"].where(qt["parsed"].astype(bool)))   # unparsed: no answer, n 0
    q = q.assign(base=[split_format(f)[0] for f in q["prompt_format"]],
                 strategy=[split_format(f)[1] for f in q["prompt_format"]],
                 form=q["form"] if "form" in q else "5opt")
    rows = []
    for (m, form, base, s), g in q[q["strategy"] != NONE].groupby(["model", "form", "base", "strategy"], sort=False):
        pl = q[(q["model"] == m) & (q["form"] == form) & (q["base"] == base) & (q["strategy"] == NONE)]
        ans = {w: x.pivot(index="item_id", columns="condition", values="parsed_answer")
               for w, x in (("arm", g), ("plain", pl))}
        cor = {w: x.pivot(index="item_id", columns="condition", values="correct")
               for w, x in (("arm", g), ("plain", pl))}
        for cond in [NEUTRAL, *config.cultural_conditions()]:
            if any(c not in ans[w].columns for w in ans for c in (reference, cond)):
                continue
            items = ans["arm"].index.intersection(ans["plain"].index)
            a = {w: ans[w].loc[items, [reference, cond]] for w in ans}
            ok = a["arm"].notna().all(axis=1) & a["plain"].notna().all(axis=1)
            items = items[ok.to_numpy()]
            flip = {w: (ans[w].loc[items, reference] != ans[w].loc[items, cond]).astype(float) for w in ans}
            right = (cor["arm"].loc[items, reference] == 1) & (cor["plain"].loc[items, reference] == 1)
            harm = {w: (cor[w].loc[items[right.to_numpy()], cond] != 1).astype(float) for w in ans}
            culture, cue = config.split(cond)
            row = {"model": m, "form": form, "format": base, "strategy": s, "condition": cond, "culture": culture,
                   "cue": cue}
            for name, d in (("flip", flip), ("hflip", harm)):
                ya, yb, units = d["plain"].to_numpy(), d["arm"].to_numpy(), d["arm"].index.to_numpy()
                row.update({f"{name} plain (%)": 100 * ya.mean() if len(ya) else np.nan,
                            **dict(zip((f"{name} plain lo", f"{name} plain hi"), rate_interval(ya))),
                            f"{name} arm (%)": 100 * yb.mean() if len(yb) else np.nan,
                            **dict(zip((f"{name} arm lo", f"{name} arm hi"), rate_interval(yb))),
                            **_equivalence.delta_columns(ya, yb, units, f"Δ{name}", margin)})
            rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = np.nan
    for _, g in out[out["Δflip p"].notna()].groupby(["model", "form", "format", "condition"], sort=False):
        out.loc[g.index, "p_holm"] = _stats.holm(g["Δflip p"])
    return out


def table_flips(flips: pd.DataFrame, metric: str, config: CulturalConfig, digits: int = 2,
                units: Sequence[str] | None = None) -> pd.DataFrame:
    """Tables IV (``metric="flip"``) and V (``"hflip"``): rows models,
    columns N (questions compared; for V the questions answered correctly
    under Original, the denominator of eq. 4), Neutral then culture × cue,
    values in % (numbers rounded to ``digits``)."""
    if metric not in ("flip", "hflip"):
        raise ValueError("metric must be 'flip' or 'hflip'")
    rk = _row_key(flips, units)
    cols = [(NEUTRAL.capitalize(), "")] + [(t["label"], q["label"]) for t in config.cultures.values()
                                           for q in config.cues.values()]
    conds = [NEUTRAL] + config.cultural_conditions()
    w = flips.pivot_table(index=rk, columns="condition", values=metric, sort=False, dropna=False)
    w = w.reindex(columns=conds)
    w.columns = pd.MultiIndex.from_tuples(cols)
    w = w.round(digits)
    # N: the questions compared (flip) or answered correctly under Original (hflip)
    n = flips.groupby(rk, sort=False)["n" if metric == "flip" else "n_ref_correct"].max()
    w.insert(0, ("N", ""), n.reindex(w.index).fillna(0).astype(int))   # 0: a unit with no question compared
    return w


def table_judge(counts: pd.DataFrame, config: CulturalConfig, digits: int = 2,
                units: Sequence[str] | None = None) -> pd.DataFrame:
    """Table III: rows models, columns Identity / Context / Identity +
    Context, cells "wrong / grounded (rate%)" from :func:`judge_counts`."""
    rk = _row_key(counts, units)
    c = counts[counts["cue"].isin(config.cue_names)].copy()
    c["cell"] = [f"{w} / {n} ({_fmt(r, digits)}%)" if n else "0 / 0 (n/a)"
                 for w, n, r in zip(c["grounded_wrong"], c["grounded"], c["error_rate"])]
    c["col"] = [config.cue_label(q, long=True) for q in c["cue"]]
    w = c.pivot(index=rk, columns="col", values="cell")
    w = w.reindex(index=list(dict.fromkeys(c.set_index(rk).index)))
    cols = [config.cue_label(q, long=True) for q in config.cue_names]
    return w.reindex(columns=cols).astype(object).fillna("–").rename_axis(columns=None)


def forest_plot(boot: pd.DataFrame, config: CulturalConfig, title: str | None = None):
    """Fig. 5: one row per model × culture, the point estimate of
    Id+Ctx − Original (pp) with its interval (:func:`idctx_delta`); the
    right-hand column prints "est [lo, hi]", bold where the exact test
    rejects on enough questions, "(too few to tell)" below
    :data:`medaudit.stats.intervals.MIN_N`."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if boot.empty:
        return plots.empty("no question scored in every condition (every question was dropped)")
    b = boot.reset_index(drop=True)
    rk = _row_key(b)
    labels = [" · ".join(str(r[c]) for c in rk) + f" — {config.culture_label(r['culture'])}"
              for _, r in b.iterrows()]
    y = np.arange(len(b))[::-1]
    colours = dict(zip(config.culture_names, ("#1b9e77", "#d95f02", "#7570b3")))
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(b) + 1.4))
    for yi, (_, r) in zip(y, b.iterrows()):
        col = colours.get(r["culture"], "black")
        ax.plot([r["ci_lo"], r["ci_hi"]], [yi, yi], color=col, lw=1.5)
        ax.plot(r["estimate"], yi, "o", color=col, ms=5)
    ax.axvline(0, color="grey", ls="--", lw=1)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("accuracy difference, Id+Ctx − Original (percentage points)")
    ax.set_title(title or "Sensitivity to cultural cues (95% CI, Agresti-Min adjusted ∪ clustered t)")
    ax2 = ax.twinx()
    ax2.set_ylim(ax.get_ylim())
    ax2.set_yticks(y, [f"{r['estimate']:+.2f} [{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}]"
                       + ("" if _intervals.can_tell(r["n"]) else " (too few to tell)") for _, r in b.iterrows()],
                   fontsize=8)
    for lab, (_, r) in zip(ax2.get_yticklabels(), b.iterrows()):
        if r["significant"]:
            lab.set_fontweight("bold")
    ax2.tick_params(length=0)
    fig.tight_layout()
    return fig


def accuracy_plot(boot_acc: pd.DataFrame, config: CulturalConfig, title: str | None = None):
    """Fig. 3: accuracy (%) per condition with its Clopper–Pearson 95%
    interval (:func:`accuracy_intervals`), one panel row of bars per unit, the
    conditions in the order Original, Neutral, culture × cue."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if boot_acc.empty:
        return plots.empty("no question scored in every condition (every question was dropped)")
    b = boot_acc.reset_index(drop=True)
    rk = _row_key(b)
    order = {c: i for i, c in enumerate(config.conditions())}
    units = list(dict.fromkeys(map(tuple, b[rk].to_numpy()))) if rk else [()]
    # constrained layout keeps the suptitle above the first panel's title (tight_layout overlapped them)
    fig, axes = plt.subplots(len(units), 1, figsize=(9, 2.8 * len(units) + 0.8), squeeze=False, layout="constrained")
    colours = {ORIGINAL: "#555555", NEUTRAL: "#999999"}
    colours.update(zip(config.culture_names, ("#1b9e77", "#d95f02", "#7570b3")))
    for ax, key in zip(axes[:, 0], units):
        g = b[(b[rk].apply(tuple, axis=1) == key)] if rk else b
        g = g.sort_values("condition", key=lambda s: s.map(order).fillna(len(order)))
        cols = [colours.get(config.split(c)[0] or c, "black") for c in g["condition"]]
        x = np.arange(len(g))
        ax.bar(x, g["accuracy"], color=cols)
        ax.errorbar(x, g["accuracy"], yerr=[g["accuracy"] - g["ci_lo"], g["ci_hi"] - g["accuracy"]],
                    fmt="none", ecolor="black", capsize=2, lw=0.8)
        labels = [config.baselines[c]["label"] if c in BASELINES else
                  f"{config.culture_label(config.split(c)[0]).split(':')[0]} {config.cue_label(config.split(c)[1])}"
                  for c in g["condition"]]
        ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("accuracy (%)")
        ax.set_title(" · ".join(map(str, key)) + f"  (n = {int(g['n'].max())} questions)", fontsize=9)
    fig.suptitle(title or "Accuracy per condition (Clopper-Pearson 95% CI)")
    return fig


def component_plot(comp: pd.DataFrame, title: str | None = None):
    """Fig. 4: grouped bars of Δ accuracy vs Original (pp) per model, one
    bar per component (the columns of :func:`component_table`)."""
    from medaudit.report import plots
    import matplotlib.pyplot as plt

    if comp.empty:
        return plots.empty("no question scored in every condition (every question was dropped)")
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(comp), 3.8))
    n = comp.shape[1]
    x = np.arange(len(comp))
    w = 0.8 / n
    for j, col in enumerate(comp.columns):
        ax.bar(x + (j - (n - 1) / 2) * w, comp[col].to_numpy(float), width=w, label=col)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, [" · ".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in comp.index],
                  rotation=20, ha="right")
    ax.set_ylabel("Δ accuracy vs Original (pp)")
    ax.set_title(title or "Component analysis of culturally induced errors")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
