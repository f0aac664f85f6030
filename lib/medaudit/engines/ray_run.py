"""A notebook's model stages as Ray Data jobs, every round until the
notebook is answered, as the Slurm and batch engines do.

    python -m medaudit.engines.ray_run NB --profile P [--address A] [--endpoint URL]... [--workers N] [-p/-y ...]
    python -m medaudit.engines.ray_run NB --profile P --vllm MODEL_SOURCE [--engine vllm] ...   # GPU nodes
    python -m medaudit.engines.ray_run bench --endpoint URL [...]                                 # see bench()

Ray is the engine; this module is only the adapter between it and the
store. Each round:

1. the notebook plans its requests and stops at the first stage with
   requests the store lacks (:func:`medaudit.engines.batch.export`: collect mode,
   the same code and keys as a direct run), writing them as OpenAI-batch
   lines under ``ray/<notebook>/round-R/`` in the run's folder;
2. Ray Data answers them: ``ray.data.from_items`` over the lines, then
   ``map_batches`` with :func:`answer_batch`, which POSTs each line's body
   to ``/chat/completions`` of an OpenAI-compatible endpoint (one or many
   replicas: ``--endpoint`` repeated, a request's replica chosen by its key;
   without ``--endpoint``, the endpoint its key names) — or, with
   ``--vllm``, Ray Data's LLM processor (``ray.data.llm``, vLLM on the GPU
   nodes) turns each body into a generation;
3. every answer comes back as an OpenAI-batch output or error line and is
   stored by :func:`medaudit.engines.batch.import_results`: under the manifest's key,
   a key already stored counted and not written twice, a failed request
   named in ``failures.jsonl`` and asked again in the next round.

The loop ends when the notebook runs to the end from the store, or stops —
saying why — after a round
that stored nothing new (every request of it failed: named in that round's
``failures.jsonl``) or at ``--max-rounds``.

Where the outputs go: to the run a direct run with the same overrides
writes (:func:`medaudit.runner.resolve_run`; :mod:`medaudit.runs`): the
profile's own ``outputs/<profile>/`` when no override changes an answer,
else ``outputs/<profile>/runs/<run>/``. Its tables, figures and derived
data, the executed notebook in its ``notebooks/`` and the rounds' folders
(``ray/<notebook>/``) all go there, and only the last round's notebook,
which ran to the end, writes them (:func:`medaudit.engines.batch.run_notebook`).

Faults. A Ray worker killed mid-task is Ray's to handle: the task is run
again (``max_retries``), its requests sent again, and nothing of the killed
attempt reaches the store. A request the endpoint refuses is retried inside
the task on 429, 5xx and connection errors (``--request-retries``, with
backoff) and otherwise, or at the end, comes back as an error line: a named
failure. Lines are written to ``results/`` as they arrive, so a driver
killed mid-round loses nothing either: the next run imports what an
earlier attempt of the round left before it exports again.

Where it runs: ``--address`` is a running cluster's (``ray start --head``;
``auto``, ``ray://…``); without it a local one is started for the command
(``--workers`` CPUs, a small object store) and shut down after. The nodes
need ``httpx`` only (the answering function travels by value); an API key
is read on the nodes from ``--api-key-env`` (never sent by us). The keys
name the subject as the notebook declares it (backend, model, endpoint):
replicas given with ``--endpoint`` must serve that model (the import refuses
an answer from another).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from medaudit.engines import batch
from medaudit import paths
from medaudit.llm.store import ResponseStore

RESULTS = "results"
OUTPUT = "ray-output.jsonl"
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class RayRunError(RuntimeError):
    """A run that cannot go on: says why and what to do."""


# ==========================================================================
# what a Ray worker runs (stdlib and httpx only: shipped by value)


def replica(key: str, endpoints: list[str]) -> str:
    """The replica that answers ``key``: its hash modulo their number (so a
    retried task sends each request where it went before)."""
    return endpoints[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(endpoints)]


def _post(client, url: str, body: dict, headers: dict, retries: int, backoff_s: float, timeout_s: float
          ) -> tuple[int | None, dict | None, str]:
    """(HTTP status or None, JSON body or None, what went wrong) after up to ``retries`` retries."""
    import httpx

    status, payload, why = None, None, ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            r = client.post(url, json=body, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as e:
            status, payload, why = None, None, f"{type(e).__name__}: {e}"[:300]
            continue
        status = r.status_code
        try:
            payload = r.json()
        except ValueError:
            payload, why = None, f"HTTP {status}: the body is not JSON: {r.text[:200]!r}"
        if status == 200 and isinstance(payload, dict) and "choices" in payload:
            return status, payload, ""
        if status == 200:
            why = why or f"HTTP 200 without choices: {str(payload)[:200]}"
        else:
            why = why or f"HTTP {status}"
        if status not in RETRY_STATUS and status != 200:
            break
    return status, payload, why


def answer_batch(rows: dict, endpoints: list[str] | None = None, key_env: str = "OPENAI_API_KEY",
                 retries: int = 3, backoff_s: float = 0.5, timeout_s: float = 600.0) -> dict:
    """Ray Data's ``map_batches`` function: each row (``custom_id``,
    ``body`` as JSON text, ``endpoint``) POSTed to its endpoint; returns the
    rows' OpenAI-batch output or error lines (``line``, JSON text)."""
    import httpx

    key = os.environ.get(key_env) or "not-needed"
    headers = {"Authorization": f"Bearer {key}"}
    out = []
    with httpx.Client(trust_env=False) as client:
        for cid, body, ep in zip(rows["custom_id"], rows["body"], rows["endpoint"]):
            cid, body, ep = str(cid), json.loads(str(body)), str(ep)
            target = replica(cid, list(endpoints)) if endpoints else ep
            status, payload, why = _post(client, target.rstrip("/") + "/chat/completions", body, headers, retries,
                                         backoff_s, timeout_s)
            if not why:
                line = {"id": f"ray-{cid[:16]}", "custom_id": cid,
                        "response": {"status_code": 200, "request_id": "", "body": payload}, "error": None}
            else:
                line = {"id": f"ray-{cid[:16]}", "custom_id": cid,
                        "response": {"status_code": status, "body": payload} if status not in (None, 200) else None,
                        "error": {"code": "ray_request_failed" if status in (None, 200) else f"http_{status}",
                                  "message": f"{why} (at {target}, after {retries} retries)"}}
            out.append(json.dumps(line, ensure_ascii=False))
    return {"line": out}


