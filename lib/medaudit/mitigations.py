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

from . import parse as _parse
from . import paths

NONE = "none"
SEP = "+"
# the formats whose own answer instruction a strategy's instruction replaces (the
# authors' format_prompt puts cot1 / cot2 where no_cot's instruction was)
OWN_INSTRUCTION = {"amqa_no_cot": "Select the best option and output only the index letter (A, B, C, D, etc)."}


class MitigationError(ValueError):
    """A strategy file or name that cannot be used: names the file, strategy and field."""


@dataclass(frozen=True)
class Strategy:
    name: str
    source: str = ""
    instruction: str | None = None
    system: str | None = None
    chain_of_thought: bool = False
    max_tokens: int | None = None


@dataclass(frozen=True)
class Mitigations:
    strategies: dict[str, Strategy]
    artefact_alpha: float = 0.01

    def get(self, name: str) -> Strategy:
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
            raise MitigationError(f"{path}: strategy {name!r}: unknown fields {sorted(unknown)} (known: {sorted(fields)})")
        s = Strategy(name=name, **spec)
        if name == NONE and (s.instruction or s.system):
            raise MitigationError(f"{path}: strategy 'none' must leave the prompt as it is")
        if name != NONE and not (s.instruction or s.system):
            raise MitigationError(f"{path}: strategy {name!r}: give an instruction or a system line")
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
    system line goes before the conversation."""
    out = [dict(m) for m in messages]
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


# --------------------------------------------------------------------------
# a released arm's letters


def letter_artefact(arm: pd.Series, reference: pd.Series, gold: pd.Series, letters: str = "ABCD",
                    alpha: float = 0.01) -> dict:
    """Whether a released arm's letters look like an extraction artefact.

    ``arm``, ``reference`` (the same model's ``none`` answers) and ``gold``
    are letters indexed by item (None / NaN: no answer). On the items all
    three have, two Stuart–Maxwell tests of marginal homogeneity of the
    paired letter tables (:func:`medaudit.stats.stuart_maxwell`): arm
    against reference, arm against gold (no item answered differently: χ²
    0, p 1, the margins are equal). ``flag`` when both reject at
    ``alpha``: the arm's letters depart from what the same model answers
    without the instruction and from the answers' true distribution.
    Returns the counts behind it: items of each series (a partial file has
    fewer), items compared, the letter counts, chi² and p of each test, and
    the most frequent letter's share in each."""
    from .stats import stuart_maxwell

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
    out["flag"] = bool(len(common) and all(flags))
    out["test"] = f"Stuart–Maxwell marginal homogeneity, each at alpha {alpha:g}"
    return out
