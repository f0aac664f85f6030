"""The prompt formats: one table, name → prompt, reply parser, letters.

Every request the project sends is stored under a ``prompt_format`` name.
This table is where a format is defined once; message building
(:func:`medaudit.llm.mcq.build_messages`), scoring, the importer, the profile
checks (:mod:`medaudit.config`) and the judge stage (:mod:`medaudit.llm.judging`)
read it. Adding a format is one entry here (and its prompt file under
``prompts/``).

Kinds:

- ``mcq``: a multiple-choice answer. ``messages(question, options, shown)``
  builds the request from the question and the options as shown ("A. …");
  ``parser(text, letters)`` reads the chosen letter, which scoring maps back
  through the permutation; ``letters`` is the letter set a parser assumes
  when the item's own option letters are not known.
- ``verdict``: a judge's reply. ``parser(text)`` reads the verdict; the
  study module that owns the format builds its messages (they carry study
  data: a note, a rubric, an answer to judge).
- ``free``: free text stored unparsed (answers, notes, an agent's output);
  the owning study reads it.

Statuses are :mod:`medaudit.parse`'s one vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from medaudit import parse, prompts

Kind = Literal["mcq", "verdict", "free"]


def _mcq_a2(question: str, options: str, shown: str) -> list[dict]:
    return [{"role": "user", "content": prompts.load("mcq_a2").format(question=question, options=options)}]


def _mcq_explain(question: str, options: str, shown: str) -> list[dict]:
    letters = ", ".join(shown[:-1]) + f", or {shown[-1]}"
    # the authors' layout, as in _mcq_option: each option on its own line, each line ending in a newline
    return [{"role": "system", "content": prompts.load("mcq_explain_system").format(letters=letters)},
            {"role": "user", "content": prompts.load("mcq_explain_user").format(question=question,
                                                                                 options=options + "\n")}]


def _mcq_option(question: str, options: str, shown: str) -> list[dict]:
    letters = ", ".join(shown[:-1]) + f", or {shown[-1]}"
    # the authors' option list: each option on its own line, each line ending in a newline
    return [{"role": "system", "content": prompts.load("mcq_option_system").format(letters=letters)},
            {"role": "user", "content": prompts.load("mcq_option_user").format(question=question,
                                                                                options=options + "\n",
                                                                                letters=letters)}]


def _mcq_letter(question: str, options: str, shown: str) -> list[dict]:
    return [{"role": "user", "content": prompts.load("fairmedqa_validation").format(question=question,
                                                                                    options=options)}]


def _amqa_no_cot(question: str, options: str, shown: str) -> list[dict]:
    return [{"role": "user", "content": prompts.load("fairmedqa_amqa_no_cot").format(question=question,
                                                                                     options=options)}]


def _fairmp_naive(question: str, options: str, shown: str) -> list[dict]:
    return [{"role": "user", "content": prompts.load("fairmp_naive").format(question=question, options=options)}]


@dataclass(frozen=True)
class PromptFormat:
    """One prompt format of :data:`FORMATS`: its name, kind and seed section, its prompt
    files, the parser of its replies, and for a multiple-choice format the message builder, the
    answer letters and any token limit of its own."""
    name: str
    kind: Kind
    source: str                               # the seed section it comes from
    prompts: tuple[str, ...] = ()             # its files under prompts/
    parser: Callable | None = None
    messages: Callable[[str, str, str], list[dict]] | None = None   # mcq only
    letters: str | None = None                # mcq only
    max_tokens: int | None = None             # a limit the format itself sets (None: the profile's)


def _table(*formats: PromptFormat) -> dict[str, PromptFormat]:
    return {f.name: f for f in formats}


FORMATS: dict[str, PromptFormat] = _table(
    # multiple-choice answers
    PromptFormat("mcq", "mcq", "seed 000 A.2: the answer letter in square brackets", ("mcq_a2",),
                 parse.parse_bracket_letter, _mcq_a2, "ABCD"),
    PromptFormat("mcq_explain", "mcq", "seed 003 §II.C brief explanation + option prompting, ending 'The answer "
                 "is X': the authors' released prompt (HIVE-UofT/Evaluatiog-Cultural-Clues-Medical-LLMs@d8ddddc, "
                 "Code/*_short_diagnose.py, Code/openai-short-diagnose.ipynb), the one their released answers were "
                 "asked with; the seed prints it with its line breaks lost and its PENALTIES FOR VIOLATION block "
                 "left out",
                 ("mcq_explain_system", "mcq_explain_user"), parse.parse_answer_is, _mcq_explain, "ABCDE"),
    PromptFormat("mcq_option", "mcq", "seed 003 §II.C option prompting, 'the model outputs only the selected "
                 "option': the authors' released prompt and max_new_tokens=1 (HIVE-UofT/Evaluatiog-Cultural-Clues-"
                 "Medical-LLMs@5ded0d2, Code/*_option_diagnose.py)", ("mcq_option_system", "mcq_option_user"),
                 parse.parse_one_letter, _mcq_option, "ABCDE", max_tokens=1),
    PromptFormat("mcq_letter", "mcq", "seed 001 A.7.4: the Validation-Agent's 'index letter' answer",
                 ("fairmedqa_validation",), parse.parse_index_letter, _mcq_letter, "ABCDE"),
    PromptFormat("amqa_no_cot", "mcq", "seeds 001/004 as their authors ran the released benchmark: format_prompt "
                 "no_cot of XY-Showing/AMQA@335b175 Scripts/AMQA_Benchmark_LLMs.py (question, the options a line "
                 "each, the instruction; one user turn); read strictly here, by their extract_choice with "
                 "fairmedqa_extract: authors (medaudit.prep.amqa.extract)",
                 ("fairmedqa_amqa_no_cot",), parse.parse_index_letter, _amqa_no_cot, "ABCDE"),
    PromptFormat("fairmp_naive", "mcq", "seed 004's group, FairMedPrompt (XY-Showing/FairMedPrompt@bac0baa "
                 "Script/AMQA_FairMP_Benchmark_LLMs.py, format_prompt naive: one user turn, their text verbatim, "
                 "its missing spaces and line breaks kept); their role, aware and cot prompts replace its opening "
                 "(params/mitigations.yaml preamble)",
                 ("fairmp_naive",), parse.parse_index_letter, _fairmp_naive, "ABCDE"),
    # judges
    PromptFormat("cultural_judge", "verdict", "seed 003 §III.B: the authors' released culture-referential judge",
                 ("cultural_judge_system", "cultural_judge_user"), parse.yes_no_tag),
    PromptFormat("open_judge", "verdict", "seed 000 B.6: the correctness judge",
                 ("openended_judge", "openended_judge_case"), parse.correct_incorrect),
    PromptFormat("open_entail", "verdict", "seed 000 §4: bidirectional entailment between two answers",
                 ("openended_entail",), parse.entailment),
    PromptFormat("soap_incidence", "verdict", "seed 002 §3.4: the incidence judge (YES/NO)",
                 ("soap_incidence",), parse.first_word),
    PromptFormat("soap_disparity", "verdict", "seed 002 §4.2, Figure 5: the language-disparity judge",
                 ("soap_disparity",), parse.decision),
    # free text
    PromptFormat("open", "free", "the project's (seed 000 gives no answer prompt): an open-ended answer",
                 ("openended_answer_neutral", "openended_answer_single")),
    PromptFormat("open_reformulate", "free", "seed 000 B.4: the open-form reformulation",
                 ("openended_reformulate",)),
    PromptFormat("open_cluster", "free", "seed 000 B.5: LLM clustering of answers (JSON)", ("openended_cluster",)),
    PromptFormat("soap_augment", "free", "seed 002 A.3.1: dialog augmentation (JSON)", ("soap_augment",)),
    PromptFormat("soap_note", "free", "seed 002 §3.3: a SOAP note",
                 ("soap_note_mts_system", "soap_note_mts_user", "soap_note_aci_system", "soap_note_aci_user")),
    PromptFormat("cultural_augment", "free", "seed 003 §II.B: a cultural piece for another item",
                 ("cultural_augment_system", "cultural_augment_identity", "cultural_augment_context")),
    PromptFormat("fairmedqa_generation", "free", "seed 001 A.7.1: the Generation-Agent's description",
                 ("fairmedqa_generation", "fairmedqa_retry", "fairmedqa_retry_direction")),
    PromptFormat("fairmedqa_generation_json", "free", "seed 001 A.7.1, asking for JSON",
                 ("fairmedqa_generation_json", "fairmedqa_retry", "fairmedqa_retry_direction")),
    PromptFormat("fairmedqa_fusion", "free", "seed 001 A.7.2: the Fusion-Agent", ("fairmedqa_fusion",)),
)


def get(name: str) -> PromptFormat:
    """The format ``name`` (``<format>+<strategy>``: :func:`with_strategy`);
    a ValueError naming the known ones otherwise."""
    if name in FORMATS:
        return FORMATS[name]
    f = with_strategy(name)
    if f is None:
        raise ValueError(f"unknown prompt_format {name!r} (medaudit.llm.formats.FORMATS: {sorted(FORMATS)}, "
                         "or a multiple-choice one as <format>+<strategy> of params/mitigations.yaml)")
    return f


def names(kind: Kind) -> list[str]:
    """The formats of one kind, in table order."""
    return [n for n, f in FORMATS.items() if f.kind == kind]


def with_strategy(name: str) -> PromptFormat | None:
    """A multiple-choice format under a mitigation strategy,
    ``<format>+<strategy>`` (:mod:`medaudit.llm.mitigations`): the format's
    messages transformed by the strategy, its answers stored under this
    name (never mixed with the plain format's); a chain of thought gets the
    strategy's token budget and is read by its final answer
    (:func:`medaudit.llm.mitigations.final_answer`). None for a name without a
    strategy or whose base is not a multiple-choice format."""
    from medaudit.llm import mitigations

    base, strategy = mitigations.split_format(name)
    f = FORMATS.get(base)
    if f is None or f.kind != "mcq" or strategy == mitigations.NONE:
        return None
    s = mitigations.default().get(strategy)
    return PromptFormat(
        name, "mcq", f"{f.source}; under mitigation strategy {strategy} ({s.source})", f.prompts,
        mitigations.final_answer if s.chain_of_thought else f.parser,
        lambda question, options, shown: mitigations.apply(f.messages(question, options, shown), s, base),
        f.letters, s.max_tokens if s.chain_of_thought else f.max_tokens)


def known(name: str) -> bool:
    """Whether ``name`` is a format: one of :data:`FORMATS`, or one under a strategy."""
    return name in FORMATS or with_strategy(name) is not None


def answer_parser(name: str) -> Callable | None:
    """The letter parser of a multiple-choice format (under a strategy too);
    None for any other format (its text is stored unparsed)."""
    f = FORMATS.get(name) or with_strategy(name)
    return f.parser if f is not None and f.kind == "mcq" else None


def verdict_parser(name: str) -> Callable:
    """The verdict parser of a judge format."""
    f = get(name)
    if f.kind != "verdict":
        raise ValueError(f"prompt_format {name!r} is a {f.kind} format, not a judge's")
    return f.parser
