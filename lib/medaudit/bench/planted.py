"""Notebooks 03 and 04 at the paper's size with no model time: the planted
model (:mod:`medaudit.llm.planted`) answers, so what is timed is our own
work.

    python -m medaudit.bench planted [--items 2364] [--k 10] [--sizes 296,2364] [--n-boot 1000]

Seed 000's design: ``--items`` questions × Table 1's nine conditions × K
(2,364 × 9 × 10 = 212,760 samples). The questions are MedQA's 4-option test
items, cycled under new ids where more are asked than the file holds (the
texts repeat; the bookkeeping does not care). Each size is one run, timed
step by step as the notebooks run them:

- 03: the plan (:func:`medaudit.llm.mcq.plan_samples`), the run loop
  (:func:`medaudit.llm.runs.run`: which keys the store holds, the order,
  parse and score, one store write per answer) less the planted model's own
  answering (its completions' ``latency_s``), and the read back by key;
- 04: the per-question table (:func:`medaudit.studies.calibration.questions`) and
  the paired comparisons with their intervals, tests and verdicts
  (:func:`medaudit.studies.calibration.compare`, ``--n-boot`` resamples).

Per step: seconds, seconds per 1,000 samples, and the growth exponent
between two sizes (log time ratio / log size ratio: 1 is linear); with the
process's peak RSS and the 1-minute load average (the machine is shared).
03's own work is set against what the CPU backend would take for the same
samples at its measured floor (``--cpu-floor-s``, seconds per sample).
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import tempfile
import time
from pathlib import Path

import pandas as pd

from medaudit.studies import calibration
from medaudit.prep import data, perturb
from medaudit import paths
from medaudit.llm import GenParams, ResponseStore, mcq, runs
from medaudit.llm.planted import PlantedBackend

CONDITIONS = ["base", "+hetero", "+homo", "+Cat", "+Mus", "+Ath", "+homo+Cat", "+homo+Mus", "+homo+Ath"]
# the CPU backend's floor per sample: the embedded 1.5B model on 2 cores with the question's stem
# cached, ~0.3 s per further sample (DESIGN.md, "Models and backends"; docs/speed.md)
CPU_FLOOR_S = 0.3


def frames(n_items: int, conditions=CONDITIONS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(items, variants): ``n_items`` MedQA 4-option questions (cycled under
    new ids past the file's end) and their variants under ``conditions``."""
    recs = data.load_medqa(paths.raw(*data.MEDQA4)).records
    cs = perturb.load_conditions(paths.params("conditions.yaml"))
    texts = {}
    for r in recs.itertuples(index=False):
        t = {c: perturb.make_variant(r.question, cs, c)[0] for c in conditions}
        if all(t.values()):
            texts[r.row] = (r, t)
    pool = list(texts.values())
    items, variants = [], []
    for i in range(n_items):
        r, t = pool[i % len(pool)]
        iid = f"bench-{i:05d}"
        items.append({"item_id": iid, "options": r.options, "answer": r.answer, "answer_idx": r.answer_idx,
                      "subset": "main"})
        variants += [{"item_id": iid, "condition": c, "question": q} for c, q in t.items()]
    return pd.DataFrame(items), pd.DataFrame(variants)


def _rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def one_size(n_items: int, k: int, n_boot: int, folder: Path, seed: int = 20261122) -> dict:
    """Time 03's bookkeeping and 04's analysis at one size (module docstring)."""
    items, variants = frames(n_items)
    backend = PlantedBackend("planted:ceiling")
    store = ResponseStore(folder / f"bench-{n_items}-{k}.sqlite")
    out = {"items": n_items, "samples": len(variants) * k}
    t = time.perf_counter()
    samples = mcq.plan_samples(variants, items, prompt_formats=["mcq"], strategies=["none"], arm_conditions=None,
                               model="planted-ceiling", backend=backend.kind, model_id=backend.model_id, k=k,
                               seed=seed, gen=GenParams(0.7, 0.9, 16))
    out["03 plan s"] = time.perf_counter() - t
    answering = []
    answer = backend.answer

    def timed_answer(req):                  # the planted model's own time, left out of 03's
        c = answer(req)
        answering.append(c)
        return c

    backend.answer = timed_answer
    t = time.perf_counter()
    runs.run(backend, store, samples, model="planted-ceiling", progress=False).check()
    total = time.perf_counter() - t
    model_s = sum(c.latency_s for c in answering)
    out["03 run loop less the model s"], out["planted model s"] = total - model_s, model_s
    t = time.perf_counter()
    responses = store.by_keys(s.key for s in samples)
    out["03 read back s"] = time.perf_counter() - t
    out["03 own s"] = out["03 plan s"] + out["03 run loop less the model s"] + out["03 read back s"]
    out["CPU backend at its floor s"] = CPU_FLOOR_S * out["samples"]
    out["03 own / CPU floor"] = out["03 own s"] / out["CPU backend at its floor s"]
    out["peak RSS after 03 MB"] = _rss_mb()
    del samples
    t = time.perf_counter()
    qt = calibration.questions(responses, items, seed, unparsed="incorrect")
    out["04 questions s"] = time.perf_counter() - t
    t = time.perf_counter()
    calibration.compare(qt, "base", CONDITIONS, n_boot, seed, pairs=[("+hetero", "+homo")], margin=2.0)
    out["04 compare s"] = time.perf_counter() - t
    out["04 s"] = out["04 questions s"] + out["04 compare s"]
    out["peak RSS MB"] = _rss_mb()
    out["load average (1 min)"] = round(os.getloadavg()[0], 2)
    store.close()
    return out


def report(rows: list[dict]) -> pd.DataFrame:
    """The sizes side by side, with seconds per 1,000 samples and the growth
    exponent of each step between the first and the last size."""
    df = pd.DataFrame(rows).set_index("samples").T
    first, last = df.columns[0], df.columns[-1]
    steps = [r for r in df.index if r.endswith(" s") and not r.startswith("CPU")]
    per = df.loc[steps].div(df.columns.to_numpy() / 1000, axis=1)
    df = pd.concat([df, per.rename(index=lambda s: f"{s} per 1,000 samples")])
    if first != last:
        df["growth exponent"] = [math.log(df.at[r, last] / df.at[r, first]) / math.log(last / first)
                                 if r in steps and df.at[r, first] > 0 else None for r in df.index]
    return df


def main(argv=None) -> int:
    """The command line of ``python -m medaudit.bench planted``: run notebooks 03's
    and 04's steps on the planted model at each of ``--sizes`` questions and print each step's
    time."""
    ap = argparse.ArgumentParser(prog="python -m medaudit.bench planted", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="296,2364", help="questions per run, comma-separated (paper: 2364)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--n-boot", type=int, default=1000)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in (int(x) for x in a.sizes.split(",")):
            rows.append(one_size(n, a.k, a.n_boot, Path(d)))
            print(f"{n} questions: {rows[-1]['samples']} samples, 03 own {rows[-1]['03 own s']:.1f} s, "
                  f"04 {rows[-1]['04 s']:.1f} s", flush=True)
    with pd.option_context("display.width", 200, "display.max_rows", 100, "display.float_format", "{:.4g}".format):
        print(report(rows).to_string())
    return 0