def answer_planted_batch(rows: dict) -> dict:
    """Ray Data's ``map_batches`` function for a planted model's requests
    (validation only; no endpoint serves one): each row's ``entry`` (its
    manifest line as JSON text, the labels beside the body) answered by
    the planted model its model id names; returns the rows' OpenAI-batch
    lines (``line``). The nodes need this project (the planted model and
    params/planted.yaml), not only httpx."""
    from medaudit.llm.planted import PlantedBackend

    backends: dict = {}
    out = []
    for text in rows["entry"]:
        e = batch.manifest_entry(json.loads(str(text)))
        if e.model_id not in backends:
            backends[e.model_id] = PlantedBackend.from_model_id(e.model_id)
        out.append(batch.result_line(e.sample.key, backends[e.model_id].answer(e.sample.request), e.model_id))
    return {"line": out}


def answer_planted(folder: Path, out: Path, *, workers: int = 2, batch_size: int = 4) -> int:
    """A planted model's round as a Ray Data job (:func:`answer_planted_batch`
    over the manifest's lines); each result line appended to ``out``.
    Returns the lines written."""
    import ray.data

    items = [{"entry": x} for x in (Path(folder) / batch.MANIFEST).read_text(encoding="utf-8").splitlines()
             if x.strip()]
    if not items:
        return 0
    ds = ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // batch_size)))
    ds = ds.map_batches(answer_planted_batch, batch_size=batch_size, concurrency=workers, num_cpus=1,
                        batch_format="numpy")
    return _append_lines(ds, out)



