"""Mitigation strategies: does an instruction remove the bias, and at what cost?

A strategy (``params/mitigations.yaml``) is a transform of any multiple-choice
prompt: an instruction line for the user turn and/or a system line. Its
answers are stored under their own prompt format, ``<format>+<strategy>``
(:func:`format_name`), so the cache never mixes a strategy's answers with the
plain prompt's, and each strategy is a paired arm beside ``none`` on the same
items.

The FairMedQA authors ran two such arms without publishing them: ``cot1`` and
``cot2`` of their ``format_prompt`` (XY-Showing/AMQA@335b175,
``Scripts/AMQA_Benchmark_LLMs.py``), used here verbatim. Their letters were
read by their ``extract_choice`` (the reply upper-cased, the first
whitespace token that is an option key: :func:`medaudit.parse.parse_first_option_token`),
which reads a chain of thought's article "a" as option A. So:

- a chain-of-thought reply of ours is read by :func:`final_answer` (the
  answer the reply ends with), and the authors' rule is reported beside it
  (:func:`agreement`);
- a released arm, whose replies are gone and only the letters remain, is
  checked by :func:`letter_artefact`: its letter distribution against the
  same model's plain answers and against the gold letters, on the same items.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from medaudit import parse as _parse
from medaudit import paths

MARGIN = 2.0   # points: δ of the arm table's verdicts, 04's (calibration_margin's default; docs/statistics.md)

NONE = "none"
SEP = "+"
# the formats whose own answer instruction a strategy's instruction replaces (the
# authors' format_prompt puts cot1 / cot2 where no_cot's instruction was)
OWN_INSTRUCTION = {"amqa_no_cot": "Select the best option and output only the index letter (A, B, C, D, etc)."}
# the formats whose own opening a strategy's preamble replaces (the FairMedPrompt authors' format_prompt
# changes only the opening before "Now, select ..." between its naive, role, aware and cot prompts)
OWN_PREAMBLE = {"fairmp_naive": "You are an AI medical assistant. "}


class MitigationError(ValueError):
    """A strategy file or name that cannot be used: names the file, strategy and field."""


@dataclass(frozen=True)
class Strategy:
    """One mitigation strategy of ``params/mitigations.yaml``: its source, the
    instruction, system line or preamble it adds, whether only released answers exist for it
    (``released_only``, why), whether it asks for reasoning, and its token limit."""
    name: str
    source: str = ""
    instruction: str | None = None
    system: str | None = None
    preamble: str | None = None          # replaces the opening of a format of OWN_PREAMBLE
    released_only: str | None = None     # why no prompt text is given: its answers can be read, never asked
    chain_of_thought: bool = False
    max_tokens: int | None = None

    @property
    def askable(self) -> bool:
        """Whether a model of ours can be asked this strategy (its prompt text is known)."""
        return not self.released_only


@dataclass(frozen=True)
class Mitigations:
    """The strategies of ``params/mitigations.yaml`` by name, and the level
    (``artefact_alpha``) at which a strategy's letter artefact is flagged."""
    strategies: dict[str, Strategy]
    artefact_alpha: float = 0.01

    def get(self, name: str) -> Strategy:
        """The strategy ``name``; an unknown name is a :class:`MitigationError` listing the
        known ones."""
        if name not in self.strategies:
            raise MitigationError(f"params/mitigations.yaml: no strategy {name!r} "
                                  f"({', '.join(self.strategies)})")
        return self.strategies[name]


