"""Errors that said something false or nothing useful:
each names the file, where in it, and what to do."""
from __future__ import annotations

import pytest

from medaudit import config
from medaudit.prep import data
from medaudit.llm.store import ResponseStore, StoreCorruptError
from support.sandbox import compendium_root


@pytest.fixture()
def root(tmp_path, monkeypatch):
    for k, v in compendium_root(tmp_path).items():
        monkeypatch.setenv(k, v)
    return tmp_path


def test_a_yaml_syntax_error_in_a_profile_names_file_line_and_column(root):
    """It read "unknown profile 'default'": paths.profiles() skips a file
    that does not parse, so the profile seemed not to exist."""
    p = root / "params" / "default.yaml"
    lines = p.read_text(encoding="utf-8").splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("k_samples:"))
    lines[k] = "k_samples: [5"                                  # an unclosed list
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(config.ConfigError) as e:
        config.load("default")
    text = str(e.value)
    assert "unknown profile" not in text
    assert f"params/default.yaml:{k + 2}:" in text or f"params/default.yaml:{k + 1}:" in text, text
    assert "not valid YAML" in text


def test_a_key_without_its_colon_is_reported_on_its_own_line(root):
    """`k_samples 5` on line 57 was reported as line 58, where the parser gave up."""
    p = root / "params" / "default.yaml"
    lines = p.read_text(encoding="utf-8").splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("k_samples:"))
    lines[k] = "k_samples 5"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(config.ConfigError) as e:
        config.load("default")
    assert f"params/default.yaml:{k + 1}:1: not valid YAML: could not find the ':' after the key of " \
           "'k_samples 5' (write `name: value`)" in str(e.value), str(e.value)


def test_a_yaml_override_error_has_line_and_column():
    with pytest.raises(config.ConfigError, match=r"-y x:1:\d+: not valid YAML"):
        config.read_yaml("{k_samples: [5}", "-y x")


def test_a_missing_derived_frame_names_the_notebook_that_writes_it(root):
    """It said "make nb NB=01" for variants.jsonl, which notebook 02 writes."""
    with pytest.raises(FileNotFoundError, match=r"variants\.jsonl does not exist: notebook 02 writes it: "
                                                r"make nb NB=02 PROFILE=smoke"):
        data.load_frame("smoke", "variants")
    assert data.writer("items") == "01"
    assert data.writer("open_labels_qwen") == "05"               # an f-string name
    assert data.writer("no_such_frame") is None


def test_a_corrupt_store_names_the_file_and_the_fix(tmp_path):
    """It said only "file is not a database"."""
    p = tmp_path / "responses.sqlite"
    p.write_bytes(b"not sqlite at all " * 300)
    with pytest.raises(StoreCorruptError) as e:
        ResponseStore(p)
    assert str(p.resolve()) in str(e.value)
    assert f"mv {p.resolve()} {p.resolve()}.corrupt" in str(e.value)
    p.unlink()
    ResponseStore(p)                                             # a fresh store opens as before
