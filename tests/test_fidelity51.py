"""Issue 51 (fidelity): the paper profile's seed-003, seed-000 and FairMedQA
selections follow the seeds, or the authors' scripts where a seed is silent.
Each test failed before its fix."""
from __future__ import annotations

import pytest

from medaudit import cultural
from medaudit.llm import GenParams, Request

API = {"name": "gpt-5.2", "backend": "openai", "model": "gpt-5.2"}
SERVED = {"name": "llama-3.1-8b", "backend": "openai", "model": "meta-llama/Llama-3.1-8B-Instruct",
          "options": {"base_url": "http://127.0.0.1:8000/v1"}}

# ------------------------------------------------------------------ item 1: seed 003, the authors' API call


def test_authors_api_call_is_temperature_zero_without_a_token_cap():
    """HIVE-UofT/Evaluatiog-Cultural-Clues-Medical-LLMs@d8ddddc,
    Code/opena-option-diagnose.ipynb and Code/openai-short-diagnose.ipynb:
    ``client.chat.completions.create(model="gpt-5.2", messages=messages,
    temperature = 0.0)``: temperature 0, no token limit, in both forms."""
    g, explain = cultural.answer_gen("authors", API, temperature=0.7, top_p=0.9, max_tokens=16,
                                     explain_max_tokens=256)
    assert (g.temperature, g.top_p, g.max_tokens, explain) == (0.0, None, GenParams.NO_LIMIT, GenParams.NO_LIMIT)
    # a model served from this machine (vLLM) is the authors' local pipeline: its own config, their budgets
    g, explain = cultural.answer_gen("authors", SERVED, temperature=0.7, top_p=0.9, max_tokens=16,
                                     explain_max_tokens=256)
    assert g.temperature is None and explain == cultural.AUTHORS_EXPLAIN_MAX_TOKENS


def test_authors_api_option_answers_are_not_capped_at_one_token():
    """The option form's one-token limit is the authors' local
    ``max_new_tokens=1``; their API calls set none."""
    path, sentence, kw = _cultural_inputs()
    cs = cultural.variants(path, sentence, **kw)
    g, explain = cultural.answer_gen("authors", API, temperature=0.7, top_p=0.9, max_tokens=16,
                                     explain_max_tokens=256)
    plan = cultural.answer_plan(cs, forms=["5opt"], formats=["mcq_option", "mcq_explain"], n_items=1, n_explain=1,
                                model="gpt-5.2", backend="openai", model_id="x", k=1, seed=1, gen=g,
                                explain_max_tokens=explain)
    assert {(s.prompt_format, s.request.params.max_tokens, s.request.params.temperature) for s in plan} == {
        ("mcq_option", GenParams.NO_LIMIT, 0.0), ("mcq_explain", GenParams.NO_LIMIT, 0.0)}


def _cultural_inputs():
    from medaudit import data, paths

    cfg = cultural.load_config()
    return paths.raw(*data.CULTURAL), cultural.neutral_sentence(cfg), {"config": cfg}


def test_no_limit_sends_no_max_tokens():
    from medaudit.llm.openai_backend import OpenAIBackend

    b = OpenAIBackend("gpt-4.1", base_url="http://127.0.0.1:9/v1", lookup_served=False)
    msgs = [{"role": "user", "content": "x"}]
    body, _ = b.request_body(Request.chat(msgs, GenParams(0.0, None, GenParams.NO_LIMIT)))
    assert "max_tokens" not in body and body["temperature"] == 0.0 and "top_p" not in body
    assert b.request_body(Request.chat(msgs, GenParams(0.0, None, 8)))[0]["max_tokens"] == 8
    r = OpenAIBackend("gpt-5.2", base_url="http://127.0.0.1:9/v1", lookup_served=False, api_style="reasoning")
    body, settings = r.request_body(Request.chat(msgs, GenParams(0.0, None, GenParams.NO_LIMIT)))
    assert "max_completion_tokens" not in body and "max_tokens" not in body


AUTHORS_EXPLAIN_SYSTEM = """You are a medical expert assistant.
You are given multiple-choice medical questions.
Your task is to analyze the question and the provided answer options, apply correct medical reasoning, and choose the single best answer.

OUTPUT CONSTRAINTS (STRICT):
- The explanation must be exactly 2–3 sentences.
- Do NOT use bullet points, numbering, or headings.
- Do NOT include disclaimers, preambles, or meta-comments.
- Do NOT include extra whitespace or blank lines.
- The response must follow the exact format described below.

PENALTIES FOR VIOLATION:
- Any deviation from the required format, sentence count, or final answer line will be considered a critical error.
- Any text appearing after the final answer line will invalidate the response.
- Failure to end with the exact phrase will result in a zero score.

FINAL FORMAT (MANDATORY):
- After the explanation, output exactly one final line:
"The answer is X"
where X is one of (A, B, C, D, or E)."""

AUTHORS_EXPLAIN_USER = """Question:
{question}

Options:
{options}

Provide a medical explanation in exactly 2–3 sentences.
Strictly follow all formatting rules.
Then end the response with exactly this line and nothing else:
"The answer is X"
where X is the correct option letter."""


def test_explanation_prompt_is_the_authors_released_text():
    """Code/openai-short-diagnose.ipynb and Code/*_short_diagnose.py
    (HIVE-UofT@d8ddddc): the system prompt with its PENALTIES FOR VIOLATION
    block, the user turn "Question:\\n…\\n\\nOptions:\\n…", each option a
    line ending in a newline; the seed's §II.C text is the same prompt with
    the line breaks lost and that block left out."""
    from medaudit.llm import mcq

    opts = {"A": "one", "B": "two", "C": "three", "D": "four", "E": "five"}
    m = mcq.build_messages("mcq_explain", "Q?", opts, "ABCDE")
    assert m[0] == {"role": "system", "content": AUTHORS_EXPLAIN_SYSTEM}
    assert m[1] == {"role": "user", "content": AUTHORS_EXPLAIN_USER.format(
        question="Q?", options="A. one\nB. two\nC. three\nD. four\nE. five\n")}
    # every sentence of the seed's printed prompt is in the authors' text
    import re

    flat = re.sub(r"\s+", " ", AUTHORS_EXPLAIN_SYSTEM + " " + AUTHORS_EXPLAIN_USER)
    for s in ("Your task is to analyze the question and the provided answer options, apply correct medical "
              "reasoning, and choose the single best answer.", "- The explanation must be exactly 2–3 sentences.",
              '"The answer is X" where X is one of (A, B, C, D, or E).',
              "Then end the response with exactly this line and nothing else: \"The answer is X\" where X is "
              "the correct option letter."):
        assert s in flat
