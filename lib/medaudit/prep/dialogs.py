"""Doctor–patient dialogs: turns and de-identification (seed 002 §3).

MTS-Dialog writes turns as ``Doctor: …`` / ``Patient: …`` lines (with a few
misspelt guest labels such as ``Gest_family``); ACI-Bench as ``[doctor] …`` /
``[patient] …``. De-identification replaces names with ``[NAME]`` and removes
age, race/ethnicity and national-origin mentions; every removal is counted so
the reader sees how much each dialog was changed.
"""
from __future__ import annotations

import functools
import re

import pandas as pd

from medaudit.prep.selection import keyword_regex
from medaudit.prep.text import NUMBER_WORDS

# A turn starts a line with a speaker label: "[doctor]" (ACI-Bench) or
# "Doctor:" (MTS-Dialog, also "Doctor_2:", and guest labels misspelt
# "Guest_clinican" / "Gest_family", once followed by "." instead of ":").
_TURN = re.compile(
    r"^[ \t]*(?:\[(?P<b>doctor|patient|patient_guest|doctor_guest|guest\w*)\]"
    r"|(?P<c>Doctor|Patient)(?:_\d+)?[ \t]*:"
    r"|(?P<g>G(?:u)?est_[a-z]+)[ \t]*[:.])[ \t]*",
    re.M | re.I,
)


def speaker_role(label: str) -> str:
    """A turn's speaker label as "doctor", "patient" or "other": a numbered label
    ("Doctor_2") is its role, a guest ("patient_guest", "Gest_family") is "other"."""
    label = re.sub(r"_\d+$", "", label.lower())  # "Doctor_2" is a doctor; "patient_guest" is not the patient
    if label == "doctor":
        return "doctor"
    if label == "patient":
        return "patient"
    return "other"


def turn_spans(dialogue: str) -> list[tuple[str, int, int]]:
    """(role, start, end) per turn: where its text starts and ends in
    ``dialogue`` (end before trailing whitespace), for inserting text."""
    ms = list(_TURN.finditer(dialogue))
    out = []
    for m, nxt in zip(ms, ms[1:] + [None]):
        label = m.group("b") or m.group("c") or m.group("g")
        end = nxt.start() if nxt else len(dialogue)
        end = m.end() + len(dialogue[m.end():end].rstrip())
        out.append((speaker_role(label), m.end(), end))
    return out


def turns(dialogue: str) -> list[tuple[str, str]]:
    """(role, text) per turn; role is doctor, patient or other."""
    return [(role, dialogue[start:end].strip()) for role, start, end in turn_spans(dialogue)]


def n_turns(dialogue: str) -> int:
    """The number of turns in a dialog: lines that open with a speaker label, in
    either dataset's style."""
    return len(_TURN.findall(dialogue))


# --------------------------------------------------------------------------
# de-identification

_NUMBER = r"(?:\d{1,3}|" + NUMBER_WORDS + r"|a hundred(?: and \w+)?)"
_AGE_RES = [
    # "58-year-old", "58 years old", and ACI-Bench's spaced "37 -year-old"
    re.compile(r"\b" + _NUMBER + r"(?:[ \t]*-[ \t]*|[ \t]+)(?:years?|yrs?)(?:[ \t]*-[ \t]*|[ \t]+)old\b", re.I),
    re.compile(r"\b" + _NUMBER + r" years? of age\b", re.I),
    re.compile(r"\b(?:aged?|age of)\s+" + _NUMBER + r"\b", re.I),
    re.compile(r"\bturned\s+" + _NUMBER + r"\b", re.I),
    re.compile(r"\b(?:I am|I'm|you are|you're|she is|he is|she's|he's)\s+(?:only |just |almost |nearly )?("
               + _NUMBER + r")\b(?=\s*(?:[.,!?]|and|now|$))", re.I),
    re.compile(r"\bin (?:his|her|my|their) (?:early |mid |late |mid-)?"
               r"(?:twenties|thirties|forties|fifties|sixties|seventies|eighties|nineties|\d0s)\b", re.I),
]


def age_mentions(text: str) -> list[re.Match]:
    """The age expressions that de-identification removes, found in ``text``."""
    return [m for rx in _AGE_RES for m in rx.finditer(text)]


