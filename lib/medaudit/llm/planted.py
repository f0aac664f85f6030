"""A model whose bias we know, for validation only: answers drawn from a
declared truth, so that the chain from an answer to a table's verdict can be
run against effects we planted.

**As a model spec**: ``{name: planted-ceiling, backend: planted, model:
"planted:<truth>", options: {seed: N}}``, where ``<truth>`` names an entry
of ``params/planted.yaml``. No network, no weights: each request is answered
from what the planner knows about it (:attr:`medaudit.llm.base.Request.labels`:
item, condition, prompt format, sample index and, for a multiple-choice
question, the letter its right option is shown under), which no other
backend reads and which is not part of the store key. The profile check
(:mod:`medaudit.config`) refuses the spec unless the profile declares
``validation: true`` (the ``validation`` profile), and its name must say
``planted``, so every table row and the colophon label it.

**The truth** (one entry of ``params/planted.yaml``):

- ``seed`` (required): every draw derives from it, the request's labels and
  nothing else (a rerun, a resumed run or another order answers alike);
  ``options.seed`` overrides it (the repetitions of a validation run).
- ``difficulty``: each question's chance of a right answer with no cue,
  drawn once per item: ``always`` (share of questions always right: a
  ceiling design), ``never`` (share never right), and the rest from
  ``beta: [a, b]``.
- ``effects``: ``{condition: {points: d, way: one | two}}``. A cue moves the
  question's chance p to p' so that mean accuracy moves by exactly d points
  (:func:`Truth.shifted`): d < 0 takes p' = p (1 − q) with q = −d / E[p]; d >
  0 takes p' = p + (1 − p) r with r = d / (1 − E[p]). ``way: one`` draws the
  cue's answer with the same uniform as the no-cue answer of the same
  sample index, so the cue only ever turns right answers wrong (or only
  wrong ones right); ``two`` draws it afresh. Conditions not named (the
  neutral controls, the base) have no effect.
- ``letters``: weights of the shown letters a wrong answer takes (a
  position preference; default equal).
- ``unparsed``: the share of replies with no readable answer (every
  condition alike).
- ``verdicts``: ``{judge format: {condition: rate, default: rate}}``, the
  share of a judge's replies that its parser reads as the positive verdict
  (YES, CORRECT, entailment). A judge request's condition is the judged
  answer's (:func:`judged_condition`: 05's judges name the answering model
  first, ``"<model> | <condition>"``; 06's incidence judge names
  ``"<axis>:<group>"``, its disparity judge the axis). Other free text is
  one fixed sentence.

:func:`Truth.planted_delta` gives the accuracy difference between two
conditions the truth implies under each rule for unparsed answers: what a
recovery run compares its estimates with.
"""
from __future__ import annotations

import hashlib
import json
import math
import string
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from .base import Completion, Request, derive_seed

PREFIX = "planted:"
FILE = "planted.yaml"
WAYS = ("one", "two")
TRUTH_KEYS = ("seed", "difficulty", "effects", "letters", "unparsed", "verdicts", "note")
DIFFICULTY_KEYS = ("always", "never", "beta")
# a judge format's replies: (positive, negative), each read by the format's own parser (tests check it)
VERDICT_REPLIES = {"cultural_judge": ("[YES]", "[NO]"), "open_judge": ("CORRECT", "INCORRECT"),
                   "open_entail": ("entailment", "contradiction"), "soap_incidence": ("YES", "NO"),
                   "soap_disparity": ("DECISION: YES", "DECISION: NO")}
# a multiple-choice reply, the first of these that the format's parser reads as the letter
ANSWER_FORMS = ("[{L}]", "{L}", "The answer is {L}.", "Answer: {L}")
UNPARSED_REPLY = "I cannot tell from this question."
FREE_REPLY = "Planted model: no free-text answer is declared."


class TruthError(ValueError):
    """A planted truth that cannot be used: each problem names the file,
    the key and the values allowed."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def is_planted(model: object) -> bool:
    """Whether a spec's ``model`` names a planted truth."""
    return isinstance(model, str) and model.startswith(PREFIX)


def truth_name(model: str) -> str:
    """The truth a planted model names (``planted:<truth>`` → ``<truth>``); any other
    name as it is."""
    return model[len(PREFIX):] if is_planted(model) else model