def _append_lines(ds, out: Path) -> int:
    """Append each result line of the Ray dataset ``ds`` to ``out`` as it arrives (flushed, so a
    killed round keeps what was answered); returns how many."""
    n = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as f:
        for row in ds.iter_rows():
            f.write(str(row["line"]) + "\n")
            f.flush()
            n += 1
    return n

# ==========================================================================
# the vLLM path: Ray Data's LLM processor on GPU nodes


def vllm_processor(model_source: str, *, workers: int = 1, batch_size: int = 16, engine_kwargs: dict | None = None,
                   accelerator_type: str | None = None):
    """A ``ray.data.llm`` processor that answers the batch lines with vLLM
    on the cluster's GPUs: each line's body (exported with ``--engine vllm``:
    every sampling setting in vLLM's names) becomes the row's ``messages``
    and ``sampling_params``; the generation comes back as the line a server
    would send (``choices[0].message.content``, ``model``, token counts).
    Log-probs are not carried: export with ``mcq_mode: generate``."""
    try:
        from ray.data.llm import build_llm_processor, vLLMEngineProcessorConfig
    except ImportError as e:
        raise RayRunError(f"--vllm needs Ray Data's LLM processor (pip install 'ray[data,llm]'): {e}") from None
    config = vLLMEngineProcessorConfig(model_source=model_source, concurrency=workers, batch_size=batch_size,
                                       engine_kwargs=dict(engine_kwargs or {}), accelerator_type=accelerator_type)
    return build_llm_processor(config, preprocess=_to_vllm_row, postprocess=_from_vllm_row)


SAMPLING = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "stop", "repetition_penalty",
            "presence_penalty", "frequency_penalty")


def _to_vllm_row(row: dict) -> dict:
    body = json.loads(row["body"])
    params = {k: body[k] for k in SAMPLING if body.get(k) is not None}
    if "max_completion_tokens" in body:
        params.setdefault("max_tokens", body["max_completion_tokens"])
    return {"custom_id": row["custom_id"], "model": body.get("model", ""), "messages": body["messages"],
            "sampling_params": params}


def _from_vllm_row(row: dict) -> dict:
    text = row.get("generated_text")
    ok = text is not None
    body = {"id": f"ray-vllm-{row['custom_id'][:16]}", "object": "chat.completion", "created": 0,
            "model": row.get("model", ""),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": int(row.get("num_input_tokens") or 0),
                      "completion_tokens": int(row.get("num_generated_tokens") or 0),
                      "total_tokens": (int(row.get("num_input_tokens") or 0)
                                       + int(row.get("num_generated_tokens") or 0))}}
    line = ({"custom_id": row["custom_id"], "response": {"status_code": 200, "request_id": "", "body": body}}
            if ok else {"custom_id": row["custom_id"], "response": None,
                        "error": {"code": "vllm_no_output", "message": "vLLM returned no text"}})
    return {"line": json.dumps(line, ensure_ascii=False)}


# ==========================================================================
# the driver: one round, then the loop


def endpoint_of(entry: batch.Entry) -> str | None:
    """The endpoint a request's key names (the openai backend's identity is
    ``name @ endpoint (served: …)``), or None for a local backend."""
    if entry.backend != "openai" or " @ " not in entry.model_id:
        return None
    return entry.model_id.split(" @ ", 1)[1].split(" ", 1)[0]


def connect(address: str | None, workers: int, object_store_mb: int = 100):
    """``ray.init`` on the cluster at ``address``, or a local one of
    ``workers`` CPUs (True when this call started it and must shut it down)."""
    try:
        import ray
    except ImportError:
        raise RayRunError("Ray is not installed: pip install -e '.[ray]'") from None
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, object_store_memory=object_store_mb * 1024 * 1024, include_dashboard=False,
                 log_to_driver=False)
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    import ray.cloudpickle as cp

    cp.register_pickle_by_value(sys.modules[__name__])      # the nodes need httpx, not this project
    return True