# a title, then a capitalised name: "Mr. Smith", "Dr Lee", "Doctor Kumar" (not
# "Doctor. Do I …": only the abbreviations take a period)
_TITLE_NAME = re.compile(r"\b(Mr|Mrs|Ms|Dr|Miss|Doctor)(\.?)\s+(?!\[)([A-Z][a-z]+(?:[- ][A-Z][a-z]+)?)\b")
_TAKES_PERIOD = {"Mr", "Mrs", "Ms", "Dr"}
# "white"/"black" are race terms only next to a person noun or after "identify as"
_COLOR_RACE = re.compile(
    r"\b(white|black)\b(?=\s+(?:female|male|woman|man|women|men|lady|gentleman|guy|girl|boy|person|patient)\b)"
    r"|(?<=identify as )(white|black)\b|(?<=identify as a )(white|black)\b"
    r"|(?<=identify as being )(white|black)\b", re.I)
# ACI-Bench writes titles in lower case: "doctor wood", "dr. smith", "ms. hill"
# ("mr", "ms", "mrs" only with their period: "ms" alone can be multiple
# sclerosis; "doctor" never with one: "thank you, doctor. do i …"), then a
# name of one or two words (a hyphen or an apostrophe inside, "o'brien"; a
# possessive "'s" stays outside it). Which words are names: :func:`_lower_titles`.
_LOWER_WORD = r"[a-z]+(?:-[a-z]+)*(?:'(?!s\b)[a-z]+)?"
_LOWER_TITLE = re.compile(r"(?<![\w'-])(doctor|dr\.?|mrs?\.|ms\.)([ \t]+)(?!\[)(" + _LOWER_WORD + r")(?!\w|-\w)"
                          r"(?=[ \t]+(" + _LOWER_WORD + r")(?!\w|-\w))?")   # the next word: looked at, not consumed
_WORD_BEFORE = re.compile(r"(?<![\w'-])([a-z]+)[ \t]+$")
_GONE = "\x00"  # marks removed text until the surrounding spaces are tidied
_GONE_BEFORE_PUNCT = re.compile(r"[ \t]*\x00+[ \t]*(?=[,.?!;:])|^[ \t]*\x00+[ \t]*")
_GONE_ELSEWHERE = re.compile(r"[ \t]*\x00+[ \t]*")


def _title_name(m: re.Match) -> str:
    title, dot = m.group(1), m.group(2)
    if dot and title not in _TAKES_PERIOD:
        return m.group(0)
    return f"{title}{dot} [NAME]"


@functools.lru_cache(maxsize=8)
def _word_sets(not_names: tuple, noun_before: tuple) -> tuple[frozenset, frozenset]:
    """``dialogs.lower_titles``' word lists, lower-cased into sets once (not once per turn)."""
    return frozenset(str(w).lower() for w in not_names), frozenset(str(w).lower() for w in noun_before)


def _lower_titles(s: str, titles: dict | None) -> tuple[str, int]:
    """Redact the names after lower-case titles (``_LOWER_TITLE``), with
    ``titles`` from params/selection.yaml ``dialogs.lower_titles``: the word
    after the title is a name unless it is one of ``not_names`` ("doctor
    said", "the doctor will"), and the word after that is the surname unless
    it is one of them ("dr. henry howard for" → "dr. [NAME] for", "doctor
    nelson correct" → "doctor [NAME] correct"); after a word of
    ``noun_before`` ("the doctor explained") "doctor" is a noun and is
    followed by no name ("dr." is always a title). ``titles`` None: the
    former rule, no lower-case "doctor", and the one word after "dr",
    "mr.", "ms.", "mrs." always a name."""
    not_names, noun_before = (frozenset(), frozenset()) if titles is None else \
        _word_sets(tuple(titles.get("not_names", [])), tuple(titles.get("noun_before", [])))

    def ordinary(word: str | None) -> bool:
        return word is None or word in not_names or word.split("'")[0] in not_names

    out, last, n = [], 0, 0
    for m in _LOWER_TITLE.finditer(s):
        title, gap, first, second = m.groups()
        if m.start() < last or (titles is None and title == "doctor"):
            continue
        before = _WORD_BEFORE.search(s, 0, m.start()) if title == "doctor" else None
        if before and before.group(1) in noun_before:
            continue
        if ordinary(first):
            continue
        end = m.end(3) if titles is None or ordinary(second) else m.end(4)
        out += [s[last:m.start()], f"{title}{gap}[NAME]"]
        last = end
        n += 1
    return "".join(out) + s[last:], n


