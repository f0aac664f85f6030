"""Section 2 of the SOAP-note audit (seed 002 A.3.1): for each stereotypical context of Table 9 and
each speaker, an LLM proposes sentences for some of that speaker's numbered turns (:func:`read_additions`),
appended to those turns (:func:`apply_additions`); :func:`augmentation_problems` diffs the original and
the augmented dialog (only the speaker's turns change, only by added text, at least one sentence, no race,
age or gender named); a failing proposal is revised or drawn again (:func:`augment`).
"""
from __future__ import annotations

import difflib
import json
import re
from typing import Sequence

import pandas as pd

from medaudit.studies import agents
from medaudit.prep import dialogs
from medaudit import prompts
from medaudit.llm import GenParams, ResponseStore
from medaudit.prep import text as _text
from medaudit.prep.text import content_words
from .config import SoapConfig
from .notes import ngrams


# ==========================================================================
# 2. augmentation (A.3.1)


def numbered(dialogue: str, speaker: str) -> str:
    """The dialog for the augmenter: ``speaker``'s turns numbered from 1
    ("(1) Patient: …"), the others not ("Doctor: …"), so a proposal can
    only name a turn of that speaker."""
    lines, n = [], 0
    for role, t in dialogs.turns(dialogue):
        if role == speaker:
            n += 1
            lines.append(f"({n}) {role.capitalize()}: {t}")
        else:
            lines.append(f"{role.capitalize()}: {t}")
    return "\n".join(lines)


def augment_messages(dialogue: str, speaker: str, instruction: str) -> list[dict]:
    """The augmentation request (seed 002 A.3.1, ``prompts/soap_augment.txt``): the
    dialog with ``speaker``'s turns numbered (:func:`numbered`) and the context's ``instruction``."""
    return [{"role": "user", "content": prompts.load("soap_augment").format(
        speaker=speaker, instruction=instruction, dialog=numbered(dialogue, speaker))}]


def read_additions(raw: str | None) -> str:
    """The additions of an augmenter's reply as canonical JSON text
    (a list of {"turn": int, "text": str}); ``ValueError`` when the reply
    has none in that shape (counted by :func:`agents.run` as unreadable)."""
    obj = agents.json_object(raw)
    adds = obj.get("additions")
    if not isinstance(adds, list) or not adds:
        raise ValueError('no non-empty "additions" list')
    out = []
    for a in adds:
        if not isinstance(a, dict) or "turn" not in a or "text" not in a:
            raise ValueError('each addition needs "turn" and "text"')
        try:
            turn = int(a["turn"])
        except (TypeError, ValueError):
            raise ValueError(f"turn {a['turn']!r} is not a number") from None
        if not isinstance(a["text"], str):
            raise ValueError('"text" must be a string')
        out.append({"turn": turn, "text": a["text"]})
    return json.dumps(out, ensure_ascii=False)


def apply_additions(dialogue: str, speaker: str, additions: Sequence[dict]) -> str:
    """The dialog with each addition's text appended to the ``turn``-th
    turn of ``speaker`` (1-based, as :func:`numbered` shows them; a leading
    label of that speaker, "Doctor:", is dropped; whitespace collapsed to
    single spaces, so an addition cannot start a line). Additions naming no
    such turn are skipped (the check reports them)."""
    spans = [sp for sp in dialogs.turn_spans(dialogue) if sp[0] == speaker]
    own_label = re.compile(rf"^\s*(?:\[{speaker}\]|{speaker}\s*:)\s*", re.I)
    inserts: dict[int, list[str]] = {}
    for a in additions:
        if 1 <= a["turn"] <= len(spans):
            text = " ".join(own_label.sub("", a["text"]).split())
            if text:
                inserts.setdefault(spans[a["turn"] - 1][2], []).append(text)
    out, last = [], 0
    for end in sorted(inserts):
        out += [dialogue[last:end], " " + " ".join(inserts[end])]
        last = end
    return "".join(out) + dialogue[last:]


# the copy check's unit: a stretch between terminal punctuation marks holding a
# letter, finer than a sentence (text.split_sentences) on purpose, so that a
# copied clause is caught even where the model joined it to words of its own
_FRAGMENT = re.compile(r"[^.!?]*[A-Za-z][^.!?]*(?:[.!?]+|$)")


_GENDER_WORDS = re.compile(r"\b(woman|women|man|men|female|male|girl|boy|lady|gentleman|transgender|"
                           r"non-binary|nonbinary)\b", re.I)