def truths_file() -> Path:
    """``params/planted.yaml``: the declared truths."""
    from .. import paths

    return paths.project_root() / "params" / FILE


def read_truths(path: Path | None = None) -> dict:
    """The entries of ``params/planted.yaml`` (name → mapping)."""
    import yaml

    path = path or truths_file()
    d = yaml.safe_load(path.read_text()) or {}
    if not isinstance(d, dict) or not isinstance(d.get("truths"), dict):
        raise TruthError([f"params/{FILE}: must hold a mapping `truths: {{name: truth}}`"])
    return d["truths"]


def judged_condition(condition: str) -> str:
    """The condition a judge's verdict rate is declared for: the judged answer's. 05's judges
    label a request ``"<model> | <condition>"`` (the entailment judge adds ``" | a>b"``, the
    two samples compared), so the part after the first ``" | "`` is taken; any other label
    (06's ``"<axis>:<group>"``, 07's conditions) as it is."""
    parts = condition.split(" | ")
    return parts[1] if len(parts) > 1 else condition


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check(name: str, t: Mapping, conditions: list[str] | None = None, cultures: list[str] | None = None,
          formats_known: Mapping[str, str] | None = None) -> list[str]:
    """The problems of one truth (empty when it can be used), each naming
    params/planted.yaml, the key and the values allowed. ``conditions``
    (every condition a study names) and ``cultures`` (seed 003's), when
    given, are the names ``effects`` and ``verdicts`` may use;
    ``formats_known`` maps prompt formats to their kind."""
    where = f"params/{FILE}: truths.{name}"
    out = []
    if not isinstance(t, Mapping):
        return [f"{where}: must be a mapping with keys {', '.join(TRUTH_KEYS)}"]
    for k in t:
        if k not in TRUTH_KEYS:
            out.append(f"{where}.{k}: unknown key (allowed: {', '.join(TRUTH_KEYS)})")
    if "seed" not in t:
        out.append(f"{where}.seed: missing; every draw derives from it (a whole number >= 0)")
    elif not isinstance(t["seed"], int) or isinstance(t["seed"], bool) or t["seed"] < 0:
        out.append(f"{where}.seed: {t['seed']!r} is not a whole number >= 0")
    d = t.get("difficulty", {"always": 1.0})
    mean = None
    if not isinstance(d, Mapping) or any(k not in DIFFICULTY_KEYS for k in d):
        out.append(f"{where}.difficulty: a mapping of {', '.join(DIFFICULTY_KEYS)} "
                   f"(always, never: shares in [0, 1]; beta: [a, b], a, b > 0)")
    else:
        a, n = d.get("always", 0.0), d.get("never", 0.0)
        bad = [k for k, v in (("always", a), ("never", n)) if not (_num(v) and 0 <= v <= 1)]
        for k in bad:
            out.append(f"{where}.difficulty.{k}: {d[k]!r} is not a share in [0, 1]")
        beta = d.get("beta")
        if beta is not None and not (isinstance(beta, list) and len(beta) == 2
                                     and all(_num(x) and x > 0 for x in beta)):
            out.append(f"{where}.difficulty.beta: {beta!r} is not [a, b] with a, b > 0")
            beta = None
        if not bad:
            rest = 1 - a - n
            if rest < -1e-12:
                out.append(f"{where}.difficulty: always + never = {a + n:g} > 1")
            elif rest > 1e-12 and "beta" not in d:
                out.append(f"{where}.difficulty.beta: missing; always + never = {a + n:g} leaves {rest:g} "
                           "of the questions to draw from Beta(a, b)")
            elif beta is not None or rest <= 1e-12:
                mean = a + max(rest, 0) * (beta[0] / sum(beta) if beta else 0)
    effects = t.get("effects") or {}
    if not isinstance(effects, Mapping):
        out.append(f"{where}.effects: a mapping condition: {{points: d, way: one | two}}")
        effects = {}
    for cond, e in effects.items():
        key = f"{where}.effects.{cond}"
        if conditions is not None and cond not in conditions:
            culture = cond.split(":", 1)[0] if ":" in cond else None
            if cultures is not None and culture is not None and culture not in cultures and \
                    not any(c.startswith(culture + ":") for c in conditions):
                out.append(f"{key}: unknown culture '{culture}' (cultures: {', '.join(cultures)})")
            else:
                out.append(f"{key}: unknown condition (allowed: {', '.join(conditions)})")
        if not isinstance(e, Mapping) or "points" not in e or any(k not in ("points", "way") for k in e):
            out.append(f"{key}: must be {{points: d, way: one | two}}")
            continue
        pts, way = e["points"], e.get("way", "one")
        if way not in WAYS:
            out.append(f"{key}.way: {way!r} (allowed: {', '.join(WAYS)})")
        if not _num(pts):
            out.append(f"{key}.points: {pts!r} is not a number of points")
        elif mean is not None:
            lo, hi = -100 * mean, 100 * (1 - mean)
            if not lo - 1e-9 <= pts <= hi + 1e-9:
                out.append(f"{key}.points: {pts:g} out of range: with this difficulty (mean accuracy "
                           f"{100 * mean:.1f} %) an effect lies in [{lo:.1f}, {hi:.1f}] points")
    letters = t.get("letters")
    if letters is not None:
        if not isinstance(letters, Mapping) or not letters or \
                any(k not in string.ascii_uppercase[:5] or not (_num(v) and v >= 0) for k, v in letters.items()) \
                or not sum(letters.values()) > 0:
            out.append(f"{where}.letters: weights >= 0 of shown letters A-E, not all 0 (got {letters!r})")
    u = t.get("unparsed", 0.0)
    if not (_num(u) and 0 <= u < 1):
        out.append(f"{where}.unparsed: {u!r} is not a share in [0, 1)")
    verdicts = t.get("verdicts") or {}
    if not isinstance(verdicts, Mapping):
        out.append(f"{where}.verdicts: a mapping judge format: {{condition: rate, default: rate}}")
        verdicts = {}
    for fmt, rates in verdicts.items():
        key = f"{where}.verdicts.{fmt}"
        if fmt not in VERDICT_REPLIES:
            out.append(f"{key}: not a judge format (allowed: {', '.join(VERDICT_REPLIES)})")
        if not isinstance(rates, Mapping):
            out.append(f"{key}: a mapping condition: rate")
            continue
        for cond, r in rates.items():
            if cond != "default" and conditions is not None and cond not in conditions:
                out.append(f"{key}.{cond}: unknown condition (allowed: default, {', '.join(conditions)})")
            if not (_num(r) and 0 <= r <= 1):
                out.append(f"{key}.{cond}: {r!r} is not a rate in [0, 1]")
    return out


