"""medaudit.engines.batch_api against a fake OpenAI Batch API on 127.0.0.1
(tests/support/fake_batch.py), whose engine answers each line by sending its
body to an OpenAI-compatible chat server: a deterministic one
(tests/support/fake_openai.py, ``by_request``: the reply and its letter
log-probs a function of the request), so that a line answered through the
Batch API and the same request answered directly must agree exactly. The
property is the batch round trip's bookkeeping, not a model's text; the
openai backend against a real llama.cpp server is tested in
test_openai_backend.py.

The end-to-end check: the smoke notebook-03 stage run directly
through the openai backend into one store, and through export → Batch API →
import into another, gives byte-identical tables.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from medaudit.engines import batch
from medaudit.report import tables
from medaudit.engines.batch_api import BatchAPI, probe
from medaudit.llm import mcq, runs
from medaudit.llm.openai_backend import OpenAIBackend
from medaudit.llm.store import ResponseStore
from support.fake_batch import FakeBatchAPI, collect, engine_for
from support.fake_openai import FakeOpenAI, by_request
from support.smoke import MODEL, smoke_plan


@pytest.fixture()
def chat_server():
    """The deterministic chat server's base URL (…/v1)."""
    with FakeOpenAI(model=MODEL, content=by_request) as fake:
        yield fake.base_url


def through_api(folder, base_url, files=None):
    api = BatchAPI(folder, base_url=base_url, sleep=lambda s: None)
    api.submit(files)
    batches = api.wait(every_s=0)
    return api, batches, api.download()


def tables_of(responses: pd.DataFrame) -> list[str]:
    return [mcq.parse_rates(responses, threshold=2).to_csv(),
            mcq.parse_rates_by_condition(responses).to_csv()]


def test_export_batch_api_import_gives_the_direct_runs_tables(tmp_path, monkeypatch, chat_server, medqa4,
                                                                conditions):
    backend = OpenAIBackend(MODEL, base_url=chat_server, concurrency=1, timeout_s=120)
    samples = smoke_plan(backend, medqa4, conditions, n_items=2, k=2)      # 12 requests of the smoke stage
    with ResponseStore(tmp_path / "direct.sqlite") as direct:
        runs.run(backend, direct, samples, model=MODEL, progress=False).check()
        want = direct.by_keys(s.key for s in samples)
    folder = tmp_path / "batch"
    with ResponseStore(tmp_path / "batched.sqlite") as store, FakeBatchAPI(engine_for(chat_server)) as fake:
        files = collect(backend, samples, folder, store)
        assert len(files) == 3                                    # 12 requests, 4 per file
        api, batches, got = through_api(folder, fake.base_url)
        assert {b.status for b in batches.values()} == {"completed"} and fake.engine_calls == 12
        assert all(f.name.endswith(".output.jsonl") for f in got)  # no error file: nothing failed
        rep = batch.import_results(folder, got, store)
        assert (rep.stored, rep.failed, rep.missing) == (12, 0, 0)
        have = store.by_keys(s.key for s in samples)
        # the stage now finds every answer stored: nothing is sent
        assert runs.run(backend, store, samples, model=MODEL, progress=False).cached == 12
    assert tables_of(have) == tables_of(want)
    cols = ["key", "item_id", "condition", "sample", "permutation", "response_text", "parsed_answer",
            "parse_status", "answer_logprob", "letter_logprobs", "tokens_in", "tokens_out", "finish_reason",
            "served_model", "seed", "temperature", "top_p", "max_tokens", "prompt", "model_id", "backend"]
    a, b = (x[cols].sort_values("key").reset_index(drop=True) for x in (want, have))
    pd.testing.assert_frame_equal(a, b)
    assert want["response_text"].str.len().gt(0).all() and want["tokens_out"].gt(0).all()
    # the saved tables (csv, md, tex), byte for byte, each written where the notebook writes it
    saved = {}
    for name, df in (("direct", want), ("batched", have)):
        monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path / name))
        tables.save_table(mcq.parse_rates(df, threshold=2), "03_parse_rates", "smoke", caption="x")
        saved[name] = [(tmp_path / name / "outputs" / "smoke" / "tables" / f"03_parse_rates.{ext}").read_bytes()
                       for ext in ("csv", "md", "tex")]
    assert saved["direct"] == saved["batched"]


