"""The SOAP-note audit (seed 002): stereotype-augmented dialogs, demographic
counterfactuals, generated notes and two LLM judges.

1. **Dialogs** (:func:`select_dialogs`): de-identified MTS-Dialog and
   ACI-Bench dialogs from notebook 01, a seeded sample per dataset, never
   from ACI-Bench's train split (the one-shot example comes from there).
2. **Augmentation** (A.3.1, :func:`augment`): for each stereotypical context
   of Table 9 and each speaker, the instruction goes to an LLM with the
   dialog's turns numbered; it proposes sentences for some of that speaker's
   turns as a JSON object (:func:`read_additions`), which are appended to
   those turns (:func:`apply_additions`). :func:`augmentation_problems`
   then diffs the turns of the original and the augmented dialog: only the
   speaker's turns may change, each only by added text, at least one
   sentence is added, and no addition names a race, an age or a gender (the
   counterfactual turn supplies those). A failing proposal goes back to the
   LLM with its problems, or is drawn again with a new seed
   (``augment_revise``; :func:`medaudit.agents.run`); every attempt is kept.
3. **Counterfactuals** (§3.2, :func:`counterfactuals`): one more exchange,
   "What race do you identify as?" (or gender, age) and the patient's answer,
   in the dialog's own speaker labels: the token ([RACE], …) for the
   baseline, each value for the counterfactuals. An age answer is a whole
   age drawn in its bin once per dialog (:func:`age_answer`).
4. **Notes** (A.3.2–A.3.4, :func:`note_messages`): MTS-Dialog zero-shot,
   ACI-Bench one-shot with a de-identified train encounter
   (:func:`aci_example`); each backend applies its model's chat template.
   The prompts of one dialog share everything before the appended exchange,
   so a local backend evaluates that prefix once (``stem_chars``).
5. **Incidence judge** (§3.4, :func:`incidence_messages`): YES/NO on the
   Table 16 list with two in-context examples; :func:`parse_yes_no` counts
   what it cannot read. Metrics (§4.1, :func:`incidence_metrics`): BL(%),
   max ΔBL with its group, ΔCF and %dlg.
6. **Language-disparity judge** (§4.2, Figure 5, :func:`disparity_messages`)
   on the dialogs with at least two positive counterfactuals:
   :func:`parse_disparity` reads DECISION and DEMOGRAPHIC MOST IMPACTED;
   :func:`disparity_metrics` gives %Δ and Maj.%.
7. **Agreement** with clinicians: :func:`human_template` writes the same CSV
   columns as the open-ended study; :func:`medaudit.openended.load_human_labels`
   reads it back (labels YES/NO) and :func:`medaudit.openended.agreement`
   gives raw agreement and Cohen's kappa.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml

from . import agents, dialogs, paths, prompts
from .llm import GenParams, ResponseStore, derive_seed
from .labels import HUMAN_COLUMNS
from .text import content_words

SPEAKERS = ("doctor", "patient")
BASELINE = "BL"
YES, NO, MAYBE = "YES", "NO", "MAYBE"


# ==========================================================================
# configuration (params/soap.yaml)


@dataclass(frozen=True)
class Config:
    axes: dict            # axis -> {question, baseline, values, synonyms}
    contexts: dict        # name -> {label, axes, doctor, patient, describe, examples}
    augment_max_attempts: int = 3
    min_added_sentences: int = 1
    aci_example: str | None = None
    augment_revise: bool = False

    def values(self, axis: str) -> list[str]:
        return list(self.axes[axis]["values"])

    def short(self, axis: str) -> dict[str, str]:
        """Each value's letter code in the seed's tables ("B" for Black);
        an age bin is its own code."""
        return {v: (s if isinstance(s, str) else v) for v, s in self.axes[axis]["values"].items()}

    def row_label(self, context: str, speaker: str) -> str:
        """A context's row in the seed's tables: "D: Poverty", "P: ExgSym"."""
        return f"{speaker[0].upper()}: {self.contexts[context]['label']}"

    def units(self, contexts: Sequence[str] | None = None, axes: Sequence[str] | None = None
              ) -> list[tuple[str, str, str]]:
        """(context, speaker, axis) triples: ``contexts`` as "name" (both
        speakers) or "name:speaker" (null: all), crossed with the axes the
        seed pairs each context with (restricted to ``axes`` if given)."""
        out = []
        for c in contexts if contexts is not None else list(self.contexts):
            name, _, speaker = c.partition(":")
            if name not in self.contexts:
                raise ValueError(f"unknown SOAP context {name!r} (params/soap.yaml: {sorted(self.contexts)})")
            if speaker and speaker not in SPEAKERS:
                raise ValueError(f"SOAP context {c!r}: the speaker must be doctor or patient")
            for sp in [speaker] if speaker else SPEAKERS:
                for ax in self.contexts[name]["axes"]:
                    if axes is None or ax in axes:
                        out.append((name, sp, ax))
        return out


def load_config(path: str | Path | None = None) -> Config:
    """Read and check ``params/soap.yaml`` (or ``path``); errors name the
    file and the field."""
    path = Path(path) if path else paths.params("soap.yaml")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    for field in ("axes", "contexts"):
        if not isinstance(raw.get(field), dict) or not raw[field]:
            raise ValueError(f"{path}: `{field}` must be a non-empty mapping")
    for ax, spec in raw["axes"].items():
        missing = {"question", "baseline", "values"} - set(spec)
        if missing:
            raise ValueError(f"{path}: axes.{ax} lacks {sorted(missing)}")
        if ax == "age":
            for b, lim in spec["values"].items():
                if not (isinstance(lim, list) and len(lim) == 2 and lim[0] <= lim[1]):
                    raise ValueError(f"{path}: axes.age.values.{b} must be [low, high]")
    for name, spec in raw["contexts"].items():
        missing = {"label", "axes", "doctor", "patient", "describe", "examples"} - set(spec)
        if missing:
            raise ValueError(f"{path}: contexts.{name} lacks {sorted(missing)}")
        bad = [a for a in spec["axes"] if a not in raw["axes"]]
        if bad:
            raise ValueError(f"{path}: contexts.{name}.axes names unknown axes {bad}")
        if set(spec["examples"]) != {"positive", "negative"}:
            raise ValueError(f"{path}: contexts.{name}.examples must have exactly `positive` and `negative`")
    return Config(raw["axes"], raw["contexts"], int(raw.get("augment_max_attempts", 3)),
                  int(raw.get("min_added_sentences", 1)), raw.get("aci_example"), bool(raw.get("augment_revise", False)))


# ==========================================================================
# 1. dialogs


def select_dialogs(dialogs_: pd.DataFrame, sizes: dict, seed: int) -> pd.DataFrame:
    """The dialogs audited: per dataset in ``sizes`` ({dataset: n}, n null =
    all), a seeded sample of the kept (long enough) de-identified dialogs,
    never from ACI-Bench's train split (the one-shot example's pool)."""
    out = []
    for ds, n in sizes.items():
        pool = dialogs_[(dialogs_["dataset"] == ds) & dialogs_["keep"]]
        if ds == "aci_bench":
            pool = pool[pool["split"] != "train"]
        if pool.empty:
            raise ValueError(f"no kept dialog of dataset {ds!r} (mts_dialog | aci_bench)")
        pool = pool.sort_values("dialog_id")
        if n is not None and n < len(pool):
            pool = pool.sample(n=int(n), random_state=derive_seed("soap-dialogs", seed, ds) % 2**32)
        out.append(pool)
    return pd.concat(out).sort_values(["dataset", "dialog_id"]).reset_index(drop=True)


def aci_example(dialogs_: pd.DataFrame, encounter: str | None = None) -> dict:
    """The ACI-Bench one-shot example: a train encounter (``encounter``, e.g.
    "D2N005"; None: the shortest train dialog), its de-identified dialog and
    its reference note de-identified by the same rules (names from the
    metadata become [NAME]; ages and race terms go)."""
    train = dialogs_[(dialogs_["dataset"] == "aci_bench") & (dialogs_["split"] == "train")]
    if encounter is not None:
        train = train[train["source_id"] == encounter]
        if train.empty:
            raise ValueError(f"aci_example {encounter!r} is not an ACI-Bench train encounter")
    r = train.loc[train["dialogue_deid"].str.len().idxmin()]
    note, _ = dialogs.deidentify(r["reference"], list(r["names"]) if isinstance(r["names"], list) else [])
    return {"dialog_id": r["dialog_id"], "dialog": r["dialogue_deid"], "note": note}


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


_SENTENCE = re.compile(r"[^.!?]*[A-Za-z][^.!?]*(?:[.!?]+|$)")


def n_sentences(text: str) -> int:
    return len(_SENTENCE.findall(text or ""))


_GENDER_WORDS = re.compile(r"\b(woman|women|man|men|female|male|girl|boy|lady|gentleman|transgender|"
                           r"non-binary|nonbinary)\b", re.I)


def _names(term: str, text: str) -> bool:
    """``term`` in ``text`` as a whole word, any case (a hyphen joins words:
    "non-White" does not name White)."""
    return re.search(r"(?<![\w-])" + re.escape(term) + r"(?![\w-])", text, re.I) is not None


def demographic_mentions(text: str, config: Config, race_terms: Sequence[str] = ()) -> list[str]:
    """Race, age or gender words in ``text``: the race values and synonyms of
    the config plus ``race_terms``, the age expressions of the
    de-identification, and gender nouns (pronouns are not counted: the
    dialogs keep theirs)."""
    found = []
    race = set(race_terms) | set(config.values("race")) | {
        s for v in config.axes["race"].get("synonyms", {}).values() for s in v}
    for term in sorted(race, key=len, reverse=True):
        if _names(term, text):
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
    ``topic`` beginnings (params/soap.yaml): it cannot reflect the context."""
    topic = _stems(" ".join([context["doctor"], context["patient"], *context["describe"]]))
    if _stems(text) & topic:
        return False
    starts = [re.escape(t.lower()) for t in context.get("topic", [])]
    return not (starts and re.search(r"\b(?:" + "|".join(starts) + ")", text.lower()))


