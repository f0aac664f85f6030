"""The Anthropic Message Batches and Gemini batch adapters
(medaudit.engines.batch_anthropic, medaudit.engines.batch_gemini, on medaudit.engines.batch_vendors)
through the vendors' official SDKs against fake vendor servers on 127.0.0.1
written from each vendor's documentation (tests/support/fake_anthropic.py,
fake_gemini.py). Each fake also serves the vendor's OpenAI-compatible
endpoint with the same deterministic "model" (a reply that is a function of
the request), which is what a direct run through the openai backend talks
to: the property is the bookkeeping — the 27 requests of the smoke 03 stage
answered through the vendor's batch are stored under the keys and with the
replies of the direct run, failures and expiries come back named and are
resubmitted exactly once — not a model's text.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")

from medaudit.engines import batch, batch_api  # noqa: E402
from medaudit.engines.batch_anthropic import AnthropicBatch, params_for  # noqa: E402
from medaudit.engines.batch_gemini import GeminiBatch, request_for  # noqa: E402
from medaudit.engines.batch_vendors import ENVELOPE, TranslationError, request_bytes  # noqa: E402
from medaudit.llm import runs  # noqa: E402
from medaudit.llm.openai_backend import OpenAIBackend  # noqa: E402
from medaudit.llm.store import ResponseStore  # noqa: E402
from support.fake_anthropic import FakeAnthropic  # noqa: E402
from support.fake_batch import collect  # noqa: E402
from support.fake_gemini import FakeGemini  # noqa: E402
from support.smoke import MODEL, smoke_plan  # noqa: E402

VENDORS = {"anthropic": (FakeAnthropic, AnthropicBatch), "gemini": (FakeGemini, GeminiBatch)}
COLS = ["key", "item_id", "condition", "sample", "permutation", "response_text", "parsed_answer", "parse_status",
        "answer_logprob", "letter_logprobs", "tokens_in", "tokens_out", "finish_reason", "served_model", "seed",
        "temperature", "top_p", "max_tokens", "prompt", "model_id", "backend"]


def _round(cls, folder, fake, results):
    """submit → wait → download on ``folder``; the result files so far."""
    api = cls(folder, base_url=fake.base_url, sleep=lambda s: None)
    ids = api.submit()
    api.wait(every_s=0)
    results += api.download()
    return api, ids


def _stage(tmp_path, fake, medqa4, conditions, store):
    """The smoke 03 stage (27 requests) of the openai backend at the fake's
    compatible endpoint, collected into a batch folder (4 lines a file)."""
    backend = OpenAIBackend(MODEL, base_url=fake.compat_url, concurrency=1, timeout_s=60)
    samples = smoke_plan(backend, medqa4, conditions)
    folder = tmp_path / "batch"
    collect(backend, samples, folder, store)
    return backend, samples, folder


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_27_smoke_requests_round_trip_and_equal_the_direct_run(vendor, tmp_path, medqa4, conditions):
    fake_cls, cls = VENDORS[vendor]
    with fake_cls() as fake, ResponseStore(tmp_path / "batched.sqlite") as store:
        backend, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        assert len(samples) == 27 and fake.model_calls == 0
        with ResponseStore(tmp_path / "direct.sqlite") as direct:
            runs.run(backend, direct, samples, model=MODEL, progress=False).check()
            want = direct.by_keys(s.key for s in samples)
        calls = fake.model_calls
        results: list = []
        _round(cls, folder, fake, results)
        assert sorted(fake.sent) == sorted(s.key for s in samples)          # each request sent once
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed, rep.missing, rep.resubmit) == (27, 0, 0, None)
        assert fake.model_calls - calls == 27
        have = store.by_keys(s.key for s in samples)
        # nothing left for the stage: a direct run now sends nothing
        assert runs.run(backend, store, samples, model=MODEL, progress=False).cached == 27
    a, b = (x[COLS].sort_values("key").reset_index(drop=True) for x in (want, have))
    pd.testing.assert_frame_equal(a, b)
    assert want["response_text"].str.match(r"^\[[A-D]\]").all()
    if vendor == "gemini":          # its compatible endpoint and its batch both return log-probs
        assert want["answer_logprob"].notna().all()
    else:                           # Anthropic's ignores them, and its batch has none
        assert want["answer_logprob"].isna().all()


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_failed_request_comes_back_named_and_is_resubmitted_once(vendor, tmp_path, medqa4, conditions):
    fake_cls, cls = VENDORS[vendor]
    with ResponseStore(tmp_path / "s.sqlite") as store, fake_cls() as fake:
        _, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        keys = list(batch.read_manifest(folder))
        fake.fail = {keys[1], keys[20]}
        results: list = []
        _round(cls, folder, fake, results)
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed, rep.missing) == (25, 2, 0)
        assert rep.failures == ({"api_error": 2} if vendor == "anthropic" else {"INTERNAL": 2})
        failed = [json.loads(x) for x in (folder / "failures.jsonl").read_text().splitlines()]
        assert {f["custom_id"] for f in failed} == {keys[1], keys[20]}
        resub = [json.loads(x)["custom_id"] for f in sorted(rep.resubmit.glob("batch-*.jsonl"))
                 for x in f.read_text().splitlines()]
        assert sorted(resub) == sorted([keys[1], keys[20]])
        # submitting the first folder again sends nothing; the resubmit folder sends the two, once
        before = len(fake.sent)
        cls(folder, base_url=fake.base_url, sleep=lambda s: None).submit()
        assert len(fake.sent) == before
        _round(cls, folder / "resubmit", fake, results)             # they fail again: the same resubmit file
        assert sorted(fake.sent[before:]) == sorted([keys[1], keys[20]])
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed) == (0, 2)
        fake.fail = set()
        _round(cls, folder / "resubmit", fake, results)             # ... which is sent again, once
        assert sorted(fake.sent[before:]) == sorted([keys[1], keys[20]] * 2)
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.already, rep.failed, rep.missing, rep.resubmit) == (2, 25, 0, 0, None)
        assert store.count() == 27


def test_anthropic_expired_and_cancelled_requests(tmp_path, medqa4, conditions):
    """Past its 24 hours a Message Batch ends with the unprocessed requests
    ``expired``; a cancelled one with them ``canceled``: both come back as
    named failures and go to the resubmit file."""
    with ResponseStore(tmp_path / "s.sqlite") as store, FakeAnthropic(expire_after=3) as fake:
        _, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        results: list = []
        api, ids = _round(AnthropicBatch, folder, fake, results)
        assert len(ids) == 7                                   # 27 requests, 4 a file: 7 files, one batch each
        assert {s for s in api.refresh().values()} == {"expired", "completed"}   # the last file has 3 lines
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed) == (7 * 3, 27 - 21) and rep.failures == {"batch_expired": 6}
        fake.expire_after = None
        api = AnthropicBatch(folder / "resubmit", base_url=fake.base_url, sleep=lambda s: None)
        [bid] = api.submit()
        assert api.cancel() == [bid]
        assert api.wait(every_s=0) == {bid: "cancelled"}
        results += api.download()
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed) == (0, 6) and rep.failures == {"batch_cancelled": 6}
        _round(AnthropicBatch, folder / "resubmit", fake, results)   # a cancelled batch's file is sent again
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed, rep.missing) == (6, 0, 0) and store.count() == 27


def test_gemini_expired_job_has_no_results_and_every_request_is_resubmitted(tmp_path, medqa4, conditions):
    """A Gemini batch job pending or running past 48 hours expires without
    a responses file: each of its requests is a named ``batch_expired``
    failure, and the resubmit file holds them all."""
    with ResponseStore(tmp_path / "s.sqlite") as store, FakeGemini(expire=True) as fake:
        _, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        results: list = []
        api, ids = _round(GeminiBatch, folder, fake, results)
        assert set(api.refresh().values()) == {"expired"} and fake.model_calls == 0
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed) == (0, 27) and rep.failures == {"batch_expired": 27}
        fake.expire = False
        _round(GeminiBatch, folder / "resubmit", fake, results)
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed, rep.missing) == (27, 0, 0)
        assert len(fake.sent) == 54                            # 27 expired, 27 answered: none twice more


@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_file_over_the_vendors_limits_is_cut_into_batches_within_them(vendor, tmp_path, medqa4, conditions):
    fake_cls, cls = VENDORS[vendor]
    with ResponseStore(tmp_path / "s.sqlite") as store, fake_cls() as fake:
        _, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        batch.write_batches(batch.read_manifest(folder).values(), folder)      # one file of 27
        api = cls(folder, base_url=fake.base_url, sleep=lambda s: None)
        sizes = [request_bytes(r) for _, _, reqs in api.plan(folder / "batch-0001.jsonl") for r in reqs]
        api.max_requests, api.max_bytes = 10, ENVELOPE + 3 * max(sizes)      # 3 of the longest a batch
        fake.max_bytes = api.max_bytes                                      # the server refuses more
        parts = api.plan(folder / "batch-0001.jsonl")
        assert len(parts) >= 27 // 4 and all(len(k) <= 10 for _, k, _ in parts)
        assert all(ENVELOPE + sum(map(request_bytes, reqs)) <= api.max_bytes for _, _, reqs in parts)
        assert [k for _, ks, _ in parts for k in ks] == list(batch.read_manifest(folder))
        limit, api.max_bytes = api.max_bytes, 10 ** 9          # unchecked here, one batch is over the server's limit
        with pytest.raises(Exception, match="413|400"):
            api.submit()
        api.max_bytes = limit
        ids = api.submit()
        assert len(ids) == len(parts)
        api.wait(every_s=0)
        rep = batch.import_results(folder, api.download(), store)
        assert (rep.stored, rep.failed, rep.missing) == (27, 0, 0)
        api.max_bytes = 300
        with pytest.raises(batch.BatchError, match="over the 300-byte batch limit"):
            api.plan(folder / "batch-0001.jsonl")


def test_translation_refuses_what_the_vendor_cannot_take_by_name():
    body = {"model": "m", "messages": [{"role": "system", "content": "s1"}, {"role": "system", "content": "s2"},
                                       {"role": "user", "content": "q"}],
            "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "seed": 3, "logprobs": True, "top_logprobs": 5}
    p = params_for(body, "f line 1")
    assert p == {"model": "m", "max_tokens": 16, "system": "s1\ns2", "messages": [{"role": "user", "content": "q"}],
                 "temperature": 0.7, "top_p": 0.9}
    g = request_for(body, "f line 1")
    assert g["systemInstruction"] == {"parts": [{"text": "s1\ns2"}]}
    assert g["generationConfig"] == {"maxOutputTokens": 16, "temperature": 0.7, "topP": 0.9, "seed": 3,
                                     "responseLogprobs": True, "logprobs": 5}
    with pytest.raises(TranslationError, match="f line 1: temperature 1.3 is outside Anthropic's 0 to 1"):
        params_for({**body, "temperature": 1.3}, "f line 1")
    for f in (params_for, request_for):
        with pytest.raises(TranslationError, match="f line 2: field repetition_penalty has no counterpart"):
            f({**body, "repetition_penalty": 1.1}, "f line 2")
        with pytest.raises(TranslationError, match="neither max_tokens nor max_completion_tokens"):
            f({k: v for k, v in body.items() if k != "max_tokens"}, "f line 3")


def test_the_batch_api_command_runs_each_vendor(tmp_path, medqa4, conditions, capsys, monkeypatch):
    with ResponseStore(tmp_path / "s.sqlite") as store, FakeAnthropic() as fake:
        _, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        args = ["--vendor", "anthropic", "--out", str(folder), "--base-url", fake.base_url]
        assert batch_api.main(["submit", *args]) == 0
        assert batch_api.main(["wait", "--every", "0", *args]) == 0
        assert "completed" in capsys.readouterr().out
        assert batch_api.main(["download", *args]) == 0
        files = [p for p in capsys.readouterr().out.split() if p.endswith(".jsonl")]
        assert batch.import_results(folder, files, store).stored == 27
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    assert batch_api.main(["submit", "--vendor", "gemini", "--out", str(folder)]) == 2
    assert "needs an API key in the environment variable GEMINI_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["status", "wait", "download", "cancel", "submit"])
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_a_batch_the_vendor_forgot_is_one_message_and_is_sent_again(vendor, cmd, tmp_path, medqa4, conditions,
                                                                     capsys):
    """A vendor that no longer knows a batch id (a restarted server, a batch dropped): `status`,
    `wait` and `cancel` ended in anthropic.NotFoundError / google.genai ClientError 404 tracebacks,
    the job stayed in progress and `submit` reprinted the dead ids. Now one line naming the
    batches, their files and the exact command (vendor and base URL included); the jobs are
    marked pending and that command sends them again; `submit` itself sends them again, saying so.
    Every request is then answered once more and stored once."""
    import shlex

    fake_cls, _ = VENDORS[vendor]
    with ResponseStore(tmp_path / "s.sqlite") as store, fake_cls() as fake:
        _, samples, folder = _stage(tmp_path, fake, medqa4, conditions, store)
        args = ["--vendor", vendor, "--out", str(folder), "--base-url", fake.base_url]
        assert batch_api.main(["submit", *args]) == 0
        if cmd == "download":
            assert batch_api.main(["wait", "--every", "0", *args]) == 0
        capsys.readouterr()
        fake.forget()
        rc = batch_api.main([cmd, *args])
        err = capsys.readouterr().err
        assert "Traceback" not in err and "Error" not in err and len(err.strip().splitlines()) == 1, err
        assert err.count("(batch-0") == 7                     # the 7 files' batches, each named with its file
        exact = (f"python -m medaudit.engines.batch_api submit --vendor {vendor} --out {folder} "
                 f"--base-url {fake.base_url}")
        if cmd == "submit":
            assert rc == 0 and " sent again as " in err
        else:
            assert rc == 2 and f"`{exact}`" in err
            assert {j["status"] for j in batch.load_jobs(folder).values()} == {"pending"}
            assert batch_api.main(shlex.split(exact)[3:]) == 0          # the command as written sends them
        assert sorted(fake.sent) == sorted([s.key for s in samples] * 2)   # each request sent once again
        assert batch_api.main(["wait", "--every", "0", *args]) == 0
        assert batch_api.main(["download", *args]) == 0
        files = [p for p in capsys.readouterr().out.split() if p.endswith(".jsonl")]
        rep = batch.import_results(folder, files, store)
        assert (rep.stored, rep.failed, rep.missing) == (27, 0, 0) and store.count() == 27


def test_a_gemini_error_with_a_numeric_code_only_is_named():
    """A responses-file error is a google.rpc.Status: a numeric code and a message; 13 was
    labelled '13' where the docs' table says INTERNAL."""
    from medaudit.engines.batch_gemini import error_code, line_of

    line = line_of({"key": "k", "error": {"code": 13, "message": "Internal error encountered."}}, "m")
    assert line["error"] == {"code": "INTERNAL", "message": "Internal error encountered."}
    assert [error_code({"code": c}) for c in (4, 8, 14, 16, 500)] == [
        "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNAUTHENTICATED", "http_500"]
    assert error_code({"code": 500, "status": "INTERNAL"}) == "INTERNAL"