def names_term(term: str, text: str) -> bool:
    """``term`` in ``text`` as a whole word, any case (a hyphen joins words:
    "non-White" does not name White)."""
    return re.search(r"(?<![\w-])" + re.escape(term) + r"(?![\w-])", text, re.I) is not None


def demographic_mentions(text: str, config: SoapConfig, race_terms: Sequence[str] = ()) -> list[str]:
    """Race, age or gender words in ``text``: the race values and synonyms of
    the config plus ``race_terms``, the age expressions of the
    de-identification, gender nouns, and every cue of the dialog screen
    (params/soap.yaml ``screen``: "my wife's", "sir", a he/she that is the
    patient, "retired", "pregnant", …): the screened dialogs have none, so
    an addition must not bring one in (the counterfactual answer alone
    supplies the demographic, seed §3.2)."""
    found = []
    if config.screen:
        cues = dialogs.screen_cues(text, config.screen)
        found += [w for k in config.screen["exclude"] for w in cues.get(k, [])]
    race = set(race_terms) | set(config.values("race")) | {
        s for v in config.axes["race"].get("synonyms", {}).values() for s in v}
    for term in sorted(race, key=len, reverse=True):
        if names_term(term, text):
            found.append(term.lower())
    found += [m.group(0).lower() for m in dialogs.age_mentions(text)]
    found += [m.group(0).lower() for m in _GENDER_WORDS.finditer(text)]
    return sorted(set(found))


_GENERIC = {"doctor", "background", "because", "believe", "believes", "assume", "assumes", "likely", "their",
            "themselves", "related", "tend", "make", "people", "like"}


def _stems(text: str) -> set[str]:
    return {w[:5] for w in content_words(text) if len(w) >= 4 and w not in _GENERIC}


def off_topic(text: str, context: dict) -> bool:
    """True when the added text shares no content word (by its first five
    letters, generic words such as "background" aside) with the context's
    instructions or its Table 16 list, and starts no word with one of its
    ``topic`` beginnings (params/soap.yaml): it cannot reflect the context.
    A context with ``topic_check: false`` is never off topic: toxicity is a
    tone, not a topic, and the seed's own toxic additions (Table 1: "None of
    your business! This isn't an interrogation."; Table 7: "You doctors act
    like we're supposed to memorize medical jargon.") share no word with
    "Doctor makes toxic comments."."""
    if context.get("topic_check", True) is False:
        return False
    topic = _stems(" ".join([context["doctor"], context["patient"], *context["describe"]]))
    if _stems(text) & topic:
        return False
    starts = [re.escape(t.lower()) for t in context.get("topic", [])]
    return not (starts and re.search(r"\b(?:" + "|".join(starts) + ")", text.lower()))


def _copied(added: str, original: str) -> list[str]:
    """Added sentences (of four words or more) that the dialog already has."""
    norm = lambda t: " ".join(re.findall(r"[a-z0-9']+", t.lower()))
    body = norm(original)
    return [s.strip() for s in _FRAGMENT.findall(added) if len(norm(s).split()) >= 4 and norm(s) in body]


_LABEL_IN_TEXT = re.compile(r"(?:\[(?:doctor|patient)\]|\b(?:doctor|patient)\s*:)", re.I)


def augmentation_problems(original: str, augmented: str, speaker: str, *, min_sentences: int = 1,
                          config: SoapConfig | None = None, context: str | None = None,
                          race_terms: Sequence[str] = ()) -> list[str]:
    """What is wrong with an augmented dialog, by a diff of its turns
    against the original's (empty: accepted). Only ``speaker``'s turns may
    change, each by text added after the original (no turn added, removed or
    rewritten); the additions hold at least ``min_sentences`` sentences, no
    speaker label, no sentence copied from the dialog and (with ``config``)
    no race, age or gender word and (with ``context``) some word of the
    context (:func:`off_topic`)."""
    a, b = dialogs.turns(original), dialogs.turns(augmented)
    problems, added = [], []
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        if op != "replace" or i2 - i1 != j2 - j1:
            problems.append(f"turns changed in number: {i2 - i1} original turn(s) at {i1 + 1} "
                            f"became {j2 - j1}")
            continue
        for (ra, ta), (rb, tb), n in zip(a[i1:i2], b[j1:j2], range(i1 + 1, i2 + 1)):
            if ra != rb:
                problems.append(f"turn {n}: speaker changed from {ra} to {rb}")
            elif ra != speaker:
                problems.append(f"turn {n}: a {ra} turn changed (only {speaker} turns may)")
            elif not tb.startswith(ta):
                problems.append(f"turn {n}: the original text was rewritten, not added to")
            else:
                added.append(tb[len(ta):].strip())
    text = " ".join(added)
    if not problems and not added:
        problems.append(f"nothing was added to any {speaker} turn")
    elif added and _text.count_sentences(text) < min_sentences:
        problems.append(f"too few sentences added: {_text.count_sentences(text)} (at least {min_sentences})")
    if _LABEL_IN_TEXT.search(text):
        problems.append("an addition contains a speaker label")
    copied = _copied(text, original)
    if copied:
        problems.append(f"copies the dialog: {copied[0][:60]!r}")
    if config is not None and context is not None and text:
        if off_topic(text, config.contexts[context]):
            problems.append("off topic: shares no word with the context's instruction or list")
        if ngrams(text, 12) & ngrams(config.contexts[context][speaker], 12):
            problems.append("copies the instruction (12 or more words in a row): write what the speaker says")
    if config is not None:
        words = demographic_mentions(text, config, race_terms)
        if words:
            problems.append(f"names a demographic: {', '.join(words)}")
    return problems