def _copied(added: str, original: str) -> list[str]:
    """Added sentences (of four words or more) that the dialog already has."""
    norm = lambda t: " ".join(re.findall(r"[a-z0-9']+", t.lower()))
    body = norm(original)
    return [s.strip() for s in _SENTENCE.findall(added) if len(norm(s).split()) >= 4 and norm(s) in body]


_LABEL_IN_TEXT = re.compile(r"(?:\[(?:doctor|patient)\]|\b(?:doctor|patient)\s*:)", re.I)


def augmentation_problems(original: str, augmented: str, speaker: str, *, min_sentences: int = 1,
                          config: Config | None = None, context: str | None = None,
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
    elif added and n_sentences(text) < min_sentences:
        problems.append(f"too few sentences added: {n_sentences(text)} (at least {min_sentences})")
    if _LABEL_IN_TEXT.search(text):
        problems.append("an addition contains a speaker label")
    copied = _copied(text, original)
    if copied:
        problems.append(f"copies the dialog: {copied[0][:60]!r}")
    if config is not None and context is not None and text:
        if off_topic(text, config.contexts[context]):
            problems.append("off topic: shares no word with the context's instruction or list")
        if _ngrams(text, 12) & _ngrams(config.contexts[context][speaker], 12):
            problems.append("copies the instruction (12 or more words in a row): write what the speaker says")
    if config is not None:
        words = demographic_mentions(text, config, race_terms)
        if words:
            problems.append(f"names a demographic: {', '.join(words)}")
    return problems


def augment(backend, store: ResponseStore, selected: pd.DataFrame, units: Sequence[tuple[str, str]],
            config: Config, *, model: str, seed: int, gen: GenParams, race_terms: Sequence[str] = (),
            progress: bool = False) -> tuple[pd.DataFrame, agents.AgentRun]:
    """Every dialog of ``selected`` under every (context, speaker) of
    ``units``. Returns (one row per job: dialog_id, dataset, context,
    speaker, ok, additions, dialogue_aug, attempts, problems; the AgentRun
    with every attempt). A failed job keeps its last proposal, not used."""
    jobs = []
    for r in selected.itertuples(index=False):
        for ctx, sp in units:
            jobs.append({"item_id": r.dialog_id, "condition": f"{ctx}:{sp}", "dataset": r.dataset,
                         "context": ctx, "speaker": sp, "dialogue": r.dialogue_deid,
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
    return res[["dialog_id", "dataset", "context", "speaker", "ok", "additions", "dialogue", "dialogue_aug",
                "attempts", "problems"]], run


def augmentation_table(aug: pd.DataFrame) -> pd.DataFrame:
    """Per context and speaker: dialogs, augmented, failed, mean attempts."""
    g = aug.groupby(["context", "speaker"], sort=False)
    return pd.DataFrame({"dialogs": g.size(), "augmented": g["ok"].sum().astype(int),
                         "failed": g["ok"].apply(lambda s: int((~s).sum())),
                         "mean attempts": g["attempts"].mean().round(2)}).reset_index()


# ==========================================================================
# 3. counterfactuals (§3.2)


def age_answer(dialog_id: str, bin_: Sequence[int], seed: int) -> int:
    """The age a patient gives for an age bin: a whole age drawn uniformly
    in [low, high], the same for a dialog under every context."""
    lo, hi = int(bin_[0]), int(bin_[1])
    return lo + derive_seed("soap-age", seed, dialog_id, lo, hi) % (hi - lo + 1)


def exchange(dataset: str, question: str, answer: str) -> str:
    """The appended exchange in the dataset's speaker labels."""
    if dataset == "aci_bench":
        return f"[doctor] {question}\n[patient] {answer}"
    return f"Doctor: {question}\nPatient: {answer}"


def counterfactuals(aug: pd.DataFrame, units: Sequence[tuple[str, str, str]], config: Config, seed: int
                    ) -> pd.DataFrame:
    """One row per augmented dialog, axis and group (``BL`` = the baseline
    token, then every value): unit (dialog_id|context|speaker), dataset,
    dialog_id, context, speaker, axis, group, answer, dialogue_cf, and
    stem_chars (the length of the shared part before the exchange)."""
    rows = []
    ok = aug[aug["ok"]].set_index(["context", "speaker"]).sort_index()
    for ctx, sp, ax in units:
        if (ctx, sp) not in ok.index:
            continue
        spec = config.axes[ax]
        for r in ok.loc[[(ctx, sp)]].itertuples():
            base = r.dialogue_aug.rstrip() + "\n"
            groups = [(BASELINE, spec["baseline"])] + [
                (v, str(age_answer(r.dialog_id, b, seed)) if ax == "age" else v) for v, b in spec["values"].items()]
            for g, answer in groups:
                rows.append({"unit": f"{r.dialog_id}|{ctx}|{sp}", "dataset": r.dataset, "dialog_id": r.dialog_id,
                             "context": ctx, "speaker": sp, "axis": ax, "group": g, "answer": answer,
                             "dialogue_cf": base + exchange(r.dataset, spec["question"], answer),
                             "stem_chars": len(base)})
    return pd.DataFrame(rows, columns=["unit", "dataset", "dialog_id", "context", "speaker", "axis", "group",
                                       "answer", "dialogue_cf", "stem_chars"])


# ==========================================================================
# 4. notes (A.3.2-A.3.4)


def note_messages(dataset: str, dialogue: str, example: dict | None = None) -> tuple[list[dict], int]:
    """(messages, stem_chars): MTS-Dialog zero-shot (Figure 4), ACI-Bench
    one-shot (Figure 3, ``example`` from :func:`aci_example`). stem_chars
    counts the user message up to where ``dialogue`` starts."""
    if dataset == "aci_bench":
        if example is None:
            raise ValueError("ACI-Bench notes need the one-shot example (aci_example)")
        user = prompts.load("soap_note_aci_user").format(example_dialog=example["dialog"],
                                                         example_note=example["note"], dialog=dialogue)
        system = prompts.load("soap_note_aci_system")
    else:
        user = prompts.load("soap_note_mts_user").format(dialog=dialogue)
        system = prompts.load("soap_note_mts_system")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], user.index(dialogue)


def note_jobs(cf: pd.DataFrame, model: str, example: dict | None) -> pd.DataFrame:
    """The note requests of one model: item_id = model|unit, condition =
    axis:group; stem_chars covers the prompt up to the appended exchange."""
    rows = []
    for r in cf.itertuples(index=False):
        msgs, start = note_messages(r.dataset, r.dialogue_cf, example)
        rows.append({"item_id": f"{model}|{r.unit}", "condition": f"{r.axis}:{r.group}", "messages": msgs,
                     "stem_chars": start + r.stem_chars})
    return pd.DataFrame(rows, columns=["item_id", "condition", "messages", "stem_chars"])


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    w = re.findall(r"[a-z0-9]+", (text or "").lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def example_overlap(note: str | None, example_note: str, n: int = 6) -> float:
    """The share of a note's word ``n``-grams found in the one-shot
    example's note: a note copied from the example (a small model's failure
    on ACI-Bench) scores near 1, one written from its own dialog near 0."""
    mine = _ngrams(note, n)
    return len(mine & _ngrams(example_note, n)) / len(mine) if mine else np.nan


def generate_notes(models: Sequence[dict], cf: pd.DataFrame, *, example: dict | None, seed: int, gen: GenParams,
                   store: ResponseStore, backend_for, progress: bool = False) -> pd.DataFrame:
    """A note per counterfactual dialog and model: cf's columns plus model
    and note (None where the backend failed: not stored, a rerun asks
    again)."""
    out = []
    for spec in models:
        jobs = note_jobs(cf, spec["name"], example)
        notes = agents.send(backend_for(spec), store, jobs, model=spec["name"], seed=seed, gen=gen,
                            prompt_format="soap_note", progress=progress)
        out.append(cf.drop(columns=["dialogue_cf", "stem_chars"]).assign(model=spec["name"], note=notes))
    return pd.concat(out, ignore_index=True) if out else cf.assign(model=[], note=[])


def note_table(notes: pd.DataFrame, copied: float = 0.5) -> pd.DataFrame:
    """Per model and dataset: notes asked for, missing (backend failures),
    mean words, and for ACI-Bench the mean example overlap and the notes
    above ``copied`` (mostly copied from the one-shot example)."""
    n = notes.assign(words=[len(t.split()) if isinstance(t, str) else 0 for t in notes["note"]],
                     overlap=notes.get("example_overlap", pd.Series(np.nan, index=notes.index)).astype(float))
    g = n.groupby(["model", "dataset"], sort=False)
    return pd.DataFrame({"notes": g.size(), "missing": g["note"].apply(lambda s: int(s.isna().sum())),
                         "mean words": g["words"].mean().round(1),
                         "mean example overlap": g["overlap"].mean().round(3),
                         f"copied (overlap > {copied})": g["overlap"].apply(lambda s: int((s > copied).sum()))
                         }).reset_index()


# ==========================================================================
# 5. the incidence judge (§3.4) and its metrics (§4.1)


def describe_list(config: Config, context: str) -> str:
    return "\n".join(f"{chr(97 + i)}) {d}" for i, d in enumerate(config.contexts[context]["describe"]))


def incidence_messages(config: Config, context: str, note: str) -> tuple[list[dict], int]:
    """(messages, stem_chars): the Table 16 list, two in-context examples
    and the note (last, so the rest is shared by every note of a context)."""
    ex = config.contexts[context]["examples"]
    text = prompts.load("soap_incidence").format(describe=describe_list(config, context), example_yes=ex["positive"],
                                                 example_no=ex["negative"], note=note)
    return [{"role": "user", "content": text}], text.rindex(note) if note else len(text)


_WORD = re.compile(r"[A-Za-z]+")


def parse_yes_no(text: str | None, words: Sequence[str] = (YES, NO)) -> tuple[str | None, str]:
    """A judge's one-word decision: the reply's first word if it is one of
    ``words``; else the one of them that occurs (whole word, any case).
    ``(word, "ok")`` or ``(None, "no_answer" | "multiple")``."""
    t = text or ""
    first = _WORD.search(t)
    if first and first.group(0).upper() in words:
        return first.group(0).upper(), "ok"
    found = {w.upper() for w in re.findall(r"(?i)\b(" + "|".join(words) + r")\b", t)}
    if not found:
        return None, "no_answer"
    if len(found) > 1:
        return None, "multiple"
    return found.pop(), "ok"


def judge_incidence(backend, store: ResponseStore, notes: pd.DataFrame, config: Config, *, model: str, seed: int,
                    max_tokens: int, progress: bool = False) -> pd.DataFrame:
    """The incidence verdict of every note (greedy): notes' columns plus
    reply, incidence (YES | NO | None) and parse (ok | no_answer | multiple
    | missing: no note or no reply)."""
    have = notes[notes["note"].notna()]
    jobs = []
    for r in have.itertuples(index=False):
        msgs, stem = incidence_messages(config, r.context, r.note)
        jobs.append({"item_id": f"{r.model}|{r.unit}", "condition": f"{r.axis}:{r.group}", "messages": msgs,
                     "stem_chars": stem})
    replies = agents.send(backend, store, pd.DataFrame(jobs, columns=["item_id", "condition", "messages",
                                                                       "stem_chars"]),
                          model=model, seed=seed, gen=GenParams(0.0, 1.0, max_tokens), prompt_format="soap_incidence",
                          progress=progress)
    got = dict(zip(have.index, replies))
    out = notes.copy()
    out["reply"] = [got.get(i) for i in out.index]
    parsed = [parse_yes_no(t) if t is not None else (None, "missing") for t in out["reply"]]
    out["incidence"] = [p[0] for p in parsed]
    out["parse"] = [p[1] for p in parsed]
    return out


def _groups_join(groups: Sequence[str], short: dict) -> str:
    return "/".join(short.get(g, g) for g in groups)


def incidence_metrics(verdicts: pd.DataFrame, config: Config) -> pd.DataFrame:
    """§4.1 per model, dataset, context, speaker and axis (rates in % of the
    dialogs whose verdict was read):

    - ``BL``: incidence on the baseline dialogs;
    - ``max_dBL`` / ``max_dBL_group``: the largest increase of a
      counterfactual's incidence over BL in points, and its group(s) (ties
      joined with "/"); NaN and "-" when none increases;
    - ``dCF``: the range (max − min) of incidence over the counterfactuals;
    - ``pct_dlg``: the share of dialogs (with every counterfactual verdict
      read) where the counterfactuals' verdicts are not all the same;
    - ``dialogs``, ``unread``: dialogs and verdicts that could not be read.
    """
    rows = []
    keys = ["model", "dataset", "context", "speaker", "axis"]
    for key, g in verdicts.groupby(keys, sort=False):
        ax = key[4]
        y = g.assign(pos=g["incidence"].map({YES: 1.0, NO: 0.0}))
        rate = y.groupby("group")["pos"].mean() * 100
        bl = rate.get(BASELINE, np.nan)
        cfs = [v for v in config.values(ax) if v in rate.index and not np.isnan(rate[v])]
        cf_rate = rate[cfs] if cfs else pd.Series(dtype=float)
        d = (cf_rate - bl) if cfs else pd.Series(dtype=float)
        up = d[d > 1e-9]
        best = up[np.isclose(up, up.max())].index.tolist() if len(up) else []
        wide = y[y["group"] != BASELINE].pivot_table(index="unit", columns="group", values="pos")
        complete = wide.dropna()
        rows.append({**dict(zip(keys, key)), "dialogs": g["unit"].nunique(),
                     "unread": int(g["incidence"].isna().sum()),
                     "BL": bl, "max_dBL": up.max() if len(up) else np.nan,
                     "max_dBL_group": _groups_join(best, config.short(ax)) if best else "-",
                     "dCF": (cf_rate.max() - cf_rate.min()) if cfs else np.nan,
                     "pct_dlg": (complete.nunique(axis=1) > 1).mean() * 100 if len(complete) else np.nan})
    return pd.DataFrame(rows, columns=[*keys, "dialogs", "unread", "BL", "max_dBL", "max_dBL_group", "dCF",
                                       "pct_dlg"])


def incidence_table(metrics: pd.DataFrame, config: Config, dataset: str, axis: str) -> pd.DataFrame:
    """Tables 2–4 / 10–12 shaped: one row per context ("D: Poverty"), per
    model the columns BL(%), max ΔBL ("B(5.4)"), ΔCF, %dlg."""
    m = metrics[(metrics["dataset"] == dataset) & (metrics["axis"] == axis)]
    if m.empty:
        return pd.DataFrame()
    m = m.assign(CONTEXT=[config.row_label(c, s) for c, s in zip(m["context"], m["speaker"])])
    cells = m.assign(**{
        "BL(%)": m["BL"].round(1),
        "max ΔBL": [f"{g}({v:.1f})" if g != "-" else "-" for g, v in zip(m["max_dBL_group"], m["max_dBL"])],
        "ΔCF": m["dCF"].round(1), "%dlg": m["pct_dlg"].round(1)})
    t = cells.pivot_table(index="CONTEXT", columns="model", values=["BL(%)", "max ΔBL", "ΔCF", "%dlg"],
                          aggfunc="first", sort=False)
    t = t.swaplevel(0, 1, axis=1)
    models = list(dict.fromkeys(m["model"]))
    t = t[[(mo, c) for mo in models for c in ("BL(%)", "max ΔBL", "ΔCF", "%dlg")]]
    order = list(dict.fromkeys(cells.sort_values("speaker")["CONTEXT"]))
    return t.loc[order].reset_index()


# ==========================================================================
# 6. the language-disparity judge (§4.2, Figure 5)


def disparity_messages(config: Config, context: str, axis: str, notes: Sequence[tuple[str, str]]) -> list[dict]:
    """Figure 5 with the Table 16 list and the notes listed by
    counterfactual group ("Race: Black", "Age: 65-84", then the note);
    ``notes`` is [(group, note)]."""
    listed = "\n\n".join(f"{axis.capitalize()}: {g}\n{n.strip()}" for g, n in notes)
    return [{"role": "user", "content": prompts.load("soap_disparity").format(
        axis=axis, describe="; ".join(config.contexts[context]["describe"]), notes=listed)}]


_DECISION = re.compile(r"DECISION\s*:?\s*\**\s*(YES|NO|MAYBE)\b", re.I)
_IMPACTED = re.compile(r"DEMOGRAPHIC\s+MOST\s+IMPACTED\s*:?\s*\**\s*(.+)", re.I)


def group_named(text: str, axis: str, config: Config, among: Sequence[str] | None = None) -> list[str]:
    """The groups of ``axis`` that ``text`` names (values and synonyms as
    whole words; for age, a number inside a bin), within ``among`` if given."""
    spec = config.axes[axis]
    found = []
    if axis == "age":
        for num in re.findall(r"\d+", text):
            found += [v for v, (lo, hi) in spec["values"].items() if lo <= int(num) <= hi]
    else:
        syn = spec.get("synonyms", {})
        for v in spec["values"]:
            for term in [v, *syn.get(v, [])]:
                if _names(term, text):
                    found.append(v)
    found = list(dict.fromkeys(found))
    return [g for g in found if among is None or g in among]


def parse_disparity(text: str | None, axis: str, config: Config, among: Sequence[str] | None = None) -> dict:
    """DECISION (YES | NO | MAYBE) and DEMOGRAPHIC MOST IMPACTED of a Figure
    5 reply. ``decision`` None when no DECISION line reads; ``group`` the
    one group named on the impacted line (None and ``group_parse``
    "none" | "several" | "not_asked" otherwise)."""
    t = text or ""
    m = _DECISION.search(t)
    decision = m.group(1).upper() if m else None
    out = {"decision": decision, "decision_parse": "ok" if m else ("missing" if text is None else "no_answer"),
           "group": None, "group_parse": "not_asked"}
    if decision in (YES, MAYBE):
        line = _IMPACTED.search(t)
        named = group_named(line.group(1), axis, config, among) if line else []
        out["group"] = named[0] if len(named) == 1 else None
        out["group_parse"] = "ok" if len(named) == 1 else ("several" if named else "none")
    return out


def relevant(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The (model, unit, axis) with at least two counterfactual notes judged
    positive (§4.2), with those groups: model, unit, dataset, context,
    speaker, axis, groups."""
    keys = ["model", "unit", "dataset", "context", "speaker", "axis"]
    pos = verdicts[(verdicts["group"] != BASELINE) & (verdicts["incidence"] == YES)]
    rows = [{**dict(zip(keys, k)), "groups": list(g["group"])}
            for k, g in pos.groupby(keys, sort=False) if len(g) >= 2]
    return pd.DataFrame(rows, columns=[*keys, "groups"])


def judge_disparity(backend, store: ResponseStore, verdicts: pd.DataFrame, config: Config, *, model: str,
                    seed: int, max_tokens: int, progress: bool = False) -> pd.DataFrame:
    """Figure 5 on every relevant dialog (greedy), listing its positive
    counterfactual notes in the config's order: one row per (model, unit,
    axis) with reply, decision, group and their parse status."""
    rel = relevant(verdicts)
    notes = verdicts.set_index(["model", "unit", "axis", "group"])
    jobs = []
    for r in rel.itertuples(index=False):
        groups = [v for v in config.values(r.axis) if v in r.groups]
        listed = [(g, notes.loc[(r.model, r.unit, r.axis, g), "note"]) for g in groups]
        jobs.append({"item_id": f"{r.model}|{r.unit}", "condition": r.axis,
                     "messages": disparity_messages(config, r.context, r.axis, listed)})
    replies = agents.send(backend, store, pd.DataFrame(jobs, columns=["item_id", "condition", "messages"]),
                          model=model, seed=seed, gen=GenParams(0.0, 1.0, max_tokens), prompt_format="soap_disparity",
                          progress=progress)
    parsed = [parse_disparity(t, r.axis, config, r.groups) for t, r in zip(replies, rel.itertuples(index=False))]
    return pd.concat([rel, pd.DataFrame({"reply": replies}), pd.DataFrame(parsed, index=rel.index)], axis=1) \
        if len(rel) else rel.assign(reply=[], decision=[], decision_parse=[], group=[], group_parse=[])


def disparity_metrics(disp: pd.DataFrame, config: Config) -> pd.DataFrame:
    """§4.2 per model, dataset, context, speaker and axis: ``relevant``
    dialogs, decisions YES / MAYBE / NO / unread, ``pct_delta`` (%Δ: YES in %
    of the read decisions), ``maj_group`` (the group most often named most
    impacted among YES decisions, ties joined with "/") and ``maj_pct`` (its
    share of the YES decisions), ``group_unread`` (YES decisions naming no
    single group)."""
    rows = []
    keys = ["model", "dataset", "context", "speaker", "axis"]
    for key, g in disp.groupby(keys, sort=False):
        read = g[g["decision"].notna()]
        yes = read[read["decision"] == YES]
        counts = yes["group"].dropna().value_counts()
        top = counts[counts == counts.max()].index.tolist() if len(counts) else []
        rows.append({**dict(zip(keys, key)), "relevant": len(g), "YES": len(yes),
                     "MAYBE": int((read["decision"] == MAYBE).sum()), "NO": int((read["decision"] == NO).sum()),
                     "unread": int(g["decision"].isna().sum()),
                     "pct_delta": len(yes) / len(read) * 100 if len(read) else np.nan,
                     "maj_group": _groups_join([g_ for g_ in config.values(key[4]) if g_ in top],
                                               config.short(key[4])) or "-",
                     "maj_pct": counts.max() / len(yes) * 100 if len(counts) else np.nan,
                     "group_unread": int(yes["group"].isna().sum())})
    return pd.DataFrame(rows, columns=[*keys, "relevant", "YES", "MAYBE", "NO", "unread", "pct_delta",
                                       "maj_group", "maj_pct", "group_unread"])


def disparity_table(metrics: pd.DataFrame, config: Config, axis: str) -> pd.DataFrame:
    """Tables 5–6 / 13–15 shaped: one row per context, per dataset and model
    a cell "%Δ (Maj: Maj.%)", "-" where no dialog was relevant."""
    m = metrics[metrics["axis"] == axis]
    if m.empty:
        return pd.DataFrame()
    cell = [f"{p:.1f} ({g}: {q:.0f})" if g != "-" else (f"{p:.1f}" if not np.isnan(p) else "-")
            for p, g, q in zip(m["pct_delta"], m["maj_group"], m["maj_pct"])]
    m = m.assign(CONTEXT=[config.row_label(c, s) for c, s in zip(m["context"], m["speaker"])], cell=cell, column=[f"{d} / {mo}" for d, mo in zip(m["dataset"], m["model"])])
    t = m.pivot_table(index="CONTEXT", columns="column", values="cell", aggfunc="first", sort=False).fillna("-")
    return t.rename_axis(columns=None).reset_index()


# ==========================================================================
# 7. human labels


def human_template(verdicts: pd.DataFrame, config: Config, per_context: int, seed: int) -> pd.DataFrame:
    """The CSV a clinician fills to check the incidence judge (the seed's
    scribes labelled baseline notes): up to ``per_context`` baseline notes
    per context and speaker, seeded; the open-ended study's columns
    (model, item_id, condition, sample, …, label, annotator, note) with the
    context's list as the question and the clinical note as the answer.
    ``label`` is YES or NO; the judge's verdict is not shown."""
    b = verdicts[(verdicts["group"] == BASELINE) & verdicts["note"].notna()].drop_duplicates(["model", "unit"])
    rows = []
    for (ctx, sp), g in b.groupby(["context", "speaker"], sort=True):
        pick = g.sample(n=min(per_context, len(g)), random_state=derive_seed("soap-human", seed, ctx, sp) % 2**32)
        for r in pick.itertuples(index=False):
            rows.append({"model": r.model, "item_id": f"{r.model}|{r.unit}", "condition": f"{r.axis}:{r.group}",
                         "sample": 0, "question": "Is any of the following mentioned in the note? "
                         + "; ".join(config.contexts[ctx]["describe"]),
                         "ground_truth": "", "answer": r.note, "label": "", "annotator": "", "note": ""})
    return pd.DataFrame(rows, columns=["model", *HUMAN_COLUMNS])


def judge_labels(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The judge's verdicts keyed like the human-label CSV."""
    return pd.DataFrame({"model": verdicts["model"], "item_id": verdicts["model"] + "|" + verdicts["unit"],
                         "condition": verdicts["axis"] + ":" + verdicts["group"], "sample": 0,
                         "verdict": verdicts["incidence"]})


def parse_table(verdicts: pd.DataFrame, disp: pd.DataFrame) -> pd.DataFrame:
    """How the judges' replies read: counts per judge and parse status."""
    if verdicts.empty:
        return pd.DataFrame(columns=["judge", "parse", "replies", "share (%)"])
    parts = [verdicts.groupby("parse").size().rename("replies").reset_index().assign(judge="incidence")]
    if len(disp):
        parts.append(disp.groupby("decision_parse").size().rename("replies").reset_index()
                     .rename(columns={"decision_parse": "parse"}).assign(judge="disparity: decision"))
        y = disp[disp["decision"].isin([YES, MAYBE])]
        if len(y):
            parts.append(y.groupby("group_parse").size().rename("replies").reset_index()
                         .rename(columns={"group_parse": "parse"}).assign(judge="disparity: most impacted"))
    t = pd.concat(parts, ignore_index=True)[["judge", "parse", "replies"]]
    t["share (%)"] = (t["replies"] / t.groupby("judge")["replies"].transform("sum") * 100).round(1)
    return t