def test_a_claude_model_that_takes_temperature_or_top_p_runs_with_top_p_null(tmp_path, medqa4, conditions):
    """docs/scale.md's Anthropic example: Claude Sonnet 4.5 refuses temperature and top_p together
    (the fake answers 400 on both paths, as the API does). With top_p null (the example's) the
    temperature alone is sent, directly and through the Message Batches adapter, and both store
    the same rows; a batch file with both is refused at submit, by line, before anything is sent."""
    from medaudit.llm import GenParams, mcq
    from medaudit.llm.base import BackendStopped
    from support.smoke import SEED, smoke_frames

    model = "claude-sonnet-4-5"
    variants, items = smoke_frames(medqa4, conditions, n_items=1)
    with FakeAnthropic() as fake, ResponseStore(tmp_path / "batched.sqlite") as store:
        backend = OpenAIBackend(model, base_url=fake.compat_url, concurrency=1, timeout_s=60)

        def plan(top_p):
            return mcq.plan(variants, items, model=model, backend=backend.kind, model_id=backend.model_id, k=2,
                            seed=SEED, gen=GenParams(0.7, top_p, 16))

        with ResponseStore(tmp_path / "both.sqlite") as both:            # what the old example sent
            with pytest.raises(BackendStopped, match="HTTP 400.*`temperature` and `top_p` cannot both be specified"):
                runs.run(backend, both, plan(0.9), model=model, progress=False)
            assert both.count() == 0
        folder = tmp_path / "old"
        collect(backend, plan(0.9), folder, ResponseStore(tmp_path / "old.sqlite"))
        with pytest.raises(TranslationError, match="line 1 .*claude-sonnet-4-5 takes temperature or top_p, not both"):
            AnthropicBatch(folder, base_url=fake.base_url, sleep=lambda s: None).submit()
        assert fake.sent == []
        samples = plan(None)
        with ResponseStore(tmp_path / "direct.sqlite") as direct:
            runs.run(backend, direct, samples, model=model, progress=False).check()
            want = direct.by_keys(s.key for s in samples)
        folder = tmp_path / "batch"
        collect(backend, samples, folder, store)
        results: list = []
        _round(AnthropicBatch, folder, fake, results)
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed) == (len(samples), 0)
        have = store.by_keys(s.key for s in samples)
    assert want["top_p"].isna().all() and len(want) == len(samples) == 6
    a, b = (x[COLS].sort_values("key").reset_index(drop=True) for x in (want, have))
    pd.testing.assert_frame_equal(a, b)