def test_failed_line_expired_batch_and_partial_output(tmp_path, monkeypatch, chat_server, medqa4, conditions):
    backend = OpenAIBackend(MODEL, base_url=chat_server, concurrency=1, timeout_s=120)
    samples = smoke_plan(backend, medqa4, conditions, n_items=1, k=2)      # 6 requests
    folder = tmp_path / "batch"
    with ResponseStore(tmp_path / "s.sqlite") as store:
        collect(backend, samples, folder, store)
        keys = list(batch.read_manifest(folder))
        # file 1 (keys 0-3): one line fails (500), one is missing from the output; file 2 (keys 4-5)
        # expires after its first line
        with FakeBatchAPI(engine_for(chat_server), fail={keys[1]}, drop={keys[2]}) as fake:
            api, batches, got1 = through_api(folder, fake.base_url, [folder / "batch-0001.jsonl"])
            assert [b.status for b in batches.values()] == ["completed"]
            assert list(batches.values())[0].request_counts.failed == 1
        with FakeBatchAPI(engine_for(chat_server), expire_after=1) as fake:
            api, batches, got2 = through_api(folder, fake.base_url, [folder / "batch-0002.jsonl"])
            assert [b.status for b in batches.values()] == ["expired"]
        rep = batch.import_results(folder, got2 + got1, store)
        assert (rep.stored, rep.failed, rep.missing) == (3, 2, 1)
        assert rep.failures == {"http_500": 1, "batch_expired": 1}
        resub = sorted(rep.resubmit.glob("batch-*.jsonl"))
        assert {json.loads(x)["custom_id"] for f in resub for x in f.read_text().splitlines()} == {
            keys[1], keys[2], keys[5]}
        # the resubmit file through a fresh batch: everything answered; the old files again change nothing
        with FakeBatchAPI(engine_for(chat_server)) as fake:
            api = BatchAPI(folder / "resubmit", base_url=fake.base_url, sleep=lambda s: None)
            api.submit()
            api.wait(every_s=0)
            got3 = api.download()
        rep = batch.import_results(folder, got1 + got3 + got2, store)
        assert (rep.stored, rep.already, rep.failed, rep.missing, rep.resubmit) == (3, 3, 0, 0, None)
        assert store.count() == 6


def test_cancel_probe_and_failed_validation(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "batch-0001.jsonl").write_text(json.dumps({"custom_id": "k", "method": "POST", "url": "/v1/embeddings",
                                                         "body": {}}) + "\n")
    with FakeBatchAPI(lambda body: (200, {})) as fake:
        assert probe(fake.base_url)[0]
        api = BatchAPI(folder, base_url=fake.base_url, sleep=lambda s: None)
        [bid] = api.submit()
        assert api.submit() == [bid]                       # rerun: the file is not sent twice
        assert api.cancel() == [bid]
        assert [b.status for b in api.wait(every_s=0).values()] == ["cancelled"]
        api.submit()                                        # a cancelled batch's file is sent again
        b = list(api.wait(every_s=0).values())[0]
        assert b.status == "failed" and "invalid_url" in api.summary() and api.download() == []
    with FakeOpenAI(model=MODEL) as plain:                  # a chat server without /v1/batches
        ok, why = probe(plain.base_url)
        assert not ok and "no Batch API" in why


