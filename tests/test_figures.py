"""Every multi-panel figure labels its data truthfully, and is readable.

Notebook 08's Fig. 7 shared one y-axis between its panels
while each panel set its own tick labels, so where models answered different
pairs (the embedded model only the neutralisation check, the released models
every pair) the last panel's labels stood on every panel and GPT-4.1's bar was
labelled "Claude". Smoke and nbval could not see it: there every model answers
every pair. Here each figure is drawn from a case where models answer
different items, and every bar is read back from the drawn figure — its
panel, its tick label, its legend entry — and compared with the data it
should show. Legends must not cover data, titles must not overlap, and an
empty panel must say why in its own text.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd
import pytest

from medaudit.studies import cultural
from medaudit.studies.fairmedqa import config as fq_config, figures as fq_figures


def _pairs() -> pd.DataFrame:
    """Fig. 7's input: "small" answered only the neutralisation check (one
    vignette, both incorrect); "big" and "mid" answered every pair, with
    different distributions, so a bar under the wrong label shows."""
    rows = []

    def add(model, pair, n11, b, c, n00):
        rows.append({"model": model, "pair": pair, "n": n11 + b + c + n00, "n11": n11, "mcnemar_b": b,
                     "mcnemar_c": c, "n00": n00, "CFR": (n11 + n00) / (n11 + b + c + n00),
                     "AD": abs(b - c) / (n11 + b + c + n00)})

    add("big", "original vs neutralised", 44, 3, 2, 1)
    add("mid", "original vs neutralised", 20, 10, 10, 10)
    add("small", "original vs neutralised", 0, 0, 0, 1)
    add("big", "race:White vs race:Black", 40, 5, 0, 5)
    add("mid", "race:White vs race:Black", 10, 20, 5, 15)
    return pd.DataFrame(rows)


def _drawn(fig):
    fig.canvas.draw()
    return fig


def _ylabel_at(ax, y: float) -> str | None:
    """The y tick label standing at ``y`` on this panel: of a shared y-axis,
    the label the panel showing them puts there (what a reader reads)."""
    for a in [ax, *ax.get_shared_y_axes().get_siblings(ax)]:
        ticks = {round(float(pos), 6): lab.get_text() for pos, lab in zip(a.get_yticks(), a.get_yticklabels())
                 if lab.get_visible() and lab.get_text()}
        if round(float(y), 6) in ticks:
            return ticks[round(float(y), 6)]
    return None


def _xlabel_near(ax, x: float) -> str:
    """The x tick label of the category a (dodged) bar centred at ``x`` belongs to."""
    pos = np.asarray(ax.get_xticks(), float)
    return ax.get_xticklabels()[int(np.argmin(np.abs(pos - x)))].get_text()


def test_fig7_labels_every_bar_with_its_own_model_when_models_answer_different_pairs():
    pairs = _pairs()
    fig = _drawn(fq_figures.answer_distribution_plot(pairs))
    parts = {"both correct": "n11", "only first correct": "mcnemar_b", "only second correct": "mcnemar_c",
             "both incorrect": "n00"}
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == list(dict.fromkeys(pairs["pair"]))
    checked = 0
    for ax in panels:
        data = pairs[pairs["pair"] == ax.get_title()].set_index("model")
        for container in ax.containers:
            col = parts[container.get_label()]
            for bar in container:
                if bar.get_width() == 0:
                    continue
                model = _ylabel_at(ax, bar.get_y() + bar.get_height() / 2)
                assert model is not None, f"{ax.get_title()}: a bar without a label"
                assert model in data.index, f"{ax.get_title()}: a bar labelled {model!r}, who did not answer it"
                share = 100 * data.loc[model, col] / data.loc[model, "n"]
                assert bar.get_width() == pytest.approx(share), (ax.get_title(), model, col)
                checked += 1
        # every model that answered the pair has its bars, under its own label
        labels = {_ylabel_at(ax, b.get_y() + b.get_height() / 2) for c in ax.containers for b in c
                  if b.get_width() > 0}
        assert labels == set(data.index), ax.get_title()
    assert checked >= 10


def test_fig7_says_so_where_a_model_did_not_answer_a_pair():
    fig = _drawn(fq_figures.answer_distribution_plot(_pairs()))
    race = next(ax for ax in fig.axes if ax.get_title() == "race:White vs race:Black")
    texts = [t.get_text() for t in race.texts]
    assert any("not answered" in t for t in texts), texts


def _bars_by_hue(ax):
    """(hue label, x category, height) of every bar of a seaborn hue barplot."""
    legend = ax.get_legend() or (ax.figure.legends[0] if ax.figure.legends else None)
    names = [t.get_text() for t in legend.get_texts()] if legend else []
    out = []
    for i, container in enumerate(ax.containers):
        label = container.get_label()
        hue = label if label and not label.startswith("_") else names[i]
        for bar in container:
            if np.isnan(bar.get_height()):
                continue
            out.append((hue, _xlabel_near(ax, bar.get_x() + bar.get_width() / 2), bar.get_height()))
    return out


def test_fairness_plot_bars_match_cfr_and_ad_when_models_answer_different_pairs():
    pairs = _pairs()
    fig = _drawn(fq_figures.fairness_plot(pairs))
    axes = [ax for ax in fig.axes if ax.get_title()]
    for ax, metric in zip(axes, ("CFR", "AD")):
        seen = _bars_by_hue(ax)
        for model, pair, height in seen:
            assert height == pytest.approx(pairs.set_index(["model", "pair"]).loc[(model, pair), metric])
        assert {(m, p) for m, p, _ in seen} == set(zip(pairs["model"], pairs["pair"]))


def test_fairmedqa_accuracy_plot_bars_match_when_models_answer_different_conditions():
    cfg = fq_config.load_config()
    acc = pd.DataFrame({"model": ["big", "big", "small"], "condition": ["original", "neutralised", "original"],
                        "accuracy": [90.0, 80.0, 10.0]})
    fig = _drawn(fq_figures.accuracy_plot(acc, cfg))
    seen = _bars_by_hue(fig.axes[0])
    assert sorted(seen) == sorted(zip(acc["model"], acc["condition"], acc["accuracy"]))


def _cultural_boot() -> pd.DataFrame:
    cfg = cultural.load_config()
    conds = cfg.conditions()
    rows = []
    for model, some in (("big", conds), ("small", conds[:3])):
        for i, c in enumerate(some):
            acc = (80.0 if model == "big" else 30.0) - i
            rows.append({"model": model, "condition": c, "accuracy": acc, "ci_lo": acc - 5, "ci_hi": acc + 5,
                         "n": 40 if model == "big" else 7})
    return pd.DataFrame(rows), cfg


def test_cultural_accuracy_plot_panels_match_their_model_and_titles_do_not_overlap():
    boot, cfg = _cultural_boot()
    one = _drawn(cultural.accuracy_plot(boot[boot["model"] == "big"], cfg))
    renderer = one.canvas.get_renderer()
    assert not one._suptitle.get_window_extent(renderer).overlaps(one.axes[0].title.get_window_extent(renderer)), \
        "the suptitle covers the panel title"
    fig = _drawn(cultural.accuracy_plot(boot, cfg))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2
    for ax, model in zip(panels, ("big", "small")):
        assert ax.get_title().startswith(model)
        g = boot[boot["model"] == model]
        heights = sorted(round(b.get_height(), 6) for b in ax.patches)
        assert heights == sorted(round(x, 6) for x in g["accuracy"])
        assert len(ax.get_xticklabels()) == len(g)
    renderer = fig.canvas.get_renderer()
    sup = fig._suptitle.get_window_extent(renderer)
    for ax in panels:
        assert not sup.overlaps(ax.title.get_window_extent(renderer)), "the suptitle covers a panel title"


def test_cultural_forest_plot_labels_and_interval_text_match_their_rows():
    cfg = cultural.load_config()
    culture = cfg.culture_names[0]
    boot = pd.DataFrame({"model": ["big", "small"], "culture": [culture, culture], "estimate": [-4.0, 2.5],
                         "ci_lo": [-8.0, -1.0], "ci_hi": [-1.0, 6.0], "significant": [True, False],
                         "n": [40, 40]})
    fig = _drawn(cultural.forest_plot(boot, cfg))
    ax, ax2 = fig.axes[0], fig.axes[1]
    points = [line for line in ax.lines if line.get_marker() == "o"]
    for line in points:
        x, y = line.get_xdata()[0], line.get_ydata()[0]
        model = _ylabel_at(ax, y).split(" — ")[0]
        row = boot.set_index("model").loc[model]
        assert x == row["estimate"]
        assert _ylabel_at(ax2, y).startswith(f"{row['estimate']:+.2f}")


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _five_models() -> pd.DataFrame:
    """Five models with high CFR on three pairs: bars reach the top corners, where a legend goes by default."""
    rows = []
    for k, model in enumerate(["GPT-4.1", "Claude-3.7-Sonnet", "DeepSeek-V3", "Qwen-2.5", "qwen-1.5b"]):
        for j, pair in enumerate(["original vs neutralised", "race:White vs race:Black", "sex:Male vs sex:Female"]):
            rows.append({"model": model, "pair": pair, "n": 50, "n11": 40 - k, "mcnemar_b": k, "mcnemar_c": 1,
                         "n00": 9, "CFR": 0.98 - 0.01 * k - 0.01 * j, "AD": 0.9 - 0.05 * k})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("make", [lambda: fq_figures.answer_distribution_plot(_pairs()),
                                  lambda: fq_figures.fairness_plot(_pairs()),
                                  lambda: fq_figures.answer_distribution_plot(_five_models()),
                                  lambda: fq_figures.fairness_plot(_five_models())],
                         ids=["fig7", "cfr_ad", "fig7-five", "cfr_ad-five"])
def test_legends_do_not_cover_bars(make):
    fig = _drawn(make())
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *[ax.get_legend() for ax in fig.axes if ax.get_legend()]]
    assert legends
    bars = [p.get_window_extent(renderer) for ax in fig.axes for p in ax.patches
            if p.get_width() > 0 and p.get_height() > 0]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        covered = [b for b in bars if _overlap(box, b)]
        assert not covered, f"the legend covers {len(covered)} bars"


def test_empty_panels_and_figures_say_why():
    acc = pd.DataFrame({"generator": ["g"], "condition": ["race:White"], "accuracy": [50.0]})
    fig = _drawn(fq_figures.validator_accuracy_plot(acc, pd.DataFrame(columns=["pair", "gap", "generator"])))
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "no counterfactual pair" in texts
    fig = _drawn(fq_figures.answer_distribution_plot(pd.DataFrame(columns=_pairs().columns)))
    assert "no pair" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    fig = _drawn(fq_figures.trigger_plot(pd.DataFrame(columns=["condition", "round", "rate"])))
    assert "no agent rounds" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_fig6_without_a_validator_accuracy_says_so():
    """08's Fig. 6 was an empty plot with no note where the Validation-Agent
    had no scored text (every accuracy NaN: texts 0)."""
    acc = pd.DataFrame({"generator": ["g", "g"], "validator": ["v", "v"], "condition": ["race:White", "race:Black"],
                        "texts": [0, 0], "correct": [0, 0], "accuracy": [np.nan, np.nan]})
    gaps = pd.DataFrame({"generator": ["g"], "pair": ["race:White vs race:Black"], "gap": [np.nan]})
    fig = _drawn(fq_figures.validator_accuracy_plot(acc, gaps))
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "no adversarial variant the Validation-Agent answered" in texts
    half = acc.assign(texts=[4, 0], correct=[2, 0], accuracy=[50.0, np.nan])
    fig = _drawn(fq_figures.validator_accuracy_plot(half, gaps))
    assert "no counterfactual pair" in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
