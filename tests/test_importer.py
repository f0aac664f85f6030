"""Importing external responses (medaudit.llm.importer).

Imported rows must look to the analyses exactly like generated ones (same
columns, types and parsing, options mapped back through the permutation),
re-importing must add nothing, every malformed record must be refused with
a message naming the file, the record and the field, and an unparseable
answer must be a parse failure, never a wrong answer.
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from medaudit.prep import data, perturb
from medaudit import paths
from medaudit.llm import Completion, GenParams, ResponseStore, mcq, runs
from medaudit.llm.importer import OPTIONAL, REQUIRED, ResponseImportError, import_key, import_responses
from support.sandbox import compendium_root
from support.scripted import ScriptedBackend

ROOT = Path(__file__).resolve().parents[1]

SUPPORT = Path(__file__).resolve().parent / "support"

# what the analyses read from a response row
ANALYSED = ["model", "item_id", "condition", "prompt_format", "sample", "permutation", "temperature", "top_p",
            "max_tokens", "seed", "response_text", "parsed_answer", "parse_status", "answer_logprob",
            "letter_logprobs", "tokens_in", "tokens_out"]
IDENT = ["model", "item_id", "condition", "prompt_format", "sample"]
COLUMNS = list(REQUIRED) + [c for c in OPTIONAL if c not in ("judged_model", "judged_format")]   # answers, not verdicts


@pytest.fixture(scope="module")
def items(medqa4) -> pd.DataFrame:
    return medqa4.head(3)


@pytest.fixture(scope="module")
def variants(items, conditions) -> pd.DataFrame:
    v = perturb.make_variants(items, conditions, conditions=["base", "+hetero"])
    assert v["ok"].all()
    return v


_MCQ_REPLIES = ["[B]", "The answer is [C].", "I am not sure.", "", "[A] or maybe [D]", "answer: [ D ]",
               "[A]\n\nBecause…", "é ü — “[C]”"]
_EXPLAIN_REPLIES = ["The answer is B", "so the answer is (C).", "no idea", "", "The answer is: **D**",
                    "answer is a guess", "The answer is A. Wait, the answer is D.", "Answer is [B]"]


def _every_shape(r, i, be):
    """Answers in every shape the parsers meet: clean, decorated, ambiguous,
    missing, empty; with letter log-probs (shown letters) for some."""
    h = hashlib.sha256(repr((r.messages, r.params.seed)).encode()).digest()
    texts = _EXPLAIN_REPLIES if r.messages[0][0] == "system" else _MCQ_REPLIES
    lp = {L: -round(0.1 + (h[j + 1] % 50) / 10, 3) for j, L in enumerate("ABCD")} if h[5] % 2 else None
    return Completion(text=texts[h[0] % len(texts)], tokens_in=100 + h[6], tokens_out=1 + h[7] % 30,
                      answer_logprob=(min(lp.values()) if lp else None), letter_logprobs=lp)


def generated(tmp_path, variants, items, prompt_format="mcq", name="gen.sqlite") -> pd.DataFrame:
    with ResponseStore(tmp_path / name) as store:
        samples = mcq.plan(variants, items, model="m", backend="scripted", model_id="scripted-1", k=4,
                           seed=5, gen=GenParams(0.7, 0.9, 64), prompt_format=prompt_format)
        runs.run(ScriptedBackend(_every_shape, model_id="scripted-1"), store, samples, model="m", progress=False)
        return store.frame()


def export(df: pd.DataFrame, path: Path, with_parsed: bool = False) -> Path:
    """Responses in the import format (CSV or JSONL by suffix)."""
    cols = [c for c in COLUMNS if c != "parsed_answer" or with_parsed]
    recs = []
    for r in df.to_dict("records"):
        rec = {}
        for c in cols:
            v = r[c]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            rec[c] = v.item() if hasattr(v, "item") else v
        recs.append(rec)
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            for rec in recs:
                w.writerow({k: json.dumps(v) if k == "letter_logprobs" else v for k, v in rec.items()})
    else:
        with open(path, "w", encoding="utf-8") as f:
            for rec in recs:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def analysed(df: pd.DataFrame) -> pd.DataFrame:
    return df[ANALYSED].sort_values(IDENT).reset_index(drop=True)


# --------------------------------------------------------------------------
# valid files


@pytest.mark.parametrize("prompt_format", ["mcq", "mcq_explain"])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("with_parsed", [False, True])
def test_import_matches_generated(tmp_path, variants, items, prompt_format, suffix, with_parsed):
    gen = generated(tmp_path, variants, items, prompt_format)
    assert gen["parse_status"].nunique() >= 2 and gen["parsed_answer"].notna().any()
    assert (gen["permutation"] != "ABCD").any()
    f = export(gen, tmp_path / f"responses{suffix}", with_parsed=with_parsed)
    with ResponseStore(tmp_path / "imp.sqlite") as store:
        counts = import_responses(f, store)
        imp = store.frame()
    n = len(gen)
    assert counts["read"] == counts["stored"] == n and counts["already_present"] == 0
    assert counts["parse_failures"] == int((gen["parse_status"] != "ok").sum())
    assert list(imp.columns) == list(gen.columns)
    # the analysed columns: same values, same types
    pd.testing.assert_frame_equal(analysed(imp), analysed(gen), check_dtype=True)
    assert (imp["source"] == "imported").all() and (imp["backend"] == "import").all()
    assert (imp["model_id"] == imp["model"]).all()
    assert imp["key"].tolist() == [import_key(*r[IDENT], r["response_text"]) for _, r in imp.iterrows()]


def test_csv_and_jsonl_import_the_same_rows(tmp_path, variants, items):
    gen = generated(tmp_path, variants, items)
    a, b = export(gen, tmp_path / "r.csv"), export(gen, tmp_path / "r.jsonl")
    with ResponseStore(tmp_path / "s.sqlite") as store:
        assert import_responses(a, store)["stored"] == len(gen)
        c = import_responses(b, store)
        assert c["stored"] == 0 and c["already_present"] == len(gen)   # the same keys
        assert store.count() == len(gen)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_reimport_adds_nothing(tmp_path, variants, items, suffix):
    gen = generated(tmp_path, variants, items)
    f = export(gen, tmp_path / f"r{suffix}")
    with ResponseStore(tmp_path / "s.sqlite") as store:
        first = import_responses(f, store)
        before = store.frame()
        again = import_responses(f, store)
        assert again["read"] == first["read"] == len(gen)
        assert again["stored"] == 0 and again["already_present"] == len(gen)
        assert again["parse_failures"] == first["parse_failures"]
        assert store.count() == len(gen)
        pd.testing.assert_frame_equal(store.frame(), before)


@pytest.mark.slow
def test_real_model_responses_round_trip(tmp_path, variants, items):
    """Responses of the real tiny model, exported and imported back."""
    pytest.importorskip("llama_cpp")          # the light install has no llama.cpp (skips.toml allows it there)
    spec = importlib.util.spec_from_file_location("support_mcq_child", SUPPORT / "mcq_child.py")
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    backend = child.load_backend()
    v = variants.head(2)
    with ResponseStore(tmp_path / "gen.sqlite") as store:
        samples = mcq.plan(v, items, model="smollm2", backend=backend.kind, model_id=backend.model_id,
                           k=3, seed=1, gen=GenParams(0.8, 0.95, 10))
        runs.run(backend, store, samples, model="smollm2", progress=False)
        gen = store.frame()
    assert len(gen) == 6
    f = export(gen, tmp_path / "real.jsonl")
    with ResponseStore(tmp_path / "imp.sqlite") as store:
        assert import_responses(f, store)["stored"] == 6
        pd.testing.assert_frame_equal(analysed(store.frame()), analysed(gen))


# --------------------------------------------------------------------------
# parsing


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _write_jsonl(path: Path, recs: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs),
                    encoding="utf-8")
    return path


def rec(**kw) -> dict:
    base = dict(model="ext", item_id="medqa4-0000", condition="base", prompt_format="mcq", sample=0,
                response_text="[B]")
    base.update(kw)
    return base


def test_unparseable_is_a_parse_failure_not_a_wrong_answer(tmp_path, items):
    f = _write_jsonl(tmp_path / "r.jsonl", [
        rec(sample=0, response_text="[B]"),
        rec(sample=1, response_text="I would pick B"),
        rec(sample=2, response_text=""),
        rec(sample=3, response_text="[A] [C]"),
        rec(sample=4, response_text="The answer is (E)"),          # no such option
        rec(sample=5, prompt_format="mcq_explain", response_text="hmm"),
        rec(sample=6, response_text="no idea", permutation="DCBA"),
    ])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        c = import_responses(f, store)
        df = store.frame().set_index("sample").sort_index()
    assert c["read"] == 7 and c["parse_failures"] == 6 and c["no_parser"] == 0
    assert df.loc[0, "parsed_answer"] == "B" and df.loc[0, "parse_status"] == "ok"
    bad = df.drop(index=0)
    assert bad["parsed_answer"].isna().all()
    assert (bad["parse_status"] != "ok").all()
    assert dict(bad["parse_status"]) == {1: "no_answer", 2: "empty", 3: "multiple", 4: "no_answer",
                                         5: "no_answer", 6: "no_answer"}
    # scored against the key, the failures are missing, not wrong
    truth = items.set_index("item_id").loc["medqa4-0000", "answer_idx"]
    correct = df["parsed_answer"].dropna().eq(truth)
    assert len(correct) == 1


def test_permutation_maps_shown_letters_to_original(tmp_path):
    f = _write_jsonl(tmp_path / "r.jsonl", [
        rec(sample=0, response_text="[B]", permutation="CADB"),      # shown B = original A
        rec(sample=1, response_text="[B]"),                          # no permutation: original B
        rec(sample=2, response_text="[D]", permutation="CADB", parsed_answer="C"),   # given: kept
        rec(sample=3, prompt_format="mcq_explain", response_text="The answer is A", permutation="DABC"),
    ])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        import_responses(f, store)
        df = store.frame().set_index("sample").sort_index()
    assert df["parsed_answer"].tolist() == ["A", "B", "C", "D"]
    assert (df["parse_status"] == "ok").all()
    assert df.loc[0, "permutation"] == "CADB" and pd.isna(df.loc[1, "permutation"])


def test_formats_without_parser_and_five_options(tmp_path):
    items5 = data.load_medqa(paths.raw(*data.MEDQA5), n_options=5).records.head(2)
    opts = items5.set_index("item_id")["options"].to_dict()
    iid = items5["item_id"].iloc[0]
    f = _write_jsonl(tmp_path / "r.jsonl", [
        rec(item_id=iid, sample=0, response_text="[E]"),
        rec(item_id=iid, sample=1, response_text="[B]", permutation="EDCBA"),
        rec(item_id=iid, sample=2, prompt_format="open", response_text="Start metformin."),
    ])
    with ResponseStore(tmp_path / "s.sqlite") as store:
        c = import_responses(f, store, options_by_item=items5)
        df = store.frame().set_index("sample").sort_index()
    assert c["no_parser"] == 1 and c["parse_failures"] == 0
    assert df["parsed_answer"].iloc[:2].tolist() == ["E", "D"]
    assert pd.isna(df.loc[2, "parsed_answer"]) and pd.isna(df.loc[2, "parse_status"])
    # with the 4-letter default, E is no option: parsed as no answer, given as an error
    with ResponseStore(tmp_path / "t.sqlite") as store:
        c = import_responses(_write_jsonl(tmp_path / "d.jsonl", [rec(item_id=iid, response_text="[E]")]), store)
        assert c["parse_failures"] == 1
    with pytest.raises(ResponseImportError, match=r"line 2: field 'permutation': 'EDCBA' is not a permutation"):
        import_responses(f, ResponseStore(tmp_path / "w.sqlite"))
    with pytest.raises(ResponseImportError, match=r"line 1: field 'parsed_answer'"):
        import_responses(_write_jsonl(tmp_path / "e.jsonl", [rec(parsed_answer="E")]),
                         ResponseStore(tmp_path / "u.sqlite"))
    assert opts  # the dict form works too
    with ResponseStore(tmp_path / "v.sqlite") as store:
        assert import_responses(f, store, options_by_item=opts)["stored"] == 3


# --------------------------------------------------------------------------
# broken files: the message names file, record and field; nothing is written

GOOD = ["ext", "medqa4-0000", "base", "mcq", "0", "[B]"]


def _csv_case(tmp_path, header, rows):
    return _write_csv(tmp_path / "bad.csv", header, rows)


BROKEN = {
    # name: (writer, record label, field, words in the problem)
    "missing column": (lambda p: _csv_case(p, list(REQUIRED[:4]) + ["response_text"],
                                           [GOOD[:4] + ["[B]"]]),
                       "header", "sample", "missing required column"),
    "missing field jsonl": (lambda p: _write_jsonl(p / "bad.jsonl", [
        rec(), {k: v for k, v in rec(sample=1).items() if k != "response_text"}]),
        "line 2", "response_text", "missing"),
    "negative sample": (lambda p: _csv_case(p, list(REQUIRED), [GOOD, GOOD[:4] + ["-1", "[B]"]]),
                        "row 3", "sample", "non-negative integer"),
    "text sample": (lambda p: _csv_case(p, list(REQUIRED), [GOOD[:4] + ["first", "[B]"]]),
                    "row 2", "sample", "non-negative integer"),
    "fractional sample": (lambda p: _write_jsonl(p / "bad.jsonl", [rec(sample=1.5)]),
                          "line 1", "sample", "non-negative integer"),
    "boolean sample": (lambda p: _write_jsonl(p / "bad.jsonl", [rec(sample=True)]),
                       "line 1", "sample", "non-negative integer"),
    "parsed_answer not a letter": (lambda p: _csv_case(p, list(REQUIRED) + ["parsed_answer"],
                                                       [GOOD + ["B"], GOOD[:4] + ["1", "[B]", "F"]]),
                                   "row 3", "parsed_answer", "not one of the option letters"),
    "letter_logprobs not JSON": (lambda p: _csv_case(p, list(REQUIRED) + ["letter_logprobs"],
                                                     [GOOD + ["{A: -0.1, B: -2}"]]),
                                 "row 2", "letter_logprobs", "not valid JSON"),
    "letter_logprobs not JSON jsonl": (lambda p: _write_jsonl(p / "bad.jsonl", [
        rec(), rec(sample=1, letter_logprobs="{'A': -0.1}")]), "line 2", "letter_logprobs", "not valid JSON"),
    "letter_logprobs positive": (lambda p: _write_jsonl(p / "bad.jsonl", [
        rec(letter_logprobs={"A": 0.5})]), "line 1", "letter_logprobs", "must be <= 0"),
    "letter_logprobs bad letter": (lambda p: _write_jsonl(p / "bad.jsonl", [
        rec(letter_logprobs={"A": -1, "Z": -2})]), "line 1", "letter_logprobs", "not option letters"),
    "duplicate sample": (lambda p: _csv_case(p, list(REQUIRED), [GOOD, GOOD[:5] + ["[C]"]]),
                         "row 3", "sample", "duplicate of row 2"),
    "duplicate sample jsonl": (lambda p: _write_jsonl(p / "bad.jsonl", [
        rec(), rec(sample=1), rec(sample="1", response_text="other")]), "line 3", "sample", "duplicate of line 2"),
    "unknown column": (lambda p: _csv_case(p, list(REQUIRED) + ["parsed_anwser"], [GOOD + ["B"]]),
                       "header", "parsed_anwser", "unknown column"),
    "unknown field jsonl": (lambda p: _write_jsonl(p / "bad.jsonl", [rec(tempreature=0.7)]),
                            "line 1", "tempreature", "unknown field"),
    "bad permutation": (lambda p: _write_jsonl(p / "bad.jsonl", [rec(permutation="ABCA")]),
                        "line 1", "permutation", "not a permutation"),
    "empty model": (lambda p: _csv_case(p, list(REQUIRED), [[""] + GOOD[1:]]), "row 2", "model", "empty"),
    "not JSON": (lambda p: _write_jsonl(p / "bad.jsonl", [rec(), '{"model": "ext", "item_id": ']),
                 "line 2", "(json)", "not valid JSON"),
    "top_p out of range": (lambda p: _write_jsonl(p / "bad.jsonl", [rec(top_p=1.5)]),
                           "line 1", "top_p", "[0, 1]"),
    "short csv row": (lambda p: _csv_case(p, list(REQUIRED), [GOOD, GOOD[:4]]), "row 3", "(csv)", "fields"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_record_names_file_record_field(tmp_path, case):
    write, record, field, words = BROKEN[case]
    path = write(tmp_path)
    with ResponseStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(ResponseImportError) as e:
            import_responses(path, store)
        assert store.count() == 0, "a file with a bad record must store nothing"
    msg = str(e.value)
    assert str(path) in msg, msg
    assert f"{record}: field '{field}'" in msg, msg
    assert words in msg, msg
    assert (e.value.file, e.value.record, e.value.field) == (str(path), record, field)


def test_unknown_item_with_options(tmp_path, items):
    path = _write_jsonl(tmp_path / "r.jsonl", [rec(), rec(item_id="medqa4-9999")])
    with pytest.raises(ResponseImportError, match=r"r\.jsonl: line 2: field 'item_id': 'medqa4-9999' is not a known"):
        import_responses(path, ResponseStore(tmp_path / "s.sqlite"), options_by_item=items)


def test_file_level_problems(tmp_path):
    store = ResponseStore(tmp_path / "s.sqlite")
    with pytest.raises(ResponseImportError, match="does not exist"):
        import_responses(tmp_path / "none.csv", store)
    (tmp_path / "r.txt").write_text("x")
    with pytest.raises(ResponseImportError, match="unknown format"):
        import_responses(tmp_path / "r.txt", store)
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(ResponseImportError, match="is empty"):
        import_responses(tmp_path / "e.jsonl", store)
    (tmp_path / "l.csv").write_bytes(",".join(REQUIRED).encode() + b"\next,medqa4-0000,base,mcq,0,caf\xe9\n")
    with pytest.raises(ResponseImportError, match=r"l\.csv: line 2: field '\(encoding\)'"):
        import_responses(tmp_path / "l.csv", store)


def test_changed_text_for_an_imported_sample_is_refused(tmp_path):
    """A second file giving the same sample another text would make two rows
    of one sample; it is refused, and the first import stays as it was."""
    with ResponseStore(tmp_path / "s.sqlite") as store:
        import_responses(_write_jsonl(tmp_path / "a.jsonl", [rec(), rec(sample=1)]), store)
        b = _write_jsonl(tmp_path / "b.jsonl", [rec(sample=2), rec(sample=1, response_text="[C]")])
        with pytest.raises(ResponseImportError, match=r"b\.jsonl: line 2: field 'response_text': .*already in"):
            import_responses(b, store)
        assert store.count() == 2


def test_csv_details(tmp_path):
    """A byte-order mark, quoted newlines and commas, blank optional cells,
    columns in any order, blank lines."""
    path = tmp_path / "r.csv"
    path.write_bytes("\ufeffresponse_text,sample,model,item_id,condition,prompt_format,seed,letter_logprobs\r\n"
                     "\"Thinking, then\n[C]\",0,ext,medqa4-0000,base,mcq,,\r\n"
                     "\r\n"
                     "[A],1,ext,medqa4-0000,base,mcq,42,\"{\"\"A\"\": -0.25}\"\r\n".encode("utf-8"))
    with ResponseStore(tmp_path / "s.sqlite") as store:
        c = import_responses(path, store)
        df = store.frame().set_index("sample").sort_index()
    assert c["read"] == 2 and c["stored"] == 2
    assert df.loc[0, "response_text"] == "Thinking, then\n[C]" and df.loc[0, "parsed_answer"] == "C"
    assert pd.isna(df.loc[0, "seed"]) and df.loc[1, "seed"] == 42
    assert df.loc[1, "letter_logprobs"] == {"A": -0.25} and df.loc[0, "letter_logprobs"] is None


def test_command_line_import_into_a_profile_store(tmp_path, monkeypatch, capsys):
    """``python -m medaudit.llm.importer FILE --profile P`` fills outputs/P/data/responses.sqlite."""
    import json as _json

    from medaudit.llm import importer as imp

    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("MEDAUDIT_ROOT", compendium_root(root)["MEDAUDIT_ROOT"])
    (root / "params" / "imp.yaml").write_text((ROOT / "params" / "smoke.yaml").read_text().replace(
        "profile: smoke", "profile: imp"))
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(_json.dumps({"model": "ext", "item_id": f"medqa4-000{i}", "condition": "base",
                                        "prompt_format": "mcq", "sample": 0, "response_text": t})
                           for i, t in enumerate(["[B]", "I think C", "[A] or [D]"])) + "\n")
    # the items are not among the profile's (no notebook has run there): refused unless external
    assert imp.main([str(f), "--profile", "imp"]) == 2
    assert "'medqa4-0000' (line 1)" in capsys.readouterr().err
    assert imp.main([str(f), "--profile", "imp", "--external"]) == 0
    counts = _json.loads(capsys.readouterr().out)
    assert counts["stored"] == 3 and counts["parse_failures"] == 2
    with ResponseStore(root / "outputs" / "imp" / "data" / "responses.sqlite") as s:
        df = s.frame().sort_values("item_id")
    assert df["parsed_answer"].tolist()[0] == "B" and df["parse_status"].tolist() == ["ok", "no_answer", "multiple"]


def test_recorded_answers_round_trip_through_export(tmp_path):
    """data/recorded/: stored rows exported (raw text, permutation, log-probs)
    and imported again parse to the same original letters and keep the
    letter distributions; the shipped smoke file imports without a failure."""
    from medaudit import paths
    from medaudit.llm import importer as imp

    shipped = paths.data("recorded", "smoke_03_mcq.jsonl")
    with ResponseStore(tmp_path / "a.sqlite") as a:
        counts = imp.import_responses(shipped, a)
        assert counts["read"] == counts["stored"] == 27 and counts["parse_failures"] <= 27
        rows = a.frame()
        assert set(rows["model"]) == {"qwen2.5-coder-1.5b (recorded)"} and rows["letter_logprobs"].notna().all()
        n = imp.export_rows(rows, tmp_path / "again.jsonl", "again")
        assert n == 27
    with ResponseStore(tmp_path / "b.sqlite") as b:
        imp.import_responses(tmp_path / "again.jsonl", b)
        again = b.frame()
    key = ["item_id", "condition", "sample"]
    x = rows.sort_values(key).reset_index(drop=True)
    y = again.sort_values(key).reset_index(drop=True)
    assert x["parsed_answer"].tolist() == y["parsed_answer"].tolist()
    assert x["letter_logprobs"].tolist() == y["letter_logprobs"].tolist()
    # a shown letter is mapped back through the permutation, as for generated answers
    one = x[x["response_text"].str.contains(r"\[D\]") & (x["permutation"] == "DABC")]
    assert (one["parsed_answer"] == "C").all()
