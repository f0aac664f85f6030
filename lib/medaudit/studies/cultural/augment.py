"""Section 7 of the cultural-cue study (seed 003): augmenting other MedQA items, the few-shot
augmenter's requests and checks, and the accepted pieces composed into variants.
"""
from __future__ import annotations

import re
from typing import Sequence

import pandas as pd

from medaudit.prep import perturb
from medaudit import prompts
from medaudit.prep import text as _text
from .config import CulturalConfig, ORIGINAL
from .variants import CulturalSet, baseline_rows, question_key


# ==========================================================================
# 7. augmenting other MedQA items: the few-shot augmenter and its checks
#
# The released Id+Ctx variant of an item is its Id edit plus its Ctx edit. The
# augmenter therefore writes two pieces per item and culture with an LLM — an
# identity phrase (put after the opening person noun: "A 21-year-old woman
# <from a Cree First Nations community> presents …") and a context sentence
# (put before the question sentence) — and the library places them with the
# insertion functions of the templated counterfactuals (medaudit.prep.perturb), so
# the options and the question sentence cannot change. Each piece is checked
# and, when a check fails, revised (medaudit.studies.agents); every attempt is kept.

PIECES = ("identity", "context")
_DIGIT = re.compile(r"\d")


def other_items(medqa5: pd.DataFrame, cs: CulturalSet, n: int | None, seed: int) -> pd.DataFrame:
    """``n`` patient vignettes of the 5-option MedQA test file
    (``data.load_medqa(…, 5)``) that are not among the released items
    (compared by normalised question text), in a seeded random order; all of
    them when ``n`` is None. A patient vignette opens with a person noun
    (:func:`perturb.opening_noun_end`): the identity phrase goes after it."""
    released = {question_key(q) for q in cs.variants.loc[cs.variants["kind"] == ORIGINAL, "question"]}
    pool = medqa5[~medqa5["question"].map(question_key).isin(released)
                  & medqa5["question"].map(lambda q: perturb.opening_noun_end(q) is not None)]
    pool = pool.sample(frac=1.0, random_state=seed)
    return (pool if n is None else pool.head(n)).assign(form="5opt").reset_index(drop=True)


def piece_examples(checked: pd.DataFrame, culture: str, piece: str, config: CulturalConfig) -> list[str]:
    """In-context examples of one piece for one culture, from the released
    variants (``checked`` from :func:`check_variants`): the ``shots``
    shortest distinct added texts with no clinical term flagged. Identity:
    added text of an Id variant that opens with one of the ``openers`` (a
    phrase that follows the person noun). Context: added text of a Ctx
    variant that is a whole sentence of the variant, without digits."""
    a = config.augment
    c = checked[(checked["culture"] == culture) & (checked["clinical_terms"] == "") & (checked["added"] != "")]
    if piece == "identity":
        c = c[c["cue"] == config.cues["i"]["name"]]
        rx = r"^(?:" + "|".join(map(re.escape, a["identity"]["openers"])) + r")\b"
        texts = c.loc[c["added"].str.match(rx), "added"]
    elif piece == "context":
        c = c[c["cue"] == config.cues["c"]["name"]]
        whole = [t for t, q in zip(c["added"], c["question"])
                 if t in _text.split_sentences(q) and not _DIGIT.search(t)]
        texts = pd.Series(whole, dtype=object)
    else:
        raise ValueError(f"unknown piece '{piece}' (have {PIECES})")
    distinct = sorted(set(texts), key=lambda t: (len(t), t))
    return distinct[: int(a.get("shots", 3))]


def piece_messages(question: str, culture_key: str, piece: str, examples: Sequence[str],
                   config: CulturalConfig) -> list[dict]:
    """The augmenter's messages for one piece (``prompts/cultural_augment_*.txt``)."""
    culture = config.cultures[culture_key]
    shots = "\n".join(f'- "{e}"' for e in examples)
    fields = {"description": culture.get("description", culture["long"]), "examples": shots,
              "max_words": config.augment[piece]["max_words"], "question": question}
    if piece == "identity":
        end = perturb.opening_noun_end(question)
        if end is None:
            raise ValueError(f"no opening person noun to attach an identity phrase to: {question[:80]!r}")
        start = _text.sentence_spans(question)[0][0]
        fields.update(opening=question[start:end] + " …", noun=question[start:end].split()[-1])
    user = prompts.load(f"cultural_augment_{piece}").format(**fields)
    return [{"role": "system", "content": prompts.load("cultural_augment_system")},
            {"role": "user", "content": user}]


def augment_jobs(items: pd.DataFrame, checked: pd.DataFrame, config: CulturalConfig,
                 cultures: Sequence[str] | None = None) -> pd.DataFrame:
    """One agent job per item × culture × piece (identity, context):
    item_id, condition ("<culture>:<piece>"), culture, culture_key, piece,
    original, examples (from the released variants, :func:`piece_examples`
    on ``checked``) and messages."""
    by_name = {v["name"]: k for k, v in config.cultures.items()}
    rows = []
    for name in cultures or config.culture_names:
        t = by_name[name]
        for piece in PIECES:
            shots = piece_examples(checked, name, piece, config)
            for it in items.itertuples(index=False):
                rows.append({"item_id": it.item_id, "condition": f"{name}:{piece}", "culture": name,
                             "culture_key": t, "piece": piece, "original": it.question, "examples": shots,
                             "messages": piece_messages(it.question, t, piece, shots, config)})
    return pd.DataFrame(rows)