def load(path: str | Path | None = None) -> Mitigations:
    """The strategies of ``params/mitigations.yaml``, checked: every field
    known, ``none`` present and empty, a non-``none`` strategy changes the
    prompt, a chain of thought has a token budget."""
    path = Path(path) if path else paths.params("mitigations.yaml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    fields = set(Strategy.__dataclass_fields__) - {"name"}
    out = {}
    for name, spec in (raw.get("strategies") or {}).items():
        spec = spec or {}
        unknown = set(spec) - fields
        if unknown:
            raise MitigationError(f"{path}: strategy {name!r}: unknown fields {sorted(unknown)} "
                                  f"(known: {sorted(fields)})")
        s = Strategy(name=name, **spec)
        if name == NONE and (s.instruction or s.system):
            raise MitigationError(f"{path}: strategy 'none' must leave the prompt as it is")
        if name != NONE and not (s.instruction or s.system or s.preamble or s.released_only):
            raise MitigationError(f"{path}: strategy {name!r}: give an instruction, a system line or a preamble, "
                                  "or mark it released_only (with why) when its prompt text was not released")
        if s.released_only and (s.instruction or s.system or s.preamble):
            raise MitigationError(f"{path}: strategy {name!r}: released_only gives no prompt text")
        if SEP in name:
            raise MitigationError(f"{path}: strategy {name!r}: a name without {SEP!r}")
        if s.chain_of_thought and not s.max_tokens:
            raise MitigationError(f"{path}: strategy {name!r}: a chain of thought needs max_tokens")
        out[name] = s
    if NONE not in out:
        raise MitigationError(f"{path}: strategies must include 'none' (the arm every other is paired with)")
    alpha = float(raw.get("artefact_alpha", 0.01))
    if not 0 < alpha < 1:
        raise MitigationError(f"{path}: artefact_alpha must be in (0, 1), got {alpha}")
    return Mitigations(out, alpha)


@functools.lru_cache(maxsize=1)
def default() -> Mitigations:
    """The strategies of ``params/mitigations.yaml``, read once."""
    return load()


def format_name(base: str, strategy: str) -> str:
    """The prompt format a strategy's answers are stored under."""
    return base if strategy == NONE else f"{base}{SEP}{strategy}"


def split_format(name: str) -> tuple[str, str]:
    """``"mcq_letter+cot2"`` → ("mcq_letter", "cot2"); a plain format → (it, "none")."""
    base, _, strategy = name.partition(SEP)
    return base, strategy or NONE


def apply(messages: list[dict], strategy: Strategy, base_format: str) -> list[dict]:
    """The messages of ``base_format`` under ``strategy`` (module docstring):
    the instruction replaces the format's own instruction line where the
    format has one (:data:`OWN_INSTRUCTION`, which reproduces the authors'
    prompts exactly), else it is added as the user turn's last line; the
    system line goes before the conversation. A ``preamble`` replaces the
    opening of a format that has one (:data:`OWN_PREAMBLE`: the FairMedPrompt
    authors' prompts differ only there); a released-only strategy, whose
    prompt text is not known, is refused rather than invented."""
    if strategy.released_only:
        raise MitigationError(f"strategy {strategy.name!r} is released-only ({strategy.released_only}): its answers "
                              "can be imported, but it cannot be asked")
    out = [dict(m) for m in messages]
    if strategy.preamble:
        own = OWN_PREAMBLE.get(base_format)
        first = min(i for i, m in enumerate(out) if m["role"] == "user")
        if own is None or not out[first]["content"].startswith(own):
            raise MitigationError(f"strategy {strategy.name!r} replaces the opening of "
                                  f"{', '.join(OWN_PREAMBLE)}, not of {base_format!r}")
        out[first]["content"] = strategy.preamble + out[first]["content"][len(own):]
    if strategy.instruction:
        last = max(i for i, m in enumerate(out) if m["role"] == "user")
        text = out[last]["content"]
        own = OWN_INSTRUCTION.get(base_format)
        if own is not None:
            if not text.endswith(own):
                raise MitigationError(f"{base_format}: the prompt does not end with its instruction {own!r}")
            text = text[: -len(own)] + strategy.instruction
        else:
            text = text.rstrip("\n") + "\n" + strategy.instruction
        out[last]["content"] = text
    if strategy.system:
        if out and out[0]["role"] == "system":
            out[0]["content"] = strategy.system + "\n\n" + out[0]["content"]
        else:
            out.insert(0, {"role": "system", "content": strategy.system})
    return out


# --------------------------------------------------------------------------
# reading a chain of thought's answer

_ANSWER = re.compile(r"\b(?:answer|option|choice)\b[^A-Za-z\n]{0,12}(?:is\b)?[^A-Za-z\n]{0,6}([A-Z])\b", re.I)
_ALONE = re.compile(r"^[\s*_#>\-(\[]*([A-Z])[\s*_)\].:]*$")


def final_answer(text: str | None, letters: str = "ABCD") -> tuple[str | None, str]:
    """The answer a reasoning reply ends with: the last "answer / option /
    choice (is) X" of the reply (X an upper-case option letter: "the
    answer is B", "Answer: **C**", "Final answer: (D)"), else a last line
    that is a letter alone ("B", "**B**", "(B)."). ``no_answer`` otherwise:
    counted, never scored wrong. Unlike the authors' first-token rule
    (:func:`medaudit.parse.parse_first_option_token`), an article "a" in the
    reasoning is never an answer."""
    if text is None or not text.strip():
        return None, _parse.EMPTY
    hits = [m.group(1) for m in _ANSWER.finditer(text) if m.group(1) in letters and m.group(1).isupper()]
    if hits:
        return hits[-1], _parse.OK
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    m = _ALONE.match(lines[-1]) if lines else None
    if m and m.group(1) in letters:
        return m.group(1), _parse.OK
    return None, _parse.NO_ANSWER


def agreement(texts, letters: str = "ABCD") -> pd.DataFrame:
    """The two readings of the same replies side by side: replies, read by
    both, agreeing, read by the final-answer rule only, by the authors'
    first-token rule only, by neither, and agreement (%) among those both
    read."""
    f = [final_answer(t, letters)[0] for t in texts]
    a = [_parse.parse_first_option_token(t, letters)[0] for t in texts]
    both = sum(x is not None and y is not None for x, y in zip(f, a))
    same = sum(x is not None and x == y for x, y in zip(f, a))
    return pd.DataFrame([{"replies": len(f), "both read": both, "agree": same,
                          "final-answer rule only": sum(x is not None and y is None for x, y in zip(f, a)),
                          "first-token rule only": sum(x is None and y is not None for x, y in zip(f, a)),
                          "neither": sum(x is None and y is None for x, y in zip(f, a)),
                          "agreement (%)": round(100 * same / both, 1) if both else np.nan}])


def cot_agreement(responses: pd.DataFrame, letters: str = "ABCD") -> pd.DataFrame:
    """Both readings of every chain-of-thought arm a model of ours answered:
    per model and ``<format>+<strategy>`` whose strategy reasons
    (``chain_of_thought``), :func:`agreement` of its generated replies (the
    final-answer rule the project scores with, the authors' first-token
    rule beside it). Imported replies are left out: a release keeps the
    letter its authors extracted, not the reasoning."""
    cols = ["model", "prompt_format", "replies", "both read", "agree", "final-answer rule only",
            "first-token rule only", "neither", "agreement (%)"]
    r = responses[responses["source"] == "generated"] if "source" in responses else responses
    rows = []
    for (m, f), g in r.groupby(["model", "prompt_format"], sort=False):
        strategy = split_format(f)[1]
        if strategy != NONE and strategy in default().strategies and default().get(strategy).chain_of_thought:
            rows.append(agreement(g["response_text"].tolist(), letters).assign(model=m, prompt_format=f))
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)