def _pieces(dialogue: str) -> list[tuple[str, str]]:
    """The dialog as ("label", speaker label) and ("body", text) pieces in order, so that a
    rewrite of the bodies never touches a label."""
    pieces, last = [], 0
    for m in _TURN.finditer(dialogue):
        pieces.append(("body", dialogue[last:m.start()]))
        pieces.append(("label", m.group(0)))
        last = m.end()
    pieces.append(("body", dialogue[last:]))
    return pieces


def deidentify(dialogue: str, names: list[str] = (), race_terms: list[str] = (),
               origin_terms: list[str] = (), titles: dict | None = None) -> tuple[str, dict[str, int]]:
    """Redact one dialog. Returns (text, counts per kind of change).

    Names (given, e.g. from ACI-Bench metadata, any capitalised word after
    a title such as "Mr." or "Doctor", and the lower-case names after
    "doctor", "dr.", "ms." … that ``titles`` tells from ordinary words:
    params/selection.yaml ``dialogs.lower_titles``, :func:`_lower_titles`)
    become ``[NAME]``; ages, race and ethnicity terms and national-origin
    terms are removed. Speaker labels are never touched.
    """
    counts = {"names": 0, "ages": 0, "race": 0, "origin": 0}
    pieces = _pieces(dialogue)   # protect speaker labels by working on the turn bodies only

    name_rx = keyword_regex([n for n in names if len(n) > 1]) if names else None
    race_rx = keyword_regex(list(race_terms)) if race_terms else None
    origin_rx = keyword_regex(list(origin_terms)) if origin_terms else None

    out = []
    for kind, s in pieces:
        if kind == "label":
            out.append(s)
            continue
        if name_rx is not None:
            s, n = name_rx.subn("[NAME]", s)
            counts["names"] += n
        before = s.count("[NAME]")
        s = _TITLE_NAME.sub(_title_name, s)
        counts["names"] += s.count("[NAME]") - before
        s, n = _lower_titles(s, titles)
        counts["names"] += n
        for rx in _AGE_RES:
            s, n = rx.subn(_GONE, s)
            counts["ages"] += n
        if race_rx is not None:
            s, n = race_rx.subn(_GONE, s)
            counts["race"] += n
        s, n = _COLOR_RACE.subn(_GONE, s)
        counts["race"] += n
        if origin_rx is not None:
            s, n = origin_rx.subn(_GONE, s)
            counts["origin"] += n
        # only the spaces around a removal change; the rest stays as it was
        s = _GONE_ELSEWHERE.sub(" ", _GONE_BEFORE_PUNCT.sub("", s))
        out.append(s)
    return "".join(out), counts


def deidentify_all(dialogs: pd.DataFrame, cfg: dict) -> pd.DataFrame:
    """De-identify every dialog and add turn counts, redaction counts and a
    ``keep`` flag (MTS dialogs need at least ``min_turns_mts`` turns)."""
    rows = []
    for rec in dialogs.to_dict("records"):
        names = rec.get("names")
        text, counts = deidentify(rec["dialogue"], names if isinstance(names, list) else [],
                                  cfg.get("race_terms", []), cfg.get("origin_terms", []), cfg.get("lower_titles"))
        nt = n_turns(rec["dialogue"])
        short = rec["dataset"] == "mts_dialog" and nt < cfg.get("min_turns_mts", 10)
        rows.append({**rec, "dialogue_deid": text, "turns": nt,
                     **{f"redacted_{k}": v for k, v in counts.items()},
                     "keep": not short})
    return pd.DataFrame(rows)


