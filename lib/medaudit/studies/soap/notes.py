"""Section 4 of the SOAP-note audit (seed 002 A.3.2-A.3.4): the note prompts (MTS-Dialog zero-shot,
ACI-Bench one-shot with D2N068), the models' decoding (:func:`note_gen`), copying (:func:`copy_table`)
and truncation (:func:`truncation_table`).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pandas as pd

from medaudit import prompts
from medaudit.llm import decoding as _decoding
from medaudit.llm import GenParams, ResponseStore, runs
from .config import SoapConfig


# ==========================================================================
# 4. notes (A.3.2-A.3.4)


def note_messages(dataset: str, dialogue: str, example: dict | None = None) -> tuple[list[dict], int]:
    """(messages, stem_chars): MTS-Dialog zero-shot (Figure 4), ACI-Bench
    one-shot (Figure 3, ``example`` from :func:`aci_example`). stem_chars
    counts the user message up to where ``dialogue`` starts."""
    if dataset == "aci_bench":
        if example is None:
            raise ValueError("ACI-Bench notes need the one-shot example (aci_example)")
        user = prompts.load("soap_note_aci_user").format(example_dialog=example["dialog"],
                                                         example_note=example["note"], dialog=dialogue)
        system = prompts.load("soap_note_aci_system")
    else:
        user = prompts.load("soap_note_mts_user").format(dialog=dialogue)
        system = prompts.load("soap_note_mts_system")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], user.index(dialogue)


def note_jobs(cf: pd.DataFrame, model: str, example: dict | None) -> pd.DataFrame:
    """The note requests of one model: item_id = model|unit, condition =
    axis:group; stem_chars covers the prompt up to the appended exchange."""
    rows = []
    for r in cf.itertuples(index=False):
        msgs, start = note_messages(r.dataset, r.dialogue_cf, example)
        rows.append({"item_id": f"{model}|{r.unit}", "condition": f"{r.axis}:{r.group}", "messages": msgs,
                     "stem_chars": start + r.stem_chars})
    return pd.DataFrame(rows, columns=["item_id", "condition", "messages", "stem_chars"])


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The word ``n``-grams of ``text`` (lower case, letters and digits)."""
    w = re.findall(r"[a-z0-9]+", (text or "").lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def example_overlap(note: str | None, example_note: str, n: int = 6) -> float:
    """The share of a note's word ``n``-grams found in the one-shot
    example's note: a note copied from the example (a small model's failure
    on ACI-Bench) scores near 1, one written from its own dialog near 0."""
    mine = ngrams(note, n)
    return len(mine & ngrams(example_note, n)) / len(mine) if mine else np.nan


DECODINGS = ("default", "greedy", "set")


def note_gen(decoding: str, model: dict, config: SoapConfig, *, max_tokens: int, temperature: float = 0.0,
             top_p: float = 1.0) -> GenParams:
    """The note decoding (``soap_note_decoding``) of ``model`` (a profile's
    model spec): ``default``, "using default generation configurations"
    (seed §3.3): the seed's own models (params/soap.yaml
    ``default_generation``, their published configs, however they are
    served), any other model its own generation config
    (:func:`medaudit.llm.decoding.own`: a local model's generation_config.json,
    an API model's default by sending no sampling parameter); ``greedy``
    (temperature 0: two counterfactual notes of a dialog then differ only
    because of the appended answer, so %dlg counts no sampling noise);
    ``set``: ``temperature`` and ``top_p`` as given."""
    if decoding == "greedy":
        return GenParams(0.0, 1.0, max_tokens)
    if decoding == "set":
        return GenParams(float(temperature), float(top_p), max_tokens)
    if decoding == "default":
        named = (config.default_generation or {}).get(model["name"])
        if named is not None:
            return _decoding.from_generation_config({"do_sample": True, **named},
                                                    "params/soap.yaml").params(max_tokens)
        return _decoding.own_params(model, max_tokens)
    raise ValueError(f"soap_note_decoding {decoding!r}: use one of {', '.join(DECODINGS)}")


def dataset_of(dialog_id: str) -> str:
    """The dataset of a dialog id ("mts-…", "aci-…")."""
    return {"mts": "mts_dialog", "aci": "aci_bench"}.get(dialog_id.split("-", 1)[0], "unknown")


def truncation_table(responses: pd.DataFrame) -> pd.DataFrame:
    """Notes cut by the token limit, per model and dataset: ``responses``
    are stored note rows (ResponseStore.frame, prompt_format "soap_note":
    model, item_id = model|dialog_id|context|speaker, finish_reason); a
    note ended by "length" was truncated. Size ``soap_note_max_tokens``
    so that this rate is 0."""
    if responses.empty:
        return pd.DataFrame(columns=["model", "dataset", "notes", "truncated", "truncated (%)", "unknown"])
    r = responses.assign(dataset=[dataset_of(i.split("|", 2)[1]) if "|" in i else "unknown"
                                  for i in responses["item_id"]],
                         fr=responses["finish_reason"].fillna(""))
    g = r.groupby(["model", "dataset"], sort=False)
    out = pd.DataFrame({"notes": g.size(), "truncated": g["fr"].apply(lambda s: int((s == "length").sum())),
                        "unknown": g["fr"].apply(lambda s: int((s == "").sum()))}).reset_index()
    out.insert(4, "truncated (%)", (out["truncated"] / out["notes"] * 100).round(1))
    return out


def copy_table(notes: pd.DataFrame, example_note: str, n: int = 6, copied: float = 0.5) -> pd.DataFrame:
    """Copying of the one-shot example, per ACI-Bench note: its share of
    word ``n``-grams found in the example's note (:func:`example_overlap`)
    and whether that exceeds ``copied``."""
    a = notes[notes["dataset"] == "aci_bench"]
    ov = [example_overlap(t, example_note, n) for t in a["note"]]
    return pd.DataFrame({"model": a["model"].values, "unit": a["unit"].values, "group": a["group"].values,
                         f"{n}-gram overlap": np.round(ov, 3),
                         "copied": [bool(o > copied) if not np.isnan(o) else None for o in ov]})


def generate_notes(models: Sequence[dict], cf: pd.DataFrame, *, example: dict | None, seed: int,
                   gen: GenParams | dict, store: ResponseStore, backend_for, progress: bool = True) -> pd.DataFrame:
    """A note per counterfactual dialog and model: cf's columns plus model
    note (None where the backend failed: not stored, a rerun asks again)
    and note_key (its store key: what a verdict on it names). ``gen``: one GenParams, or one per model name
    (:func:`note_gen` with ``default`` differs by model)."""
    out = []
    for spec in models:
        jobs = note_jobs(cf, spec["name"], example)
        g = gen[spec["name"]] if isinstance(gen, dict) else gen
        got = runs.replies(backend_for(spec), store, jobs, model=spec["name"], seed=seed, gen=g,
                           prompt_format="soap_note", progress=progress)
        out.append(cf.drop(columns=["dialogue_cf", "stem_chars"]).assign(
            model=spec["name"], note=got["reply"].to_numpy(), note_key=got["key"].to_numpy()))
    return pd.concat(out, ignore_index=True) if out else cf.assign(model=[], note=[], note_key=[])


def note_table(notes: pd.DataFrame, copied: float = 0.5) -> pd.DataFrame:
    """Per model and dataset: notes asked for, missing (backend failures),
    mean words, and for ACI-Bench the mean example overlap and the notes
    above ``copied`` (mostly copied from the one-shot example)."""
    n = notes.assign(words=[len(t.split()) if isinstance(t, str) else 0 for t in notes["note"]],
                     overlap=notes.get("example_overlap", pd.Series(np.nan, index=notes.index)).astype(float))
    g = n.groupby(["model", "dataset"], sort=False)
    return pd.DataFrame({"notes": g.size(), "missing": g["note"].apply(lambda s: int(s.isna().sum())),
                         "mean words": g["words"].mean().round(1),
                         "mean example overlap": g["overlap"].mean().round(3),
                         f"copied (overlap > {copied})": g["overlap"].apply(lambda s: int((s > copied).sum()))
                         }).reset_index()