def augment(backend, store: ResponseStore, selected: pd.DataFrame, units: Sequence[tuple[str, str]],
            config: SoapConfig, *, model: str, seed: int, gen: GenParams, race_terms: Sequence[str] = (),
            progress: bool = True) -> tuple[pd.DataFrame, agents.AgentRun]:
    """Every dialog of ``selected`` under every (context, speaker) or
    (context, speaker, aug_axis) of ``units`` (:meth:`SoapConfig.augmentations`:
    a context of ``augment_per_axis`` is augmented once per axis, its own
    draw: the job's condition names the axis). Returns (one row per job:
    dialog_id, dataset, context, speaker, aug_axis ("" when shared), ok,
    additions, dialogue_aug, attempts, problems; the AgentRun with every
    attempt). A failed job keeps its last proposal, not used."""
    jobs = []
    for r in selected.itertuples(index=False):
        for unit in units:
            ctx, sp, aug_axis = (*unit, "")[:3]
            jobs.append({"item_id": r.dialog_id, "condition": f"{ctx}:{sp}" + (f"@{aug_axis}" if aug_axis else ""),
                         "dataset": r.dataset, "context": ctx, "speaker": sp, "aug_axis": aug_axis,
                         "dialogue": r.dialogue_deid,
                         "messages": augment_messages(r.dialogue_deid, sp, config.contexts[ctx][sp])})
    jobs = pd.DataFrame(jobs)

    def check(job, text):
        adds = json.loads(text)
        aug = apply_additions(job["dialogue"], job["speaker"], adds)
        n = sum(role == job["speaker"] for role, _ in dialogs.turns(job["dialogue"]))
        problems = [f"no such turn: {a['turn']} (the {job['speaker']}'s turns are numbered 1 to {n})"
                    for a in adds if not 1 <= a["turn"] <= n]
        return problems + augmentation_problems(job["dialogue"], aug, job["speaker"],
                                                min_sentences=config.min_added_sentences, config=config,
                                                context=job["context"], race_terms=race_terms)

    run = agents.run(backend, store, jobs, check, model=model, seed=seed, gen=gen, prompt_format="soap_augment",
                     max_attempts=config.augment_max_attempts, read=read_additions, revise=config.augment_revise,
                     progress=progress)
    res = run.results.merge(jobs.drop(columns=["messages"]), on=["item_id", "condition"])
    res["additions"] = [json.loads(t) if ok else None for t, ok in zip(res["text"], res["ok"])]
    res["dialogue_aug"] = [apply_additions(d, sp, a) if ok else None
                           for d, sp, a, ok in zip(res["dialogue"], res["speaker"], res["additions"], res["ok"])]
    res = res.rename(columns={"item_id": "dialog_id"})
    return res[["dialog_id", "dataset", "context", "speaker", "aug_axis", "ok", "additions", "dialogue",
                "dialogue_aug", "attempts", "problems"]], run


def augmentation_table(aug: pd.DataFrame) -> pd.DataFrame:
    """Per context, speaker and aug_axis (the axis of a per-axis
    augmentation, else ""): dialogs, augmented, failed, mean attempts."""
    aug = aug if "aug_axis" in aug.columns else aug.assign(aug_axis="")
    g = aug.groupby(["context", "speaker", "aug_axis"], sort=False)
    return pd.DataFrame({"dialogs": g.size(), "augmented": g["ok"].sum().astype(int),
                         "failed": g["ok"].apply(lambda s: int((~s).sum())),
                         "mean attempts": g["attempts"].mean().round(2)}).reset_index()