def tidy_piece(text_: str, piece: str) -> str:
    """An identity phrase without a final full stop or comma (it goes inside
    a sentence); a context sentence ending in one full stop."""
    t = re.sub(r"\s+", " ", text_).strip().lstrip("-•* ").strip()
    if piece == "identity":
        return t.rstrip(".,;").strip()
    return t if t.endswith((".", "!")) else t + "."


def piece_problems(job, text_: str, config: CulturalConfig) -> list[str]:
    """Why a piece cannot be used (empty list: accepted). The text is first
    tidied (:func:`tidy_piece`).

    * ``empty``; ``too long`` (over ``max_words`` of cultures.yaml);
    * ``numbers``: a digit (ages, doses and values belong to the vignette);
    * identity: ``no identifier`` (does not match the culture's
      ``identifiers``), ``not a phrase`` (more than one sentence);
    * context: ``names the identity`` (matches ``identifiers``), ``not one
      sentence``, ``copies an example`` (an in-context example word for word:
      it was written for another patient; an identity phrase may repeat
      one, as the released ones do);
    * both: ``clinical terms`` from ``clinical_terms`` — the augmenter was
      told to add none; the seed's released texts have some, which is why
      their variants are only flagged for review, but a generated piece can
      be asked again.
    """
    t = tidy_piece(text_, job["piece"])
    if not t.strip(" ."):
        return ["empty: write the text that was asked for"]
    problems = []
    limit = config.augment[job["piece"]]["max_words"]
    if len(t.split()) > limit:
        problems.append(f"too long: {len(t.split())} words; use at most {limit}")
    if _DIGIT.search(t):
        problems.append("numbers: use no digits or numbers")
    named = re.search(rf"(?i)\b(?:{config.cultures[job['culture_key']]['identifiers']})", t) is not None
    n_sent = len(_text.split_sentences(t))
    if job["piece"] == "identity":
        if not named:
            problems.append(f"no identifier: state the patient's background "
                            f"({config.cultures[job['culture_key']]['long']}) explicitly")
        if n_sent > 1:
            problems.append("not a phrase: write one short phrase, not sentences")
    else:
        if named:
            problems.append("names the identity: do not name the patient's culture, religion or origin")
        if question_key(t) in {question_key(tidy_piece(e, "context")) for e in job.get("examples", ())}:
            problems.append("copies an example: write a new sentence that fits this patient")
        if n_sent != 1:
            problems.append(f"not one sentence: write exactly one sentence (got {n_sent})")
    terms = [term for term in config.clinical_terms if re.search(r"(?i)\b(?:" + term + ")", t)]
    if terms:
        problems.append(f"clinical terms: remove {', '.join(terms)}")
    return problems


def compose_variants(items: pd.DataFrame, results: pd.DataFrame, neutral_sentence: str,
                     config: CulturalConfig) -> pd.DataFrame:
    """The generated set in the shape of :attr:`CulturalSet.variants`: per
    item the original, the rebuilt neutral control and, per culture, the Id
    (identity phrase after the opening person noun), Ctx (context sentence
    before the question sentence) and Id+Ctx (both) variants whose pieces
    were accepted (agent ``results``); ``inserted`` holds the pieces,
    ``problems`` the :func:`perturb.check_variant` invariants (the question
    sentence unchanged, nothing but the insertion changed)."""
    ok = results[results["ok"]].set_index(["item_id", "condition"])["text"]
    rows = []
    for it in items.itertuples(index=False):
        q = it.question
        base = {"item_id": it.item_id, "index": None}
        rows += baseline_rows(base, q, neutral_sentence, source="medqa")
        for t, tinfo in config.cultures.items():
            pieces = {p: tidy_piece(ok[(it.item_id, f"{tinfo['name']}:{p}")], p) for p in PIECES
                      if (it.item_id, f"{tinfo['name']}:{p}") in ok.index}
            for c, cinfo in config.cues.items():
                need = cinfo.get("pieces", [])
                if not need or any(p not in pieces for p in need):
                    continue
                v, problems = q, []
                if "context" in need:
                    v = perturb.insert_before_final(v, pieces["context"])
                    problems += perturb.check_variant(q, v, pieces["context"])
                if "identity" in need:
                    before = v
                    # seed 003's identity phrase follows the patient's own noun ("A 45-year-old man from a
                    # Cree First Nations community …"): seed 000 B.1's "patient" reading is not this study's
                    v = perturb.embed_in_opening(v, pieces["identity"], noun="vignette")
                    problems += perturb.check_variant(before, v, pieces["identity"])
                rows.append({**base, "condition": config.condition(t, c), "kind": "cultural",
                             "culture": tinfo["name"], "cue": cinfo["name"], "question": v,
                             "inserted": " | ".join(pieces[p] for p in need), "source": "generated",
                             "same_as_original": v == q, "problems": "; ".join(dict.fromkeys(problems))})
    var = pd.DataFrame(rows)
    return var.assign(ok=var["problems"] == "")


def generated_set(items: pd.DataFrame, variants_: pd.DataFrame) -> CulturalSet:
    """A :class:`CulturalSet` of generated variants, so that
    :func:`check_variants`, :func:`check_summary` and the answering and
    scoring code serve them as they serve the released ones."""
    counts = variants_.groupby("kind").size()
    report = pd.DataFrame([("items", variants_["item_id"].nunique()),
                           ("cultural variants", int(counts.get("cultural", 0))),
                           ("variants failing the insertion checks", int((~variants_["ok"]).sum()))],
                          columns=["what", "value"])
    return CulturalSet(variants_, {"5opt": items.reset_index(drop=True)}, pd.DataFrame(), report)