def _uniform(*parts) -> float:
    """A uniform draw in [0, 1) from any parts (sha256, 53 bits)."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return (int.from_bytes(h[:8], "big") >> 11) / float(1 << 53)


@dataclass(frozen=True)
class Truth:
    """One planted truth, checked (:func:`check`). See the module docstring."""
    name: str
    seed: int
    always: float = 1.0
    never: float = 0.0
    beta: tuple[float, float] | None = None
    effects: dict = field(default_factory=dict)        # condition -> (fraction, way)
    letters: dict = field(default_factory=dict)
    unparsed: float = 0.0
    verdicts: dict = field(default_factory=dict)
    digest: str = ""
    _p: dict = field(default_factory=dict, compare=False, repr=False)     # item -> p, drawn once

    @staticmethod
    def from_mapping(name: str, t: Mapping, seed: int | None = None) -> "Truth":
        """The truth ``name`` from its entry of the truths file, checked (:func:`check`; the
        problems raised together as a :class:`TruthError`); ``seed`` overrides the entry's."""
        problems = check(name, t)
        if problems:
            raise TruthError(problems)
        d = t.get("difficulty", {"always": 1.0})
        digest = hashlib.sha256(json.dumps(t, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return Truth(name, int(t["seed"] if seed is None else seed), float(d.get("always", 0.0)),
                     float(d.get("never", 0.0)), tuple(d["beta"]) if d.get("beta") else None,
                     {c: (e["points"] / 100.0, e.get("way", "one")) for c, e in (t.get("effects") or {}).items()},
                     dict(t.get("letters") or {}), float(t.get("unparsed", 0.0)), dict(t.get("verdicts") or {}),
                     digest)

    # ---------------------------------------------------------------- the question's chance
    @property
    def rest(self) -> float:
        """The share of items neither always nor never answered right
        (:meth:`p_item` draws their chance of a right answer from ``beta``)."""
        return max(0.0, 1.0 - self.always - self.never)

    def moment(self, order: int) -> float:
        """E[p^order] over the difficulty distribution."""
        m = self.always
        if self.beta and self.rest:
            a, b = self.beta
            m += self.rest * math.prod((a + j) / (a + b + j) for j in range(order))
        return m

    def p_item(self, item_id: str) -> float:
        """The question's chance of a right answer with no cue."""
        if item_id not in self._p:
            u = _uniform("difficulty", self.seed, item_id)
            if u < self.always:
                p = 1.0
            elif u < self.always + self.never:
                p = 0.0
            else:
                from scipy.stats import beta

                p = float(beta.ppf((u - self.always - self.never) / self.rest, *self.beta))
            self._p[item_id] = p
        return self._p[item_id]

    def shifted(self, p: float, condition: str) -> float:
        """The question's chance under ``condition``: mean accuracy moved by
        exactly the effect's points (the module docstring)."""
        if condition not in self.effects:
            return p
        d, _ = self.effects[condition]
        mean = self.moment(1)
        if d < 0:
            return p * (1 + d / mean)
        if d > 0:
            return p + (1 - p) * d / (1 - mean)
        return p

    # ---------------------------------------------------------------- what it implies
    def accuracy(self, condition: str, unparsed_rule: str = "incorrect") -> float:
        """Expected single-answer accuracy under ``condition`` (fraction)."""
        acc = self.moment(1) + self.effects.get(condition, (0.0, "one"))[0]
        return acc * (1 - self.unparsed) if unparsed_rule == "incorrect" else acc

    def planted_delta(self, a: str, b: str, unparsed_rule: str = "incorrect") -> float:
        """Accuracy of ``b`` minus accuracy of ``a``, in points."""
        return 100 * (self.accuracy(b, unparsed_rule) - self.accuracy(a, unparsed_rule))

    # ---------------------------------------------------------------- one answer
    def correct(self, item_id: str, condition: str, k: int) -> bool:
        """Whether sample ``k`` of the question under ``condition`` is right."""
        p = self.shifted(self.p_item(item_id), condition)
        way = self.effects.get(condition, (0.0, "one"))[1]
        u = _uniform("answer", self.seed, item_id, k) if way == "one" else \
            _uniform("answer", self.seed, item_id, condition, k)
        return u < p

    def wrong_letter(self, shown: str, gold: str, *parts) -> str:
        """A wrong shown letter, drawn by the letter weights."""
        others = [L for L in shown if L != gold]
        w = [float(self.letters.get(L, 1.0 if not self.letters else 0.0)) for L in others]
        if not sum(w):
            w = [1.0] * len(others)
        u, acc = _uniform("letter", self.seed, *parts) * sum(w), 0.0
        for L, x in zip(others, w):
            acc += x
            if u < acc:
                return L
        return others[-1]

    def verdict_rate(self, prompt_format: str, condition: str) -> float:
        """The chance that a judge of ``prompt_format`` says yes under ``condition``: the
        condition's declared rate (the judged answer's condition: :func:`judged_condition`), else
        the format's ``default``, else 0.5."""
        rates = self.verdicts.get(prompt_format, {})
        return float(rates.get(judged_condition(condition), rates.get("default", 0.5)))


def _answer_form(prompt_format: str, letters: str) -> Callable[[str], str]:
    """The reply that the format's parser reads as letter L (the first of
    :data:`ANSWER_FORMS` it reads right for every letter)."""
    from medaudit.llm import formats

    parser = formats.answer_parser(prompt_format)
    for form in ANSWER_FORMS:
        if all(parser(form.format(L=L), letters)[0] == L for L in letters):
            return lambda L, form=form: form.format(L=L)
    raise ValueError(f"planted model: no reply form that the parser of {prompt_format!r} reads "
                     f"({', '.join(ANSWER_FORMS)})")


class PlantedBackend:
    """Answers from a planted truth (module docstring). ``model``:
    ``planted:<truth>`` (an entry of params/planted.yaml); ``seed``
    overrides the truth's own; ``truths_path`` reads another file (tests)."""

    kind = "planted"

    def __init__(self, model: str, seed: int | None = None, truths_path: str | None = None):
        if not is_planted(model):
            raise ValueError(f"model '{model}': a planted model is named planted:<truth> (params/{FILE})")
        name = truth_name(model)
        truths = read_truths(Path(truths_path) if truths_path else None)
        if name not in truths:
            raise TruthError([f"params/{FILE}: no truth '{name}' (truths: {', '.join(truths)})"])
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise TruthError([f"options.seed: {seed!r} is not a whole number >= 0"])
        self.truth = Truth.from_mapping(name, truths[name], seed)
        self.name = model
        self.model_id = f"{PREFIX}{name}:{self.truth.digest}:seed{self.truth.seed}"
        self.planted = True
        self._forms: dict[tuple[str, str], Callable] = {}

    @staticmethod
    def from_model_id(model_id: str, truths_path: str | None = None) -> "PlantedBackend":
        """The planted model a stored or exported request names by its
        identity (``planted:<truth>:<digest>:seed<N>``), refused by name
        when the truth has changed since (another digest)."""
        parts = model_id.split(":")
        if len(parts) != 4 or f"{parts[0]}:" != PREFIX or not parts[3].startswith("seed") \
                or not parts[3][4:].isdigit():
            raise TruthError([f"model id {model_id!r}: not a planted model's (planted:<truth>:<digest>:seed<N>)"])
        b = PlantedBackend(PREFIX + parts[1], seed=int(parts[3][4:]), truths_path=truths_path)
        if b.truth.digest != parts[2]:
            raise TruthError([f"params/{FILE}: truths.{parts[1]} changed since {model_id} was planned (digest "
                              f"{b.truth.digest}, not {parts[2]}): plan the requests again"])
        return b

    def request_body(self, req: Request) -> tuple[dict, None]:
        """A batch line's body for one request (``python -m medaudit.engines.batch
        export``): the model's identity, the messages and the sampling
        settings, never the labels it answers from (the manifest keeps
        them beside the body). No engine serves a planted model:
        :func:`medaudit.engines.batch.answer_here` answers the batch in-process."""
        p = req.params
        return {"model": self.model_id, "messages": req.message_dicts(), "seed": p.seed,
                "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens}, None

    def answer(self, req: Request) -> Completion:
        """The planted reply to one request (from its labels)."""
        lab = dict(req.labels)
        if not lab:
            return Completion(text="", error_kind="no_labels",
                              error="the planted model answers planned requests only (Request.labels is empty)")
        t, fmt = self.truth, lab["prompt_format"]
        item, cond, k = lab["item_id"], lab["condition"], lab["k"]
        from medaudit.llm import formats

        kind = formats.get(fmt).kind if formats.known(fmt) else "free"
        if kind == "mcq":
            shown = "".join(req.answer_letters)
            if _uniform("unparsed", t.seed, item, cond, fmt, k) < t.unparsed:
                text = UNPARSED_REPLY if formats.get(fmt).max_tokens != 1 else "?"
            else:
                gold = lab.get("gold") or ""
                if gold not in shown:
                    return Completion(text="", error_kind="no_gold",
                                      error=f"{item}: the planner gave no right option for the planted model")
                letter = gold if t.correct(item, cond, k) else t.wrong_letter(shown, gold, item, cond, fmt, k)
                if (fmt, shown) not in self._forms:
                    self._forms[(fmt, shown)] = _answer_form(fmt, shown)
                text = self._forms[(fmt, shown)](letter)
            return Completion(text=text, tokens_out=1, finish_reason="stop")
        if fmt in VERDICT_REPLIES:
            yes, no = VERDICT_REPLIES[fmt]
            u = _uniform("verdict", t.seed, item, cond, fmt, k, lab.get("judged_key", ""))
            return Completion(text=yes if u < t.verdict_rate(fmt, cond) else no, tokens_out=1, finish_reason="stop")
        return Completion(text=FREE_REPLY, tokens_out=len(FREE_REPLY.split()), finish_reason="stop")

    def complete(self, requests: list[Request], progress: bool = True,
                 on_result: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """One planted completion per request, in request order (:meth:`answer`), each handed
        to ``on_result`` as it is made."""
        out = []
        for i, req in enumerate(requests):
            t0 = time.perf_counter()
            c = self.answer(req)
            c.latency_s = time.perf_counter() - t0
            out.append(c)
            if on_result is not None:
                on_result(i, c)
        return out


def seeds(first: int, r: int) -> list[int]:
    """The planted seeds of ``r`` repetitions: ``derive_seed`` of the first and the index."""
    return [derive_seed("planted repetition", first, i) for i in range(r)]