def deid_counts(d: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: dialogs, dropped for length, kept, and redactions made."""
    g = d.groupby("dataset")
    out = pd.DataFrame({
        "dialogs": g.size(),
        "dropped (< min turns)": g["keep"].apply(lambda k: int((~k).sum())),
        "kept": g["keep"].sum().astype(int),
        "with any redaction": g.apply(lambda x: int((x.filter(like="redacted_").sum(axis=1) > 0).sum()),
                                      include_groups=False),
    })
    for c in ("names", "ages", "race", "origin"):
        out[f"{c} redacted"] = g[f"redacted_{c}"].sum().astype(int)
    return out.reset_index()


# --------------------------------------------------------------------------
# the demographic screen (seed 002 §3, "Data De-identification")
#
# "We explicitly exclude or redact dialogs that mention patient names or
# include either self-identified or inferred demographic indicators. [...]
# Following this initial filtering process, we perform a thorough manual
# review of the selected dialogs to identify and remove any remaining
# indicators of identity."  Names and explicit ages are redacted
# (:func:`deidentify`); every other cue below *excludes* the dialog, because
# removing it would leave a broken or empty sentence ("Patient: I'm from ,"
# or an empty answer to "How old are you?"). The word lists live in
# params/soap.yaml (``screen``); each kind can be switched between exclude
# and report-only there. The manual review is a shipped list
# (params/soap_dialogs.csv, :func:`medaudit.studies.soap.load_review`).

# third-person singular pronouns: in a doctor-patient dialog the patient is
# "I" or "you"; a he/she is the patient unless a nearby sentence names
# someone else (:func:`patient_pronouns`)
GENDERED_PRONOUN = re.compile(r"(?<![\w-])(he|she|him|her|his|hers|himself|herself)(?:'s|'ll|'d)?(?![\w-])", re.I)
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+")


SCREEN_KINDS = ("gender", "title", "address", "pronoun", "dob", "life_stage", "origin", "race", "race_answer",
                "demographic_question", "sex_specific", "spouse")


def _words_regex(words) -> re.Pattern | None:
    """Whole-word, any-case regex of ``words`` (a trailing * matches any
    ending; a hyphen does not start or end a word: "alpha-gal" holds no
    "gal")."""
    alts = []
    for w in words:
        w = str(w)
        alts.append(re.escape(w[:-1]) + r"[\w'-]*" if w.endswith("*") else re.escape(w).replace(r"\ ", r"\s+"))
    if not alts:
        return None
    return re.compile(r"(?<![\w-])(?:" + "|".join(sorted(alts, key=len, reverse=True)) + r")(?![\w-])", re.I)


def patient_pronouns(dialogue: str, others: re.Pattern, window: int = 2) -> list[str]:
    """Third-person pronouns that refer to the patient: every he/she/his/her
    … whose sentence and the ``window`` sentences before it (across turns)
    name nobody else (``others``: family, clinicians, "Doctor [NAME]", …).
    A guest speaking of the patient ("He was seven.") and a doctor
    dictating ("[NAME] is … She has …") are caught; "my mother … she
    passed" is not."""
    sents = []
    for _, t in turns(dialogue):
        sents += [s for s in _SENT_SPLIT.split(t) if s.strip()]
    found = []
    for i, s in enumerate(sents):
        prons = GENDERED_PRONOUN.findall(s)
        if not prons:
            continue
        near = " ".join(sents[max(0, i - window):i + 1])
        if not others.search(near):
            found += [p.lower() for p in prons]
    return found


def screen_cues(deid: str, screen: dict, redacted: dict | None = None) -> dict[str, list[str]]:
    """The demographic cues left in a de-identified dialog, by kind: the
    words found (lower case). Kinds (word lists in params/soap.yaml
    ``screen``): ``gender`` nouns, ``title`` (Mr., Ms., Mrs., Miss before a
    name), ``address`` (sir, ma'am), ``pronoun`` (:func:`patient_pronouns`),
    ``dob`` (date of birth, birthday), ``life_stage`` (retirement, college,
    grandchildren, school grade), ``origin``, ``sex_specific`` (anatomy or
    conditions of one sex: the seed's "male patient presenting with ovarian
    cancer"), ``spouse`` (husband, wife: the patient's gender by a
    heteronormative reading, A.3.5), ``demographic_question`` (the doctor
    asks age, race, gender or origin: the answer is the cue, or an empty
    answer once redacted) and ``race_answer``. ``redacted``: the counts of
    :func:`deidentify` for the kinds that still exclude once removed
    (params/soap.yaml ``screen.removed_exclude``; the former reading
    counted every removed race and origin term as a cue)."""
    out: dict[str, list[str]] = {}
    for kind, words in screen["words"].items():
        rx = _words_regex(words)
        hits = [m.group(0).lower() for m in rx.finditer(deid)] if rx else []
        ignore = [w.lower() for w in screen.get("ignore", {}).get(kind, [])]
        out[kind] = [h for h in hits if not any(re.fullmatch(re.escape(i).replace(r"\ ", r"\s+"), h) for i in ignore)]
    # an interjection ("oh man", "oh boy") is no gender noun
    inter = re.compile(r"\b(?:oh|hey|aw|ah),?\s+(man|boy)\b|^\s*(man|boy)\s*,", re.I | re.M)
    n_inter = len(inter.findall(deid))
    g = out.get("gender", [])
    for _ in range(n_inter):
        for w in ("man", "boy"):
            if w in g:
                g.remove(w)
                break
    out["title"] = [m.group(0).lower() for m in re.finditer(
        r"(?<![\w-])(?:mr|mrs|ms|mister|miss|missus)\.?\s+\[NAME\]", deid, re.I)]
    out["pronoun"] = patient_pronouns(deid, _words_regex(screen["others"]))
    q = _words_regex(screen["demographic_questions"])
    out["demographic_question"] = [m.group(0).lower() for m in q.finditer(deid)] if q else []
    race_q = re.compile(r"(?:race|ethnicity|ethnic background)[^\n]*\?\s*\n\s*(?:\[patient\]|Patient\s*:)\s*([^\n]*)",
                        re.I)
    out["race_answer"] = [m.group(1).strip().lower() for m in race_q.finditer(deid)]
    out["race"] = ["(redacted)"] * int((redacted or {}).get("race", 0))
    out["origin"] = out.get("origin", []) + ["(redacted)"] * int((redacted or {}).get("origin", 0))
    return out


def screen_all(deid: pd.DataFrame, screen: dict) -> pd.DataFrame:
    """:func:`screen_cues` on every dialog of a :func:`deidentify_all`
    frame, after :func:`redact_cues` (when ``screen`` has ``redact`` or
    ``redact_pronouns``): ``dialogue_deid`` becomes the redacted text,
    ``redactions`` lists the changes (:func:`redactions_text`) and
    ``redacted_cues`` counts them; per cue kind a column ``cue_<kind>``
    (the words left, joined by "; "), ``cues`` (the kinds that exclude,
    joined) and ``screen_pass`` (no cue of a kind in ``screen["exclude"]``).

    Seed 002 §3: "We explicitly exclude or redact dialogs that mention
    patient names or include either self-identified or inferred demographic
    indicators." A cue that can be redacted is redacted; only what is left
    excludes."""
    excl = list(screen["exclude"])
    removed_exclude = list(screen.get("removed_exclude", []))
    redact = bool(screen.get("redact")) or bool(screen.get("redact_pronouns", False))
    rows = []
    deid = deid.reset_index(drop=True).copy()
    for i, rec in enumerate(deid.to_dict("records")):
        text, changes = (redact_cues(rec["dialogue_deid"], screen) if redact else (rec["dialogue_deid"], {}))
        deid.at[i, "dialogue_deid"] = text
        red = {k: rec.get(f"redacted_{k}", 0) for k in ("race", "origin") if k in removed_exclude}
        cues = screen_cues(text, screen, red)
        rows.append({"redactions": redactions_text(changes), "redacted_cues": sum(map(len, changes.values())),
                     **{f"cue_{k}": "; ".join(v) for k, v in cues.items()},
                     "cues": ", ".join(k for k in excl if cues.get(k)),
                     "screen_pass": not any(cues.get(k) for k in excl)})
    return pd.concat([deid, pd.DataFrame(rows)], axis=1)


# --------------------------------------------------------------------------
# redaction of the screen's cues (seed 002 §3)
#
# "We additionally remove age-related information-such as explicit age
# mentions and contextual indicators of life stage (e.g., references to
# retirement or college attendance)-as well as racial and ethnic descriptors
# and references to national or geographic origin."  (§3, Data
# De-identification), and A.3.5: the models hallucinate "patients' gender by
# adding gendered pronouns in the notes from redacted dialogs" and "hetero-
# normative patient spouse gender (where patient spouse gender is not
# mentioned)": the redacted dialogs carried no gendered pronoun and no spouse
# gender. :func:`redact_cues` therefore rewrites what can be rewritten with
# the grammar kept: a he/she that is the patient becomes singular "they"
# (verb agreement for the commonest verbs), "Mr. [NAME]" becomes "[NAME]",
# "sir"/"ma'am" go, and every word of params/soap.yaml ``screen.redact``
# becomes its neutral replacement ("husband" → "spouse", "retired" → "not
# working", "woman" → "person"). What has no replacement there (anatomy of
# one sex, a date of birth, "puberty", "transgender") still excludes the
# dialog: it cannot be removed without changing the case.

_PRON_ONE = re.compile(
    r"(?:(?<![\w'-])(?P<aux>is|was|has|does|isn't|wasn't|hasn't|doesn't)(?P<agap>[ \t]+)(?=(?:he|she)(?![\w'’-])))?"
    r"(?<![\w'-])(he|she|him|his|hers|her|himself|herself)(?:('s|'ll|'d|’s)(?![\w-])|(?![\w'’-]))"
    r"(?:([ \t]+)((?:(?:also|still|never|always|just|really|usually|often|only|even|actually|probably|sometimes)"
    r"[ \t]+)?[a-z][\w'’]*))?", re.I)
# after "her", a word that starts no noun phrase: "her" is the object ("give her the pills")
_HER_OBJECT_NEXT = {
    "the", "a", "an", "to", "in", "on", "at", "for", "with", "about", "from", "and", "or", "but", "that", "this",
    "some", "any", "up", "down", "out", "off", "over", "back", "again", "too", "if", "when", "so", "as", "into",
    "because", "what", "how", "yesterday", "today", "now", "then", "know", "is", "was", "it", "anything",
    "something", "nothing", "by", "of", "just", "right", "later", "there", "here", "go", "come", "feel", "be"}
_AGREE = {"is": "are", "was": "were", "has": "have", "does": "do", "doesn't": "don't", "isn't": "aren't",
          "wasn't": "weren't", "hasn't": "haven't", "doesn’t": "don’t", "isn’t": "aren’t", "wasn’t": "weren’t",
          "hasn’t": "haven’t", "says": "say", "goes": "go"}
_NOT_VERB_S = {"always", "sometimes", "perhaps", "thus", "as", "its", "less", "yes", "us", "this", "towards",
               "afterwards", "nowadays", "besides", "unless", "was", "is", "has", "does", "nevertheless", "plus"}
_HAVE_NEXT = {"been", "got", "gotten", "had", "done", "seen", "taken", "tried", "never", "already", "just"}


def _case_like(word: str, new: str) -> str:
    if word.isupper() and len(word) > 1:
        return new.upper()
    return new[:1].upper() + new[1:] if word[:1].isupper() else new


def _verb_plural(verb: str) -> str | None:
    """The plural of a third-person verb after he/she ("takes" → "take",
    "tries" → "try", "watches" → "watch"); None when it is no such verb."""
    low = verb.lower()
    if low in _AGREE:
        return _case_like(verb, _AGREE[low])
    if low in _NOT_VERB_S or not low.endswith("s") or low.endswith(("ss", "us", "is", "'s", "’s")) or len(low) < 4:
        return None
    if low.endswith("ies"):
        return verb[:-3] + "y"
    if low.endswith(("ches", "shes", "xes", "sses", "zes", "oes")):
        return verb[:-2]
    return verb[:-1]


def _they(m: re.Match) -> tuple[str, str]:
    """The gender-neutral form of one pronoun match (with its next word,
    changed where agreement needs it): (new text, "old→new")."""
    pron, clitic, gap, nxt = m.group(3), m.group(4), m.group(5), m.group(6)
    low = pron.lower()
    tail = ""
    if low in ("he", "she"):
        if clitic:
            c = clitic.replace("’", "'")
            if c == "'s":
                words = (nxt or "").lower().split()   # "she's been", "she's just been", "she's already"
                new = "they've" if words and (words[-1] in _HAVE_NEXT or words[0] in _HAVE_NEXT) else "they're"
            else:
                new = "they" + c
        else:
            new = "they"
        if nxt is not None:   # "she also has" -> "they also have": the verb is the last word
            head_words, _, last = nxt.rpartition(" ")
            verb = None if clitic else _verb_plural(last.strip())
            tail = gap + (nxt if verb is None else nxt[:len(nxt) - len(last)] + verb)
    elif low in ("him",):
        new = "them"
    elif low in ("himself", "herself"):
        new = "themself"
    elif low == "his":
        new = "their" if nxt is not None and nxt.split()[0].lower() not in _HER_OBJECT_NEXT else "theirs"
    elif low == "hers":
        new = "theirs"
    else:  # her: possessive before a noun phrase, else the object
        new = "their" if nxt is not None and nxt.split()[0].lower() not in _HER_OBJECT_NEXT else "them"
    if low not in ("he", "she") and nxt is not None:
        tail = gap + nxt
    if clitic and low not in ("he", "she"):
        new += clitic          # "his's" does not occur; kept as written
    head = ""
    if m.group("aux"):         # "Has she been" -> "Have they been"
        head = _case_like(m.group("aux"), _AGREE[m.group("aux").lower()]) + m.group("agap")
    return head + _case_like(pron, new) + tail, f"{pron.lower()}{clitic or ''}→{new}"


def _sentences(dialogue: str) -> list[tuple[int, int]]:
    """(start, end) of every sentence of every turn, in order (the split of
    :func:`patient_pronouns`)."""
    out = []
    for _, start, end in turn_spans(dialogue):
        pos = start
        for m in _SENT_SPLIT.finditer(dialogue, start, end):
            out.append((pos, m.start()))
            pos = m.end()
        out.append((pos, end))
    return [(a, b) for a, b in out if dialogue[a:b].strip()]


def neutral_pronouns(dialogue: str, others: re.Pattern, window: int = 2) -> tuple[str, list[str]]:
    """The he/she/his/her … of :func:`patient_pronouns` (the patient's:
    no one else named in the sentence or the ``window`` before it) made
    singular "they" with the grammar kept where it can be ("she is" →
    "they are", "he takes" → "they take", "her knee" → "their knee",
    "tell her" → "tell them"). Returns (text, the changes "she→they")."""
    sents = _sentences(dialogue)
    edits, changes = [], []
    for i, (a, b) in enumerate(sents):
        if not GENDERED_PRONOUN.search(dialogue, a, b):
            continue
        near = " ".join(dialogue[s:e] for s, e in sents[max(0, i - window):i + 1])
        if others.search(near):
            continue
        for m in _PRON_ONE.finditer(dialogue, a, b):
            new, change = _they(m)
            edits.append((m.start(), m.end(), new))
            changes.append(change)
    out, last = [], 0
    for s, e, new in edits:
        out += [dialogue[last:s], new]
        last = e
    return "".join(out) + dialogue[last:], changes


# "Mr. [NAME]" → "[NAME]"; "Miss A B C", "mister Jones" (initials and a name the
# redaction did not take) → "[NAME]"
_TITLE_BEFORE_NAME = re.compile(r"(?<![\w-])(?:mr|mrs|ms|mister|miss|missus)\.?[ \t]+(?=\[NAME\])", re.I)
_TITLE_INITIALS = re.compile(r"(?<![\w-])(?:Mr|Mrs|Ms|Miss|Mister)\.?[ \t]+[A-Z](?:[ \t]+[A-Z])*(?![\w'-])"
                             r"|(?<![\w-])(?:[Mm]ister|[Mm]issus)[ \t]+[A-Z][a-z]+(?![\w-])")
# words of address, with the comma before them: "Hello, sir." → "Hello."; "Yes, ma'am, it hurts" → "Yes, it hurts"
_ADDRESS = re.compile(r"(?:,[ \t]*)?(?<![\w-])(?:sir|ma'am|ma’am|maam|madam)(?![\w'-])(?:[ \t]*,(?=[ \t]*\w))?"
                      r"|,[ \t]*miss(?=[ \t]*[.?!,]|[ \t]*$)"
                      r"|(?:(?<=hello)|(?<=doing)|(?<=thanks)|(?<=welcome)) miss(?=[ \t]*[.?!,])",
                      re.I | re.M)
_PERSON_NOUN_AFTER = re.compile(r"(?<![\w-])(male|female)[ \t]+(?=(?:patient|person|individual|adult)s?\b)", re.I)


def _replace_words(text: str, mapping: dict[str, str]) -> tuple[str, list[str]]:
    """Every word (or phrase) of ``mapping`` → its replacement, whole
    words, any case, the first letter's case kept."""
    if not mapping:
        return text, []
    lower = {k.lower(): v for k, v in mapping.items()}
    rx = re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(k).replace(r"\ ", r"\s+")
                                                   for k in sorted(lower, key=len, reverse=True)) + r")(?![\w-])",
                    re.I)
    changes = []

    def sub(m):
        key = re.sub(r"\s+", " ", m.group(0).lower())
        new = lower[key]
        changes.append(f"{key}→{new or '(removed)'}")
        return _case_like(m.group(0), new) if new else _GONE

    return rx.sub(sub, text), changes