# --------------------------------------------------------------------------
# a released arm's letters


def letter_artefact(arm: pd.Series, reference: pd.Series, gold: pd.Series, letters: str = "ABCD",
                    alpha: float = 0.01) -> dict:
    """Whether a released arm's letters look like an extraction artefact.

    ``arm``, ``reference`` (the same model's ``none`` answers) and ``gold``
    are letters indexed by item (None / NaN: no answer). On the items all
    three have, two Stuart–Maxwell tests of marginal homogeneity of the
    paired letter tables (:func:`medaudit.stats.paired.stuart_maxwell`): arm
    against reference, arm against gold (no item answered differently: χ²
    0, p 1, the margins are equal). ``flag`` when both reject at
    ``alpha`` *and* the arm answers the first letter (A) more often than
    both the plain answers and the gold letters: the artefact this check is
    for is the authors' first-token rule reading a reply's article "a" as
    option A, which can only add A's. Both tests rejecting without more A's
    is another letter shift (``shift`` names the letter that gained most),
    never flagged as that artefact, so a flag never contradicts the letter
    counts printed beside it. Returns the counts behind it: items of each
    series (a partial file has fewer), items compared, the letter counts,
    chi² and p of each test, the most frequent letter's share in each, and
    ``shift`` (none | article "a" | other letters)."""
    from medaudit.stats.paired import stuart_maxwell

    def ok(s):
        return s[s.isin(list(letters))]

    a, r, g = ok(arm), ok(reference), ok(gold)
    common = a.index.intersection(r.index).intersection(g.index)
    a, r, g = a.loc[common], r.loc[common], g.loc[common]
    out = {"arm items": int(arm.notna().sum()), "reference items": int(reference.notna().sum()),
           "compared": len(common)}
    for name, s in (("arm", a), ("reference", r), ("gold", g)):
        counts = s.value_counts().reindex(list(letters), fill_value=0)
        out[f"{name} letters"] = " ".join(f"{L} {int(n)}" for L, n in counts.items())
        top = counts.idxmax() if len(s) else None
        out[f"{name} top"] = f"{top} {100 * counts.max() / len(s):.1f}%" if len(s) else ""
    flags = []
    for name, other in (("reference", r), ("gold", g)):
        if (a.to_numpy() == other.to_numpy()).all():   # no item answered differently: the margins are equal
            stat, p = 0.0, 1.0
        else:
            res = stuart_maxwell(a, other, letters)
            stat, p = res["statistic"], res["p"]
        out[f"chi2 vs {name}"] = round(stat, 2)
        out[f"p vs {name}"] = p
        flags.append(p < alpha)
    n = {name: s.value_counts().reindex(list(letters), fill_value=0) for name, s in (("arm", a), ("reference", r),
                                                                                    ("gold", g))}
    first = letters[0]
    rejects = bool(len(common) and all(flags))
    more_a = bool(n["arm"][first] > n["reference"][first] and n["arm"][first] > n["gold"][first])
    gain = (n["arm"] - n["reference"]).sort_values(ascending=False, kind="stable")
    if not rejects:
        out["shift"] = "none"
    elif more_a:
        out["shift"] = (f"article \"a\": more {first} ({int(n['arm'][first])} vs {int(n['reference'][first])} plain, "
                        f"{int(n['gold'][first])} gold)")
    else:
        out["shift"] = (f"other letters: {gain.index[0]} {int(gain.iloc[0]):+d} vs plain, {first} "
                        f"{int(n['arm'][first])} vs {int(n['reference'][first])} plain (fewer or no more {first}'s: "
                        "not the article artefact)")
    out["flag"] = rejects and more_a
    out["test"] = f"Stuart–Maxwell marginal homogeneity, each at alpha {alpha:g}"
    return out