@pytest.mark.parametrize("cmd", ["wait", "status", "submit", "download", "cancel"])
def test_a_missing_batch_folder_is_named_not_a_traceback(tmp_path, cmd, capsys):
    """`batch_api wait|status` on a folder that does not exist ended in a traceback."""
    from medaudit.engines import batch_api

    missing = tmp_path / "no-such-batch"
    assert batch_api.main([cmd, "--out", str(missing), "--base-url", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such batch folder" in err and "Traceback" not in err
    assert not missing.exists()


def _sent(fake) -> int:
    """Request lines the fake server has been sent so far (every batch's input file)."""
    return sum(len(fake.files[b["input_file_id"]]["_data"].splitlines()) for b in fake.batches.values())


def _round(api_folder, fake, store, folder, result_files):
    """submit → wait → download on ``api_folder``, then import every result
    file so far into ``store`` (the top batch folder's manifest); returns
    (request lines sent in this round, import report)."""
    before = _sent(fake)
    api = BatchAPI(api_folder, base_url=fake.base_url, sleep=lambda s: None)
    api.submit()
    api.wait(every_s=0)
    result_files += api.download()
    return _sent(fake) - before, batch.import_results(folder, result_files, store)


def test_resubmit_rounds_and_a_moved_folder_send_exactly_the_pending_requests(tmp_path, chat_server, medqa4,
                                                                              conditions):
    """Jobs are keyed by the batch file's content. Fail,
    resubmit, fail again, resubmit: each round sends exactly the requests
    still without an answer, once (the same resubmit file written again is
    sent again); a moved folder re-sends nothing; a new export round
    written into the same folder is sent."""
    import shutil

    backend = OpenAIBackend(MODEL, base_url=chat_server, concurrency=1, timeout_s=120)
    samples = smoke_plan(backend, medqa4, conditions, n_items=1, k=2)      # 6 requests
    folder = tmp_path / "batch"
    with ResponseStore(tmp_path / "s.sqlite") as store, FakeBatchAPI(engine_for(chat_server)) as fake:
        collect(backend, samples, folder, store)
        keys = list(batch.read_manifest(folder))
        fake.fail = {keys[1], keys[4]}
        results: list = []
        sent, rep = _round(folder, fake, store, folder, results)
        assert sent == 6 and (rep.stored, rep.failed, rep.missing) == (4, 2, 0)
        # the first resubmit round fails again: the same two requests, sent once
        sent, rep = _round(folder / "resubmit", fake, store, folder, results)
        assert sent == 2 and (rep.stored, rep.failed) == (0, 2)
        # the resubmit file is written again with the same content: it is sent again, not skipped
        fake.fail = set()
        sent, rep = _round(folder / "resubmit", fake, store, folder, results)
        assert sent == 2 and (rep.stored, rep.failed, rep.missing, rep.resubmit) == (2, 0, 0, None)
        assert store.count() == 6
        # every round's files imported again: nothing stored twice, nothing reported failed
        rep = batch.import_results(folder, results, store)
        assert (rep.stored, rep.failed, rep.missing) == (0, 0, 0) and rep.already == 6
        # the four error lines of the two requests answered since are counted, and said
        assert rep.lines == rep.already + rep.answered_since == 6 + 4
        assert "error lines of requests answered since 4 (no failure)" in repr(rep)
        # submit again in place, and after moving the folder: nothing is sent
        before = _sent(fake)
        BatchAPI(folder, base_url=fake.base_url, sleep=lambda s: None).submit()
        moved = tmp_path / "elsewhere" / "batch"
        shutil.move(str(folder), str(moved))
        BatchAPI(moved, base_url=fake.base_url, sleep=lambda s: None).submit()
        with pytest.raises(batch.BatchError, match="no batch-"):       # nothing left to resubmit
            BatchAPI(moved / "resubmit", base_url=fake.base_url, sleep=lambda s: None).submit()
        assert _sent(fake) == before
        # a second export round written into the same folder is new content: sent
        both = smoke_plan(backend, medqa4, conditions, n_items=2, k=2)
        new = [s for s in both if s.key not in set(keys)]
        assert new
        (moved / batch.MANIFEST).unlink()                 # as `export` starts a round
        collect(backend, both, moved, store)
        sent, rep = _round(moved, fake, store, moved, [])
        assert sent == len(new) and rep.stored == len(new) and store.count() == 6 + len(new)


@pytest.mark.parametrize("cmd", ["status", "wait", "download", "cancel", "submit"])
def test_a_batch_the_server_forgot_is_one_line_and_is_sent_again(tmp_path, cmd, capsys):
    """After a local server restart the server no longer knows the batch (404); `wait` and `download`
    ended in an openai.NotFoundError traceback, then `cancel` still did, and the line said
    `submit --out DIR` without the --base-url the job was made with (followed literally it went to
    the OpenAI API). Now one line naming the batch and its file and the exact command; the job is
    marked pending, so that the command sends its file again, and the round then completes. `submit`
    itself sends a forgotten batch's file again (one line saying so) instead of reprinting its id."""
    import shlex

    from medaudit.engines import batch_api

    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "batch-0001.jsonl").write_text(json.dumps({"custom_id": "k", "method": "POST",
                                                         "url": "/v1/chat/completions", "body": {}}) + "\n")
    with FakeBatchAPI(lambda body: (200, {"ok": True})) as fake:
        args = ["--out", str(folder), "--base-url", fake.base_url]
        assert batch_api.main(["submit", *args]) == 0
        if cmd == "download":
            assert batch_api.main(["wait", *args, "--every", "0"]) == 0
        capsys.readouterr()
        fake.batches.clear()                               # the server restarted: it forgot every batch and file
        fake.files.clear()
        rc = batch_api.main([cmd, *args])
        err = capsys.readouterr().err
        assert "Traceback" not in err and "NotFoundError" not in err and len(err.strip().splitlines()) == 1
        assert "batch_0001 (batch-0001.jsonl)" in err
        exact = f"python -m medaudit.engines.batch_api submit --out {folder} --base-url {fake.base_url}"
        if cmd == "submit":
            assert rc == 0 and "sent again as batch batch_0001" in err and len(fake.batches) == 1
        else:
            assert rc == 2 and f"`{exact}`" in err
            assert [j["status"] for j in batch.load_jobs(folder).values()] == ["pending"]
            # what the line says to do works, as written: the file is sent again and its answer comes back
            assert batch_api.main(shlex.split(exact)[3:]) == 0 and len(fake.batches) == 1
        assert batch_api.main(["wait", *args, "--every", "0"]) == 0
        assert batch_api.main(["download", *args]) == 0
    assert json.loads((folder / "results" / "batch-0001.batch_0001.output.jsonl").read_text())["custom_id"] == "k"