def redact_cues(dialogue: str, screen: dict) -> tuple[str, dict[str, list[str]]]:
    """Rewrite the screen's redactable cues in a de-identified dialog
    (seed 002 §3; see the comment above). ``screen``: params/soap.yaml
    ``screen``; its ``redact`` maps kind → {word: replacement} (an empty
    replacement removes the word), ``redact_pronouns`` (default true)
    makes the patient's he/she "they" (:func:`neutral_pronouns`).
    Speaker labels are never touched. Returns (text, changes per kind:
    "husband→spouse", "she→they", …)."""
    changes: dict[str, list[str]] = {}
    redact = screen.get("redact") or {}
    if screen.get("redact_pronouns", True):
        # first: the neutral words below ("person", "spouse") are among the people a he/she may be.
        # The pronouns of the people in `pronoun_referents` (the spouse: A.3.5, "where patient spouse
        # gender is not mentioned") are made neutral too: they are no "others" here.
        keep = {str(w).lower() for w in screen.get("pronoun_referents", [])}
        others = _words_regex([w for w in screen["others"] if str(w).lower() not in keep])
        dialogue, changes["pronoun"] = neutral_pronouns(dialogue, others)
    pieces = _pieces(dialogue)
    out = []
    for kind, s in pieces:
        if kind == "label":
            out.append(s)
            continue
        if redact.get("title", True) is not False:
            for rx, new in ((_TITLE_BEFORE_NAME, ""), (_TITLE_INITIALS, "[NAME]")):
                found = rx.findall(s)
                s = rx.sub(new, s)
                changes.setdefault("title", []).extend(f"{f.strip().lower()}→{new or '(removed)'}" for f in found)
        if redact.get("address", True) is not False:
            found = _ADDRESS.findall(s)
            # "Sir, your pediatrician called." -> "Your pediatrician called." (a capital goes on)
            s = _ADDRESS.sub(lambda m: _GONE + ("\x02" if m.group(0).lstrip(", \t")[:1].isupper() else ""), s)
            s = re.sub(r"\x02([ \t,]*)([a-z])", lambda m: m.group(1) + m.group(2).upper(), s).replace("\x02", "")
            changes.setdefault("address", []).extend(
                f"{re.sub(r'[^a-z’]', '', f.lower().replace(chr(39), '’'))}→(removed)" for f in found)
        found = _PERSON_NOUN_AFTER.findall(s)
        s = _PERSON_NOUN_AFTER.sub("", s)
        changes.setdefault("gender", []).extend(f"{f.lower()}→(removed)" for f in found)
        for k, mapping in redact.items():
            if isinstance(mapping, dict):
                s, ch = _replace_words(s, mapping)
                changes.setdefault(k, []).extend(ch)
        s = _GONE_ELSEWHERE.sub(" ", _GONE_BEFORE_PUNCT.sub("", s))
        out.append(s)
    return "".join(out), {k: v for k, v in changes.items() if v}


def redactions_text(changes: dict[str, list[str]]) -> str:
    """The changes of :func:`redact_cues` as one line for the review list:
    "pronoun: she→they ×3, her→their; spouse: husband→spouse"."""
    parts = []
    for kind, ch in changes.items():
        counts = {}
        for c in ch:
            counts[c] = counts.get(c, 0) + 1
        parts.append(f"{kind}: " + ", ".join(c if n == 1 else f"{c} ×{n}" for c, n in counts.items()))
    return "; ".join(parts)