def answer(lines: list[dict], out: Path, *, endpoints: list[str] | None = None, workers: int = 2, batch_size: int = 4,
           key_env: str = "OPENAI_API_KEY", retries: int = 3, max_task_retries: int = 3, vllm: str | None = None,
           vllm_options: dict | None = None, default_endpoints: dict[str, str] | None = None) -> int:
    """Answer the batch ``lines`` as a Ray Data job; each result line is
    appended to ``out`` as it arrives. Returns the lines written."""
    import ray.data

    items = [{"custom_id": d["custom_id"], "body": json.dumps(d["body"], ensure_ascii=False),
              "endpoint": (default_endpoints or {}).get(d["custom_id"], "")} for d in lines]
    if not items:
        return 0
    if not endpoints and not vllm:
        lost = [i["custom_id"] for i in items if not i["endpoint"]]
        if lost:
            raise RayRunError(f"{len(lost)} requests (e.g. {lost[0]}) are for a local backend: give --endpoint "
                              "(servers of that model, with --engine naming their kind) or --vllm")
    blocks = max(1, -(-len(items) // batch_size))
    ds = ray.data.from_items(items, override_num_blocks=blocks)
    if vllm:
        ds = vllm_processor(vllm, workers=workers, batch_size=batch_size, **(vllm_options or {}))(ds)
    else:
        ds = ds.map_batches(answer_batch, batch_size=batch_size, concurrency=workers, num_cpus=1,
                            max_retries=max_task_retries, batch_format="numpy",
                            fn_kwargs={"endpoints": list(endpoints or []), "key_env": key_env, "retries": retries})
    return _append_lines(ds, out)


def _leftovers(rdir: Path, store: ResponseStore, fp: str) -> batch.ImportReport | None:
    """Results an earlier, killed attempt of this round left: imported
    (under the manifest they were answered for) and set aside."""
    res = rdir / RESULTS
    files = sorted(res.glob("ray-output*.jsonl")) if res.is_dir() else []
    files = [f for f in files if f.stat().st_size]
    if not files or not (rdir / batch.MANIFEST).exists():
        return None
    rep = batch.import_results(rdir, files, store, fingerprint=fp)
    for f in files:
        f.rename(f.with_name(f"imported-{time.time_ns()}-{f.name}"))
    return rep


def run(notebook: Path, profile: str, overrides=(), *, address: str | None = None, endpoints=(), workers: int = 2,
        batch_size: int = 4, engine: str | None = None, workdir: Path | None = None, max_rounds: int = 20,
        key_env: str = "OPENAI_API_KEY", retries: int = 3, vllm: str | None = None, log=print) -> dict:
    """Every round of the notebook on Ray until it is answered (module
    docstring); a summary: rounds, per round the requests, stored lines,
    failures, seconds; ``finished`` and ``next``."""
    from medaudit import runner

    notebook = Path(notebook).resolve()
    overrides = list(overrides)
    fp = batch.fingerprint(runner.prepare(notebook, profile, overrides))
    run_name = runner.resolve_run(profile, overrides)[0]
    work = Path(workdir or paths.run_outputs(profile, "ray", notebook.stem, run=run_name))
    work.mkdir(parents=True, exist_ok=True)
    store_path = paths.outputs(profile, "data", "responses.sqlite")
    started = connect(address, workers)
    summary: dict = {"rounds": {}, "finished": False}
    try:
        for r in range(1, max_rounds + 1):
            rdir = work / f"round-{r}"
            t0 = time.monotonic()
            with ResponseStore(store_path) as store:
                early = _leftovers(rdir, store, fp)
            if early is not None:
                log(f"round {r}: an earlier attempt's results: {early!r}".replace("\n", "; "))
            files, n, why = batch.export(notebook, profile, rdir, overrides, engine, runs_on="ray")
            if n == 0:
                dest = paths.run_outputs(profile, "notebooks", notebook.name, run=run_name)
                summary.update(finished=True, run=run_name,
                               next=f"finished: every request answered; run {run_name}: the executed notebook is "
                                    f"{dest}, its tables and figures beside it")
                log(summary["next"])
                return summary
            manifest = batch.read_manifest(rdir)
            lines = [json.loads(x) for f in files for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
            defaults = {k: endpoint_of(e) or "" for k, e in manifest.items()}
            out = rdir / RESULTS / OUTPUT
            if manifest and all(e.backend == "planted" for e in manifest.values()):   # validation only
                got = answer_planted(rdir, out, workers=workers, batch_size=batch_size)
            else:
                got = answer(lines, out, endpoints=list(endpoints), workers=workers, batch_size=batch_size,
                             key_env=key_env, retries=retries, vllm=vllm, default_endpoints=defaults)
            with ResponseStore(store_path) as store:
                rep = batch.import_results(rdir, [out], store, fingerprint=fp)
            info = {"requests": n, "lines": got, "stored": rep.stored, "already": rep.already, "failed": rep.failed,
                    "missing": rep.missing, "seconds": round(time.monotonic() - t0, 2)}
            summary["rounds"][r] = info
            log(f"round {r}: {n} requests, {got} lines back: stored {rep.stored}, already {rep.already}, "
                f"failed {rep.failed}, missing {rep.missing} ({info['seconds']} s)")
            if rep.failures_file:
                log(f"  each failure with its reason: {rep.failures_file}")
            if rep.stored == 0:
                summary["next"] = (f"stopped: round {r} stored nothing new and requests are still pending ({why}); "
                                   f"the failures are named in {rdir / 'failures.jsonl'}")
                log(summary["next"])
                return summary
        summary["next"] = f"stopped: --max-rounds {max_rounds} reached with requests pending"
        log(summary["next"])
        return summary
    finally:
        if started:
            import ray

            ray.shutdown()


# ==========================================================================
# the benchmark: requests/s direct vs Ray with 1 and 2 workers, in one run


def bench(endpoint: str, model: str, n: int = 24, max_tokens: int = 16, address: str | None = None,
          workers=(1, 2), batch_size: int = 2, log=print) -> dict:
    """Requests per second for the same ``n`` chat requests answered (a)
    directly, one after another, by the openai backend's client as a direct
    run does with concurrency 1, and (b) as a Ray Data job with each number
    of ``workers`` (a local cluster of max(workers) CPUs when ``address`` is
    None). Each request is new to the server (a per-run nonce in the
    prompt), so no cache answers it; the Ray figure includes the job's start."""
    import httpx

    def bodies(tag: str) -> list[dict]:
        return [{"custom_id": f"{tag}-{i:04d}",
                 "body": {"model": model, "messages": [{"role": "user", "content": f"[{tag} {i}] Name one vitamin."}],
                          "max_tokens": max_tokens, "temperature": 0.0, "seed": i}} for i in range(n)]

    nonce = f"{time.time_ns():x}"
    res: dict = {"n": n}
    lines = bodies(f"direct-{nonce}")
    t0 = time.monotonic()
    with httpx.Client(trust_env=False) as c:
        for d in lines:
            r = c.post(endpoint.rstrip("/") + "/chat/completions", json=d["body"], timeout=600)
            r.raise_for_status()
    res["direct"] = n / (time.monotonic() - t0)
    log(f"direct: {n} requests, {res['direct']:.2f} requests/s")
    started = connect(address, max(workers))
    try:
        import tempfile

        for w in workers:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / OUTPUT
                t0 = time.monotonic()
                got = answer(bodies(f"ray{w}-{nonce}"), out, endpoints=[endpoint], workers=w, batch_size=batch_size)
                dt = time.monotonic() - t0
                bad = [x for x in out.read_text().splitlines() if json.loads(x).get("error")]
            if got != n or bad:
                raise RayRunError(f"Ray with {w} workers: {got} of {n} lines, {len(bad)} failed: {bad[:1]}")
            res[f"ray_{w}"] = n / dt
            log(f"Ray, {w} worker{'s' if w > 1 else ''}: {n} requests, {res[f'ray_{w}']:.2f} requests/s "
                f"({res[f'ray_{w}'] / res['direct']:.2f}x direct)")
    finally:
        if started:
            import ray

            ray.shutdown()
    return res


# ==========================================================================
# command line


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m medaudit.engines.ray_run``: run a notebook's model
    stages as Ray Data jobs round by round until it is answered, or ``bench``: requests per second
    direct against Ray Data with 1 and 2 workers."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        ap = argparse.ArgumentParser(prog="python -m medaudit.engines.ray_run bench",
                                     description="requests/s: direct vs Ray Data with 1 and 2 workers, in one run")
        ap.add_argument("--endpoint", required=True, help="an OpenAI-compatible base URL (…/v1)")
        ap.add_argument("--model", required=True)
        ap.add_argument("-n", type=int, default=24)
        ap.add_argument("--max-tokens", type=int, default=16)
        ap.add_argument("--address", default=None)
        ap.add_argument("--batch-size", type=int, default=2)
        a = ap.parse_args(argv[1:])
        res = bench(a.endpoint, a.model, a.n, a.max_tokens, a.address, batch_size=a.batch_size)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in res.items()}))
        return 0
    ap = argparse.ArgumentParser(prog="python -m medaudit.engines.ray_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", help="03, 05_open_ended or a path")
    ap.add_argument("--profile", required=True)
    ap.add_argument("--address", default=None, help="a Ray cluster (ray start --head prints it); default: a local one")
    ap.add_argument("--endpoint", action="append", default=[], metavar="URL",
                    help="an OpenAI-compatible replica serving the requests' model (repeat for several); default: "
                         "the endpoint each request's key names")
    ap.add_argument("--workers", type=int, default=2, help="concurrent Ray tasks (and a local cluster's CPUs)")
    ap.add_argument("--batch-size", type=int, default=4, help="requests per Ray task")
    ap.add_argument("--engine", choices=sorted(batch.dispatch.ENGINES),
                    help="the engine behind the endpoints (or --vllm) for a local backend's requests")
    ap.add_argument("--vllm", metavar="MODEL_SOURCE", help="answer with vLLM on the cluster's GPUs through "
                    "ray.data.llm (the model the requests name, as a path or hub id)")
    ap.add_argument("--api-key-env", default="OPENAI_API_KEY", help="read on the nodes; a local endpoint needs none")
    ap.add_argument("--request-retries", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=20)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="default: ray/<notebook>/ in the run's folder (outputs/<profile>/, or "
                         "outputs/<profile>/runs/<run>/ when an override changes answers)")
    from medaudit.runner import Ordered

    ap.add_argument("-p", "--parameters", dest="overrides", nargs=2, action=Ordered, metavar=("NAME", "VALUE"),
                    help="a parameter override, as the runner reads it")
    ap.add_argument("-y", "--parameters_yaml", dest="overrides", action=Ordered, metavar="YAML",
                    help="overrides as a YAML mapping")
    args = ap.parse_args(argv)
    from medaudit.config import ConfigError

    try:
        s = run(batch.notebook_path(args.notebook), args.profile, list(args.overrides or []), address=args.address,
                endpoints=args.endpoint, workers=args.workers, batch_size=args.batch_size, engine=args.engine,
                workdir=args.workdir, max_rounds=args.max_rounds, key_env=args.api_key_env,
                retries=args.request_retries, vllm=args.vllm)
    except (RayRunError, batch.BatchError, ConfigError) as e:      # ConfigError: the runner's checks
        print(f"medaudit.engines.ray_run: {e}", file=sys.stderr)
        return 2
    return 0 if s["finished"] else 1


if __name__ == "__main__":
    sys.exit(main())