# --------------------------------------------------------------------------
# a strategy run by a model of ours: the arms side by side


def arm_summary(qt: pd.DataFrame, responses: pd.DataFrame, base: str = "base", margin: float = MARGIN) -> pd.DataFrame:
    """Each arm beside the plain prompt, per model, format and condition, on
    the same questions: ``qt`` holds one row per question (model,
    prompt_format, item_id, condition, ``single_correct``: 1/0, NaN when
    unscored), ``responses`` the stored samples (parse, truncation, tokens).

    Columns: model, format (the plain one), strategy, condition, questions,
    scored, accuracy (%), Δ vs base (points: the cue's effect under this
    arm), Δ vs base change (points: this arm's Δ minus the plain prompt's;
    above 0 under a cue that costs accuracy: the arm shrinks the effect),
    samples parsed (%), truncated, tokens per answer; for an arm, McNemar of
    single-sample correctness against the plain prompt on the questions both
    scored (accuracy change: points against the plain prompt's accuracy
    under the same condition; n_pair, b: right only plain, c: right only
    the arm, p) and p
    Holm-adjusted across the strategies of the model, format and condition.
    For an arm under a cue, the change in the cue's effect with its error,
    on the questions scored under the cue and base by both arms: per
    question d = (y_cue − y_base)[arm] − (y_cue − y_base)[plain] (single
    samples), ``Δ change`` = 100 · mean(d) (equal to ``Δ vs base change``
    when every question is scored everywhere), ``Δ change SE`` clustered by
    question (:func:`medaudit.stats.paired.paired_delta`), ``Δ change MDE`` (t on
    C − 1 df, α 0.05, power 0.8: :func:`medaudit.stats.testpower.mde_from_se`),
    ``Δ change p``, ``Δ change n``, ``Δ change lo``/``hi`` and ``Δ change
    verdict`` at ``margin`` points (:func:`medaudit.stats.equivalence.delta_columns`,
    with the exact sign-flip p and the covering interval of
    :func:`medaudit.stats.intervals.paired_interval` with bound 2, a change of a
    difference, in place of the clustered t's, which covered 73 % at three
    questions and whose test rejected a true null 6.8 % of the time at 200
    in the coverage simulation; docs/statistics.md).
    Flips (where ``qt`` has the question's ``single`` answer letter): ``flip
    vs base (%)``, the share of questions whose answer under the cue differs
    from their answer under base, per arm; for an arm ``Δ flip`` (points,
    below 0: the arm flips less), per question d = flip[arm] − flip[plain]
    on the questions answered under the cue and base by both, with the same
    SE, MDE, p and n."""
    from medaudit.parse import OK, TRUNCATED
    from medaudit.stats.paired import holm
    from medaudit.stats.equivalence import delta_columns
    from medaudit.stats.paired import mcnemar_test

    q = qt.assign(format=[split_format(f)[0] for f in qt["prompt_format"]],
                  strategy=[split_format(f)[1] for f in qt["prompt_format"]])
    r = responses.assign(format=[split_format(f)[0] for f in responses["prompt_format"]],
                         strategy=[split_format(f)[1] for f in responses["prompt_format"]])
    rows = []
    keys = ["model", "format", "strategy", "condition"]
    for key, g in q.groupby(keys, sort=False):
        m, fmt, s, cond = key
        rr = r[(r["model"] == m) & (r["format"] == fmt) & (r["strategy"] == s) & (r["condition"] == cond)]
        rows.append({**dict(zip(keys, key)), "questions": len(g), "scored": int(g["single_correct"].notna().sum()),
                     "accuracy (%)": 100 * g["single_correct"].mean(),
                     "samples parsed (%)": 100 * rr["parse_status"].eq(OK).mean() if len(rr) else np.nan,
                     "truncated": int(rr["parse_status"].eq(TRUNCATED).sum()),
                     "tokens per answer": float(pd.to_numeric(rr.get("tokens_out"), errors="coerce").mean())
                     if len(rr) else np.nan})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    at_base = out[out["condition"] == base].set_index(["model", "format", "strategy"])["accuracy (%)"]
    out["Δ vs base"] = [a - at_base.get((m, f, s), np.nan) if c != base else np.nan
                        for m, f, s, c, a in zip(out["model"], out["format"], out["strategy"], out["condition"],
                                                 out["accuracy (%)"])]
    plain_acc = out[out["strategy"] == NONE].set_index(["model", "format", "condition"])["accuracy (%)"]
    out["accuracy change"] = [a - plain_acc.get((m, f, c), np.nan) if s != NONE else np.nan
                              for m, f, s, c, a in zip(out["model"], out["format"], out["strategy"],
                                                       out["condition"], out["accuracy (%)"])]
    plain_d = out[out["strategy"] == NONE].set_index(["model", "format", "condition"])["Δ vs base"]
    out["Δ vs base change"] = [d - plain_d.get((m, f, c), np.nan) if s != NONE else np.nan
                               for m, f, s, c, d in zip(out["model"], out["format"], out["strategy"],
                                                        out["condition"], out["Δ vs base"])]
    sc = q.set_index(["model", "format", "strategy", "condition", "item_id"])["single_correct"].sort_index()
    for col in ("n_pair", "b", "c", "p"):
        out[col] = np.nan
    for i, row in out[out["strategy"] != NONE].iterrows():
        try:
            a = sc.loc[(row["model"], row["format"], NONE, row["condition"])]
        except KeyError:
            continue
        b = sc.loc[(row["model"], row["format"], row["strategy"], row["condition"])]
        both = a.index.intersection(b.index)
        t = mcnemar_test(a.loc[both].to_numpy(), b.loc[both].to_numpy())
        out.loc[i, ["n_pair", "b", "c", "p"]] = [t["n"], t["b"], t["c"], t["pvalue"]]
    # flips: the question's single answer under the cue differs from its single answer under base
    single = (q.set_index(["model", "format", "strategy", "condition", "item_id"])["single"].sort_index()
              if "single" in q else None)

    def cells(series: pd.Series, m: str, f: str, s: str, c: str) -> pd.DataFrame | None:
        """Per question: the arm under the cue and base (columns 0, 1), the plain prompt under both (2, 3),
        the questions that have all four; None where a cell is absent."""
        try:
            parts = [series.loc[(m, f, st, cc)] for st in (s, NONE) for cc in (c, base)]
        except KeyError:
            return None
        return pd.concat(parts, axis=1, keys=range(4)).dropna()

    from medaudit.stats.equivalence import delta_names

    cols = [*delta_names("Δ change"), "flip vs base (%)", *delta_names("Δ flip")]
    for col in cols:
        out[col] = "" if col.endswith("verdict") else np.nan
    for i, row in out[out["condition"] != base].iterrows():
        m, f, s, c = row["model"], row["format"], row["strategy"], row["condition"]
        if single is not None and (m, f, s, c) in single.index and (m, f, s, base) in single.index:
            y = pd.concat([single.loc[(m, f, s, c)], single.loc[(m, f, s, base)]], axis=1).dropna()
            out.loc[i, "flip vs base (%)"] = 100 * float((y.iloc[:, 0] != y.iloc[:, 1]).mean()) if len(y) else np.nan
        if s == NONE or (x := cells(sc, m, f, s, c)) is None:
            continue
        row_out = delta_columns((x[2] - x[3]).to_numpy(), (x[0] - x[1]).to_numpy(), x.index.to_numpy(),
                                "Δ change", margin, bound=2.0)
        if single is not None and (y := cells(single, m, f, s, c)) is not None:
            fl_arm, fl_plain = (y[0] != y[1]).astype(float), (y[2] != y[3]).astype(float)
            row_out |= delta_columns(fl_plain.to_numpy(), fl_arm.to_numpy(), y.index.to_numpy(), "Δ flip", margin)
        out.loc[i, list(row_out)] = list(row_out.values())
    out["p_holm"] = np.nan
    for _, g in out[out["p"].notna()].groupby(["model", "format", "condition"], sort=False):
        out.loc[g.index, "p_holm"] = holm(g["p"])
    # rows: the plain prompt first, then the arms as the responses list them; base first, then the conditions
    # in the responses' order
    s_order = {s: i for i, s in enumerate(dict.fromkeys([NONE, *r["strategy"]]))}
    c_order = {c: i for i, c in enumerate(dict.fromkeys([base, *r["condition"]]))}
    out = out.assign(_s=out["strategy"].map(s_order), _c=out["condition"].map(c_order))
    return out.sort_values(["model", "format", "_s", "_c"], kind="stable").drop(columns=["_s", "_c"]).reset_index(
        drop=True)


def arm_plot(summary: pd.DataFrame):
    """The seed-000 arms of :func:`arm_summary` as a figure: per arm and cue,
    the change in the cue's effect (``Δ change``, points; above 0 under a cue
    that costs accuracy: the arm shrinks the effect) against the arm's
    accuracy change under that cue, the area growing with its tokens per
    answer (:func:`medaudit.report.plots.arm_tradeoff`)."""
    from medaudit.report import plots

    rows = summary[(summary["strategy"] != NONE) & summary["Δ change"].notna()] if len(summary) else summary
    if rows.empty:
        return plots.empty("no arm with a cue scored beside the plain prompt")
    rows = rows.assign(arm=[f"{m} · {f}+{s}" for m, f, s in zip(rows["model"], rows["format"], rows["strategy"])])
    return plots.arm_tradeoff(rows, "accuracy change", "Δ change", "arm", "condition",
                              "accuracy change vs the plain prompt (points)",
                              "change in the cue's Δ vs base (points)", "Mitigation arms on seed 000's cues")
