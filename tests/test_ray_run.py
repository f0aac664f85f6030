"""medaudit.engines.ray_run: a notebook's rounds as Ray Data jobs.

The fast tests call the function a Ray worker runs (:func:`answer_batch`)
in this process, against a deterministic OpenAI-compatible server behind a
fault proxy: retried faults, a failure that comes back named and is stored
nowhere. The slow one starts a real local Ray cluster (``ray start --head``
on 127.0.0.1, two CPU workers) and runs the one command on a two-stage
notebook (answers, then judges quoting them) against a real
OpenAI-compatible server (llama.cpp's, SmolLM2-135M, every request from an
empty context so that the order of requests cannot change an answer), then
again while a Ray worker is killed mid-job; each time the store and the table
equal a direct run's byte for byte.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from medaudit.engines import batch, ray_run
from medaudit import runner
from medaudit.llm.store import ResponseStore
from support.fake_openai import FakeOpenAI, by_request
from support.fault_proxy import FaultProxy
from support.sandbox import compendium_root
from support.smoke import MODEL
from support.two_stage import plant_default_run, two_stage_notebook

LIB = Path(__file__).resolve().parents[1] / "lib"
# two items x two conditions: 4 answers, then 4 judges (each request takes seconds on 2 loaded cores)
SMALL = "{infer_conditions: [base, +homo]}"


def _rows(bodies: list[dict]) -> dict:
    return {"custom_id": [f"k{i:02d}" for i in range(len(bodies))], "body": [json.dumps(b) for b in bodies],
            "endpoint": [""] * len(bodies)}


def _body(i: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 8, "seed": i}


def test_a_worker_retries_429_and_500_and_returns_the_answers():
    with FakeOpenAI(model=MODEL, content=by_request) as fake, \
            FaultProxy(fake.base_url, script=["429", "500"], retry_after="0") as proxy:
        out = ray_run.answer_batch(_rows([_body(0), _body(1)]), endpoints=[proxy.base_url], backoff_s=0.01)
    lines = [json.loads(x) for x in out["line"]]
    assert [d["custom_id"] for d in lines] == ["k00", "k01"]
    assert all(d["error"] is None and d["response"]["status_code"] == 200 for d in lines)
    assert lines[0]["response"]["body"]["choices"][0]["message"]["content"] == by_request(_body(0))
    assert proxy.injected["429"] == proxy.injected["500"] == 2 and fake.chat_requests == 2


def test_a_request_that_keeps_failing_comes_back_named_and_is_stored_nowhere(tmp_path):
    with FakeOpenAI(model=MODEL, status=500, message="the GPU fell over") as fake:
        out = ray_run.answer_batch(_rows([_body(0)]), endpoints=[fake.base_url], retries=2, backoff_s=0.01)
        assert fake.chat_requests == 3                       # the request and two retries
    line = json.loads(out["line"][0])
    assert line["custom_id"] == "k00" and line["error"]["code"] == "http_500"
    assert "the GPU fell over" in json.dumps(line) and "after 2 retries" in line["error"]["message"]
    with FakeOpenAI(model=MODEL, status=400, message="bad seed") as fake:
        out = ray_run.answer_batch(_rows([_body(0)]), endpoints=[fake.base_url], retries=2, backoff_s=0.01)
        assert fake.chat_requests == 1                       # a 400 is not retried
    # a connection refused: no status, a named error line
    out = ray_run.answer_batch(_rows([_body(0)]), endpoints=["http://127.0.0.1:9/v1"], retries=1, backoff_s=0.01)
    assert json.loads(out["line"][0])["error"]["code"] == "ray_request_failed"


def test_replicas_take_each_key_to_the_same_one():
    eps = ["http://a/v1", "http://b/v1", "http://c/v1"]
    picks = [ray_run.replica(f"{i:064x}", eps) for i in range(300)]
    assert set(picks) == set(eps)
    assert picks == [ray_run.replica(f"{i:064x}", eps) for i in range(300)]


def test_the_endpoint_a_key_names():
    e = batch.Entry(sample=None, model=MODEL, backend="openai", model_id=f"{MODEL} @ http://127.0.0.1:8/v1 (served: x)",
                    body={}, settings=None, fingerprint="")
    assert ray_run.endpoint_of(e) == "http://127.0.0.1:8/v1"
    e.backend, e.model_id = "llamacpp", "qwen sha256:abc"
    assert ray_run.endpoint_of(e) is None


def test_the_vllm_path_turns_a_body_into_a_row_and_back():
    """The rows Ray Data's LLM processor reads and writes (no GPU here: the
    processor itself is built in the next test)."""
    row = ray_run._to_vllm_row({"custom_id": "k", "body": json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "top_k": 40,
         "max_completion_tokens": 9, "seed": 3, "logprobs": True})})
    assert row["sampling_params"] == {"temperature": 0.7, "top_k": 40, "seed": 3, "max_tokens": 9}
    line = json.loads(ray_run._from_vllm_row({**row, "generated_text": "B", "num_input_tokens": 5,
                                              "num_generated_tokens": 1})["line"])
    c = batch.completion_from_body(line["response"]["body"], batch.manifest_entry({
        "messages": [["user", "hi"]], "params": {"temperature": 0.7, "top_p": 1.0, "max_tokens": 9},
        "answer_letters": [], "item_id": "q", "condition": "c", "prompt_format": "mcq", "k": 0, "perm": None,
        "key": "k", "model": "m", "backend": "openai", "model_id": "m", "body": {}}).sample.request)
    assert (c.text, c.tokens_in, c.tokens_out, c.error) == ("B", 5, 1, "")


# building the processor starts Ray (a local instance of one CPU here): about a minute on 2 loaded cores
@pytest.mark.slow
def test_the_vllm_processor_is_built(tmp_path):
    """Construction only: no GPU, no vLLM here; a model folder with a config
    is all the processor reads before it runs."""
    pytest.importorskip("ray.data.llm")
    import ray
    cfg = tmp_path / "model"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4, "vocab_size": 256,
        "max_position_embeddings": 512}))
    ray.init(num_cpus=1, object_store_memory=80 * 1024 * 1024, include_dashboard=False, log_to_driver=False)
    try:
        p = ray_run.vllm_processor(str(cfg), workers=1, batch_size=8)
        assert type(p).__name__ == "Processor"
        assert "vLLMEngineStage" in p.list_stage_names()
    finally:
        ray.shutdown()


# -- the one command on a real local Ray cluster ------------------------------------------------------------


def _frame(store: Path) -> pd.DataFrame:
    with ResponseStore(store) as s:
        df = s.frame()
    cols = [c for c in df.columns if c not in ("created_at", "latency_s", "run_id", "wall_s")]
    return df[cols].sort_values("key").reset_index(drop=True)


def _compendium(tmp_path: Path, name: str) -> tuple[Path, dict]:
    root = tmp_path / name
    root.mkdir()
    return root, compendium_root(root)


def _command(nb: Path, root: Path, address: str, subject: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "medaudit.engines.ray_run", str(nb), "--profile", "smoke", "--address", address,
            "--workers", "2", "--batch-size", "2", *extra, "-y", subject, "-y", SMALL, "-p", "k_samples", "1"]



def _env(compendium: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDAUDIT_")}
    return {**env, **compendium, "PYTHONPATH": str(LIB)}


@pytest.mark.slow  # a Ray cluster's start (30-70 s on 2 loaded cores), a direct run and two Ray runs of 2 rounds each
def test_one_command_on_a_local_ray_cluster_equals_a_direct_run_even_with_a_worker_killed(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    from medaudit.llm import models
    from support.llama_server import llama_server
    from support.ray_cluster import local_ray_cluster, workers

    # llama.cpp's server on SmolLM2-135M with one thread: the session's two-thread server took 24-48 s a
    # request with the machine's two cores shared (its threads wait on each other), one thread a few
    with llama_server(models.model_path(MODEL), tmp_path / "server.log", n_threads=1) as url, \
            FaultProxy(url, hold_open_s=None, lifetime_s=3600) as proxy:
        subject = (f"{{subject: {{name: {MODEL}, backend: openai, model: {MODEL}, "
                   f"options: {{base_url: '{proxy.base_url}', concurrency: 1}}}}}}")
        nb = two_stage_notebook(tmp_path / "nbs" / "09_tiny.ipynb")
        one, env = _compendium(tmp_path, "one")
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        # the direct run: the runner, into the run its overrides name (another subject: a named run)
        over = ["-y", subject, "-y", SMALL, "-p", "k_samples", "1"]
        assert runner.main([str(nb), str(one / "outputs" / "smoke" / "notebooks" / nb.name), "--profile", "smoke",
                            "--no-progress-bar", *over]) == 0
        direct = proxy.posts
        assert direct == 8
        run = runner.resolve_run("smoke", [("-y", [subject]), ("-y", [SMALL]), ("-p", ["k_samples", "1"])])[0]
        assert run != "default"
        table = f"outputs/smoke/runs/{run}/tables/tiny_judges.csv"
        want = _frame(one / "outputs" / "smoke" / "data" / "responses.sqlite")

        with local_ray_cluster(cpus=2, env={"PYTHONPATH": str(LIB)}) as (address, tmp):
            # 1. the one command: every round, then the notebook from the store; a default run is there
            root, env = _compendium(tmp_path, "ray")
            default = plant_default_run(root)
            r = subprocess.run(_command(nb, root, address, subject), capture_output=True, text=True, timeout=900,
                               env=_env(env))
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            assert "round 1: 4 requests" in r.stdout and "round 2: 4 requests" in r.stdout, r.stdout
            assert proxy.posts - direct == 8                     # each request sent once
            got = _frame(root / "outputs" / "smoke" / "data" / "responses.sqlite")
            pd.testing.assert_frame_equal(want, got)
            assert (one / table).read_bytes() == (root / table).read_bytes()
            assert {p: p.read_bytes() for p in default} == default, "the default run's files changed"
            folder = root / "outputs" / "smoke" / "runs" / run
            assert (folder / "notebooks" / "09_tiny.ipynb").exists() and (folder / "ray" / "09_tiny").is_dir()
            assert json.loads((folder / "run.json").read_text())["notebooks"]["09_tiny"]["engine"] == "ray"
            listed = subprocess.run([sys.executable, "-m", "medaudit.runs", "list", "--profile", "smoke"],
                                    capture_output=True, text=True, timeout=120, env=_env(env))
            assert run in listed.stdout and "09 ok" in listed.stdout, listed.stdout + listed.stderr

            # 2. again in a fresh compendium, a Ray worker killed while it answers
            sent = proxy.posts
            root, env = _compendium(tmp_path, "killed")
            p = subprocess.Popen(_command(nb, root, address, subject, "--endpoint", proxy.base_url),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(env))
            killed, seen = None, set()
            deadline = time.monotonic() + 600
            while killed is None and p.poll() is None and time.monotonic() < deadline:
                if proxy.posts > sent:                            # the job has sent its first request
                    for w in workers(tmp):
                        try:
                            title = " ".join(w.cmdline())
                        except Exception:  # noqa: BLE001 - gone meanwhile
                            continue
                        seen.add(title[:80])
                        if "IDLE" not in title and "Actor" not in title:
                            killed = (w.pid, title[:80])
                            w.kill()
                            break
                time.sleep(0.05)
            out, _ = p.communicate(timeout=900)
            assert killed is not None, f"no busy worker was seen to kill (saw {sorted(seen)}):\n{out[-3000:]}"
            assert p.returncode == 0, out[-3000:]
            got = _frame(root / "outputs" / "smoke" / "data" / "responses.sqlite")
            assert len(got) == got["key"].nunique() == 8             # none lost, none stored twice
            pd.testing.assert_frame_equal(want, got)
            assert (one / table).read_bytes() == (root / table).read_bytes()
            assert proxy.posts - sent >= 8                       # a killed task's requests are sent again


@pytest.mark.slow  # two notebook runs in their own kernels (the export, then the rerun's export)
def test_a_driver_killed_mid_round_loses_nothing(tmp_path, monkeypatch):
    """The lines a killed driver had written are stored by the rerun before it
    exports again, and the rerun asks only for the rest."""
    from medaudit import runner

    with FakeOpenAI(model=MODEL, content=by_request) as fake:
        subject = (f"{{subject: {{name: {MODEL}, backend: openai, model: {MODEL}, "
                   f"options: {{base_url: '{fake.base_url}', concurrency: 1}}}}}}")
        root, env = _compendium(tmp_path, "root")
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        nb = two_stage_notebook(tmp_path / "nbs" / "09_tiny.ipynb")
        over = [("-y", [subject]), ("-y", [SMALL]), ("-p", ["k_samples", "1"])]
        rdir = tmp_path / "work" / "round-1"
        files, n, _ = batch.export(nb, "smoke", rdir, over)
        assert n == 4
        lines = [json.loads(x) for f in files for x in f.read_text().splitlines()]
        out = ray_run.answer_batch({"custom_id": [d["custom_id"] for d in lines[:2]],
                                    "body": [json.dumps(d["body"]) for d in lines[:2]], "endpoint": ["", ""]},
                                   endpoints=[fake.base_url])
        (rdir / "results").mkdir()
        (rdir / "results" / ray_run.OUTPUT).write_text("\n".join(out["line"]) + "\n")
        store = root / "outputs" / "smoke" / "data" / "responses.sqlite"
        with ResponseStore(store) as s:
            rep = ray_run._leftovers(rdir, s, batch.fingerprint(runner.prepare(nb, "smoke", over)))
        assert (rep.stored, rep.missing) == (2, 2)
        assert not (rdir / "results" / ray_run.OUTPUT).exists()           # set aside: not imported twice
        files, n, _ = batch.export(nb, "smoke", rdir, over)
        assert n == 2
        assert {json.loads(x)["custom_id"] for f in files for x in f.read_text().splitlines()} == \
            {d["custom_id"] for d in lines[2:]}


# a local Ray instance of one CPU: about a minute on 2 loaded cores
@pytest.mark.slow
def test_a_planted_models_round_is_answered_on_ray_as_a_direct_run(tmp_path, monkeypatch, medqa4, conditions):
    """A planted model (validation only) is served by no endpoint: its
    round goes to Ray Data with the manifest's lines (the labels beside the
    bodies), each answered on a node by the planted model; the imported
    store is a direct run's, reply for reply."""
    pytest.importorskip("ray")
    import ray

    from medaudit.llm import runs
    from medaudit.llm.planted import PlantedBackend
    from support.smoke import smoke_plan

    backend = PlantedBackend("planted:ceiling")
    samples = smoke_plan(backend, medqa4, conditions)
    folder = tmp_path / "round-1"
    monkeypatch.setenv(batch.ENV_COLLECT, str(folder))
    with ResponseStore(tmp_path / "ray.sqlite") as store, pytest.raises(batch.BatchCollected):
        runs.run(backend, store, samples, model="planted-ceiling", progress=False)
    monkeypatch.delenv(batch.ENV_COLLECT)
    ray.init(num_cpus=1, object_store_memory=80 * 1024 * 1024, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(LIB)}})
    try:
        assert ray_run.answer_planted(folder, folder / "results" / "out.jsonl", workers=1, batch_size=8) == 27
    finally:
        ray.shutdown()
    with ResponseStore(tmp_path / "ray.sqlite") as store:
        assert batch.import_results(folder, [folder / "results" / "out.jsonl"], store).stored == 27
    with ResponseStore(tmp_path / "direct.sqlite") as store:
        runs.run(backend, store, samples, model="planted-ceiling", progress=False).check()
    cols = ["key", "response_text", "parsed_answer"]
    assert _frame(tmp_path / "ray.sqlite")[cols].equals(_frame(tmp_path / "direct.sqlite")[cols])
