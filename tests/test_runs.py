"""Runs kept apart: a rerun with another subject, or any parameter that changes
answers, writes to its own run folder and keeps the last run's notebooks and tables; two runs are
compared side by side. Real papermill runs of a small notebook through python -m medaudit.runner
in a temporary compendium (MEDAUDIT_ROOT, the checkout's params/), as tests/test_runner.py does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from medaudit.prep import data
from medaudit import paths, runner, runs
from medaudit.llm import importer
from support.sandbox import compendium_root

SMALL = "{name: smollm2-135m, backend: llamacpp, model: smollm2-135m}"
# the notebook writes a table and a derived frame that depend on its subject, as 03-04 do
CELL = ('import pandas as pd\nfrom pathlib import Path\n'
        'from medaudit.prep import data\nfrom medaudit.report import tables\n'
        'df = pd.DataFrame({"model": [subject["name"]] * 2, "condition": ["base", "+homo"],\n'
        '                   "n": [3, 3], "accuracy": [len(subject["name"]) / 100, 0.5]})\n'
        'data.save_frame(df, profile, "tiny_answers")\n'
        'tables.save_table(df, "10_acc", profile, caption="accuracy per condition")\n'
        'if Path("fail.flag").exists():\n    raise RuntimeError("planted failure after the table was saved")')


def _notebook(root: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell('profile = "x"\nsubject = {}', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(CELL)]
    path = root / "notebooks" / "10_tiny.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _env(root: Path) -> dict:
    return {**os.environ, "MEDAUDIT_ROOT": str(root)}


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    nb = root / "notebooks" / "10_tiny.ipynb"
    out = root / "outputs" / "smoke" / "notebooks" / nb.name        # as make passes it
    return subprocess.run([sys.executable, "-m", "medaudit.runner", str(nb), str(out), "--profile", "smoke",
                           "--no-progress-bar", *args], cwd=root, env=_env(root), capture_output=True, text=True,
                          timeout=600, check=False)


def _runs(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "medaudit.runs", *args], cwd=root, env=_env(root),
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The default run, then a rerun with a second subject (two kernels)."""
    root = tmp_path_factory.mktemp("runs")
    compendium_root(root)
    _notebook(root)
    first = _run(root)
    assert first.returncode == 0, first.stderr
    default_files = {p: p.read_bytes() for p in (root / "outputs" / "smoke").rglob("*")
                     if p.is_file() and p.suffix in (".csv", ".ipynb", ".jsonl")}
    second = _run(root, "-p", "subject", SMALL)
    assert second.returncode == 0, second.stderr
    return root, default_files, second


@pytest.mark.slow  # two notebook runs (a kernel each): 20 s to a minute on 2 shared cores
def test_a_rerun_with_a_second_subject_leaves_both_runs_tables_on_disk(two_runs):
    """The issue's done-when: `make nb NB=03 ARGS="-p subject small"` overwrote notebooks/03_* and
    tables/03_* in place; now the default run's files are byte for byte as they were, at today's
    paths, and the second subject's are in outputs/smoke/runs/subject-smollm2-135m.<digest>/."""
    root, before, second = two_runs
    base = root / "outputs" / "smoke"
    assert (base / "notebooks" / "10_tiny.ipynb").is_file() and (base / "tables" / "10_acc.csv").is_file()
    assert (base / "data" / "tiny_answers.jsonl").is_file()
    assert {p: p.read_bytes() for p in before} == before, "the default run's files changed"
    (run,) = [p for p in (base / "runs").iterdir() if p.is_dir()]
    assert run.name.startswith("subject-smollm2-135m.")
    assert set(pd.read_csv(base / "tables" / "10_acc.csv")["model"]) == {"qwen2.5-coder-1.5b"}
    assert set(pd.read_csv(run / "tables" / "10_acc.csv")["model"]) == {"smollm2-135m"}
    assert set(pd.read_json(run / "data" / "tiny_answers.jsonl", lines=True)["model"]) == {"smollm2-135m"}
    assert {p.name for p in (run / "tables").iterdir()} == {"10_acc.csv", "10_acc.md", "10_acc.tex"}
    executed = nbformat.read(run / "notebooks" / "10_tiny.ipynb", as_version=4)
    shown = "".join(json.dumps(o) for c in executed.cells for o in c.get("outputs", []))
    assert f"outputs/smoke/runs/{run.name}/tables/10_acc.csv" in shown      # the notebook names where it wrote
    assert f"run {run.name}: outputs/smoke/runs/{run.name}/" in second.stdout
    m = json.loads((run / "run.json").read_text())
    assert m["run"] == run.name and m["profile"] == "smoke"
    assert m["changed"]["subject"]["name"] == "smollm2-135m" and list(m["changed"]) == ["subject"]
    assert m["overrides"] == [f"-p subject {SMALL}"]
    nb = m["notebooks"]["10_tiny"]
    assert nb["status"] == "ok" and nb["models"] == {"subject": "smollm2-135m"}
    assert nb["started"] <= nb["finished"] and nb["commit"]
    assert json.loads((base / "run.json").read_text())["notebooks"]["10_tiny"]["status"] == "ok"


@pytest.mark.slow  # the two notebook runs above
def test_compare_prints_both_runs_with_their_n_and_the_difference(two_runs):
    """On the two runs the runner made: `python -m medaudit.runs compare` and `list`."""
    root, _, _ = two_runs
    run = next((root / "outputs" / "smoke" / "runs").iterdir()).name
    r = _runs(root, "compare", "default", run, "--profile", "smoke", "--table", "10_acc")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"A = run default (outputs/smoke), B = run {run} (outputs/smoke/runs/{run})" in out
    assert f"A (default): N = 3 (column n); B ({run}): N = 3 (column n)" in out
    assert "rows matched on condition" in out        # the model's name differs by run: shown per run
    row = next(line for line in out.splitlines() if line.startswith("| base"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # condition, model A, model B, n A, n B, n B-A, accuracy A, accuracy B, accuracy B-A
    assert cells == ["base", "qwen2.5-coder-1.5b", "smollm2-135m", "3", "3", "+0", "0.18", "0.12", "-0.06"]
    listed = _runs(root, "list", "--profile", "smoke")
    assert listed.returncode == 0, listed.stderr
    assert f"| {run}" in listed.stdout and "subject = smollm2-135m" in listed.stdout
    assert "| default" in listed.stdout and "10 ok" in listed.stdout


@pytest.fixture()
def saved_runs(tmp_path, monkeypatch):
    """Two runs' tables written by tables.save_table as a notebook writes them (no kernel): the
    default run's and run subject-x.abc123's, different in their model and numbers."""
    from medaudit.report import tables

    compendium_root(tmp_path)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    for run, model, acc in (("default", "m-a", [0.5, 0.25]), ("subject-x.abc123", "m-b", [0.75, 0.5])):
        monkeypatch.setenv(paths.RUN_ENV, run)
        df = pd.DataFrame({"model": [model] * 2, "condition": ["base", "+homo"], "n": [4, 4], "accuracy": acc})
        tables.save_table(df, "04_acc", "smoke", caption="accuracy")
        if run == "default":
            tables.save_table(df, "04_only_default", "smoke")
        runs.record("smoke", run, "04_calibration", "running", params={"subject": {"name": model, "backend": "x",
                                                                                     "model": model}})
        runs.record("smoke", run, "04_calibration", "ok")
    monkeypatch.delenv(paths.RUN_ENV)
    return tmp_path


def test_compare_command_side_by_side_without_a_kernel(saved_runs, capsys):
    assert runs.main(["compare", "default", "subject-x.abc123", "--profile", "smoke", "--width", "200"]) == 0
    out = capsys.readouterr().out
    assert "== 04_acc\nA (default): N = 4 (column n); B (subject-x.abc123): N = 4 (column n)" in out
    assert "| +homo       | m-a         | m-b         | 4       | 4       | +0          | 0.25           | 0.5" in out
    assert "== 04_only_default\nonly in run default (run subject-x.abc123 did not write it)" in out
    assert runs.main(["list", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("profile smoke: 2 runs") and "| subject-x.abc123 " in out and "04 ok" in out


def test_an_unknown_run_or_table_or_a_bad_run_name_is_a_clear_error(saved_runs, capsys):
    assert runs.main(["compare", "default", "subject-small", "--profile", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "no run 'subject-small' of profile smoke (runs of smoke: default, subject-x.abc123; " in err
    assert runs.main(["compare", "default", "subject-x.abc123", "--profile", "smoke", "--table", "04_accc"]) == 2
    assert "no table '04_accc' in run default or subject-x.abc123 of profile smoke; did you mean '04_acc'?" \
        in capsys.readouterr().err
    assert runs.main(["compare", "default", "../up", "--profile", "smoke"]) == 2
    assert "run name '../up': a run is named by letters, digits and . _ + -" in capsys.readouterr().err
    r = subprocess.run([sys.executable, "-m", "medaudit.runner", "notebooks/01_data_prep.ipynb", "o.ipynb",
                        "--profile", "smoke", "--run", "../elsewhere"], cwd=saved_runs, env=_env(saved_runs),
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "nothing was run" in r.stderr and "run name '../elsewhere'" in r.stderr
    assert not (saved_runs / "outputs" / "elsewhere").exists() and not (saved_runs / "o.ipynb").exists()
    from medaudit.publish import site
    with pytest.raises(SystemExit) as e:
        site.main(["smoke", "--run", "nosuch", "--no-notebooks"])
    assert e.value.code == 2 and "no run 'nosuch' of profile smoke" in capsys.readouterr().err


@pytest.mark.slow  # a third notebook run (a kernel): 20 s to a minute on 2 shared cores
def test_a_failed_rerun_leaves_both_runs_untouched(two_runs):
    """Item 6 within runs: a named run that fails after saving its table keeps that run's last
    good notebook and table, and the default run's; the failed notebook is kept in the run's
    failed/ and the manifest says failed."""
    root, before, _ = two_runs
    run = next((root / "outputs" / "smoke" / "runs").iterdir())
    kept = {p: p.read_bytes() for p in run.rglob("*") if p.suffix in (".csv", ".md", ".tex", ".ipynb")}
    flag = root / "notebooks" / "fail.flag"
    flag.write_text("")
    try:
        r = _run(root, "-p", "subject", SMALL)
    finally:
        flag.unlink()
    assert r.returncode == 1 and "planted failure" in r.stderr
    assert {p: p.read_bytes() for p in kept} == kept and {p: p.read_bytes() for p in before} == before
    assert (run / "failed" / "10_tiny.ipynb").is_file()
    assert not (root / "outputs" / "smoke" / "failed").exists()
    assert json.loads((run / "run.json").read_text())["notebooks"]["10_tiny"]["status"] == "failed"


@pytest.mark.slow  # two notebook runs (a kernel each): 20 s to a minute on 2 shared cores
def test_an_engine_writes_the_run_the_runner_names_and_only_when_the_notebook_finished(two_runs, monkeypatch):
    """Ray, Slurm, batch rounds and shards run a notebook through medaudit.engines.batch.run_notebook, which
    wrote to the default run whatever the overrides (another subject's table replaced the default
    run's). Now it resolves the run as the runner does: a round that stops writes nothing, one that
    runs to the end writes the runner's tables, byte for byte, into the named run, the default run
    untouched, and the run's manifest names the engine."""
    from medaudit.engines import batch

    root, before, _ = two_runs
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    monkeypatch.delenv(paths.RUN_ENV, raising=False)
    items = [("-p", ["subject", SMALL])]
    name = runner.resolve_run("smoke", items)[0]
    shown = _run(root, "-p", "subject", SMALL, "--print-run-folder")
    assert shown.stdout.strip() == f"outputs/smoke/runs/{name}"
    run = root / "outputs" / "smoke" / "runs" / name
    by_runner = {p: p.read_bytes() for p in (run / "tables").iterdir()}
    for p in by_runner:
        p.unlink()
    nb = root / "notebooks" / "10_tiny.ipynb"
    flag = root / "notebooks" / "fail.flag"
    flag.write_text("")
    try:
        done, ename, _ = batch.run_notebook(nb, "smoke", items, {"MEDAUDIT_ROOT": str(root)}, root / "work")
    finally:
        flag.unlink()
    assert (done, ename) == (False, "RuntimeError")
    assert not list((run / "tables").iterdir())                    # the stopped round wrote nothing
    assert json.loads((run / "run.json").read_text())["notebooks"]["10_tiny"]["status"] == "failed"
    done, _, why = batch.run_notebook(nb, "smoke", items, {"MEDAUDIT_ROOT": str(root)}, root / "work")
    assert done, why
    assert {p: p.read_bytes() for p in by_runner} == by_runner      # the runner's tables, byte for byte
    assert {p: p.read_bytes() for p in before} == before, "the default run's files changed"
    assert set(pd.read_json(run / "data" / "tiny_answers.jsonl", lines=True)["model"]) == {"smollm2-135m"}
    assert (run / "notebooks" / "10_tiny.ipynb").is_file()
    entry = json.loads((run / "run.json").read_text())["notebooks"]["10_tiny"]
    assert (entry["status"], entry["engine"]) == ("ok", "batch")
    assert name in set(runs.listing("smoke")["run"])
    assert not (root / "outputs" / "smoke" / ".staging").exists()


# --------------------------------------------------------------------------
# naming and placement, no kernel


def _changed(*items) -> dict:
    return runs.changed("smoke", runner.collect_overrides(list(items))[0])


def test_only_overrides_that_change_answers_name_a_run():
    """The profile's own value, a runtime option (threads) and recorded_runs keep the default run
    (make record passes recorded_runs []); a subject, a sample size, a model redefined for every
    role each name their own run, the same overrides always the same one."""
    smoke = runs._profile_values("smoke")
    spec = smoke["subject"]
    threads = {**spec, "options": {**spec["options"], "n_threads": 1}}
    assert _changed(("-p", ["k_samples", str(smoke["k_samples"])]), ("-y", ["{recorded_runs: []}"]),
                    ("-y", [json.dumps({"subject": threads})])) == {}
    assert runs.name({}) == "default"
    small = _changed(("-p", ["subject", SMALL]))
    assert list(small) == ["subject"] and runs.name(small).startswith("subject-smollm2-135m.")
    half = {"subject": {**small["subject"], "name": "qwen2.5-coder-0.5b", "model": "qwen2.5-coder-0.5b"}}
    assert runs.name(half).startswith("subject-qwen2.5-coder-0.5b.") and runs.name(half) != runs.name(small)
    assert runs.name({"subject": {**small["subject"], "options": {"n_ctx": 512}}}) != runs.name(small)
    k = _changed(("-p", ["k_samples", "10"]))
    assert k == {"k_samples": 10} and runs.name(k).startswith("k_samples-10.")
    every = _changed(("-y", [f"{{models: {{embedded: {SMALL}}}}}"]))
    assert {"subject", "judge"} <= set(every) and runs.name(every).startswith("models-smollm2-135m.")
    ctx = _changed(("-y", [json.dumps({"subject": {**spec, "options": {**spec["options"], "n_ctx": 2048}}})]))
    assert list(ctx) == ["subject"]            # a context length changes which prompts fit: a run


def test_a_named_run_writes_its_data_and_reads_the_default_runs(tmp_path, monkeypatch):
    """A rerun of 03 reads 01's items from the default run; what the run writes itself it reads back."""
    compendium_root(tmp_path)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    monkeypatch.delenv(paths.RUN_ENV, raising=False)
    data.save_frame(pd.DataFrame({"item_id": ["a"]}), "smoke", "items")
    monkeypatch.setenv(paths.RUN_ENV, "subject-x.123abc")
    assert list(data.load_frame("smoke", "items")["item_id"]) == ["a"]
    p = data.save_frame(pd.DataFrame({"item_id": ["b"]}), "smoke", "items")
    assert p == tmp_path / "outputs" / "smoke" / "runs" / "subject-x.123abc" / "data" / "items.jsonl"
    assert list(data.load_frame("smoke", "items")["item_id"]) == ["b"]
    # answers imported in the run may name the run's items (llm.importer's catalogue of known ids)
    assert {"a", "b"} <= importer.catalog("smoke")[0]
    monkeypatch.delenv(paths.RUN_ENV)
    assert "b" not in importer.catalog("smoke")[0]
    assert list(data.load_frame("smoke", "items")["item_id"]) == ["a"]
    monkeypatch.setenv(paths.RUN_ENV, "../up")
    with pytest.raises(ValueError, match="run name '../up'"):
        data.save_frame(pd.DataFrame({"item_id": ["c"]}), "smoke", "items")


def test_a_named_run_writes_its_human_label_templates_beside_its_data(tmp_path, monkeypatch):
    """Notebooks 05 and 06 write their human-label templates with data.save_template: a named run's
    go to its own data folder, and the default run's template is left as it was."""
    compendium_root(tmp_path)
    monkeypatch.setenv("MEDAUDIT_ROOT", str(tmp_path))
    monkeypatch.delenv(paths.RUN_ENV, raising=False)
    name = "soap_human_labels_template"
    default = data.save_template(pd.DataFrame({"dialog": ["d1"], "label": [""]}), "smoke", name)
    assert default == tmp_path / "outputs" / "smoke" / "data" / f"{name}.csv"
    monkeypatch.setenv(paths.RUN_ENV, "subject-x.123abc")
    named = data.save_template(pd.DataFrame({"dialog": ["d2"], "label": [""]}), "smoke", name)
    assert named == tmp_path / "outputs" / "smoke" / "runs" / "subject-x.123abc" / "data" / f"{name}.csv"
    assert list(pd.read_csv(default)["dialog"]) == ["d1"] and list(pd.read_csv(named)["dialog"]) == ["d2"]
    for nb in ("05_open_ended", "06_soap_audit"):        # the notebooks write them so, not to outputs/<profile>/
        book = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / f"{nb}.ipynb", as_version=4)
        code = "\n".join(c.source for c in book.cells if c.cell_type == "code")
        assert "to_csv(paths.outputs(" not in code and "data.save_template(" in code, nb


def test_side_by_side_matches_rows_on_shared_labels_and_reads_numbers_in_text_cells():
    a = pd.DataFrame({"model": ["m1", "m1"], "condition": ["base", "+homo"], "delta": ["-50.00* (n=3)", "1.5"]})
    b = pd.DataFrame({"model": ["m2", "m2"], "condition": ["+homo", "base"], "delta": ["2.0", "-40.00"]})
    both, how = runs.side_by_side(a, b)
    assert how == "rows matched on condition"
    assert list(both["condition"]) == ["base", "+homo"]          # A's order
    got = both.set_index("condition")
    assert got.loc["base", "delta [B − A]"] == "+10" and got.loc["+homo", "delta [B − A]"] == "+0.5"
    assert got.loc["base", "model [A]"] == "m1" and got.loc["base", "model [B]"] == "m2"
    only = runs.side_by_side(a, b.assign(condition=["x", "y"]))[1]
    assert only == "no label shared by both runs: rows matched by their order"


@pytest.mark.slow  # notebook 01 twice, for real (datasets loaded and validated): a minute or more on 2 cores
def test_notebook_01_rerun_with_fewer_items_keeps_the_default_runs_tables(tmp_path):
    """The real notebook 01 under the smoke profile, then again with -p n_items 5: both runs'
    tables and derived items on disk, the default's as they were, and compare sets them side by side."""
    compendium_root(tmp_path)
    env = _env(tmp_path)
    src = Path(__file__).resolve().parents[1] / "notebooks" / "01_data_prep.ipynb"
    out = tmp_path / "outputs" / "smoke" / "notebooks" / src.name

    def run(*args):
        r = subprocess.run([sys.executable, "-m", "medaudit.runner", str(src), str(out), "--profile", "smoke",
                            "--no-progress-bar", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=900, check=False)
        assert r.returncode == 0, r.stderr[-3000:]

    run()
    base = tmp_path / "outputs" / "smoke"
    before = {p: p.read_bytes() for p in [*(base / "tables").iterdir(), base / "data" / "items.jsonl", out]}
    run("-p", "n_items", "5")
    assert {p: p.read_bytes() for p in before} == before
    (folder,) = (base / "runs").iterdir()
    assert folder.name.startswith("n_items-5.") and (folder / "notebooks" / src.name).is_file()
    assert len(pd.read_json(folder / "data" / "items.jsonl", lines=True)) == 5
    assert len(pd.read_json(base / "data" / "items.jsonl", lines=True)) > 5
    assert {p.name for p in (folder / "tables").iterdir()} == {p.name for p in (base / "tables").iterdir()}
    r = _runs(tmp_path, "compare", "default", folder.name, "--profile", "smoke")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n== 01_") == len({p.stem for p in (base / "tables").glob("*.csv")})


def test_compare_fits_the_terminal_and_writes_csv_and_html(saved_runs, capsys):
    """make compare … TABLE=… printed lines up to 881 characters wide: a table
    too wide for the terminal is printed long, and CSV or HTML has it whole."""
    from medaudit.report import tables

    monkeypatch_run = {"default": [0.5, 0.25], "subject-x.abc123": [0.75, 0.5]}
    import os

    for run, acc in monkeypatch_run.items():
        os.environ[paths.RUN_ENV] = run
        try:
            wide = pd.DataFrame({"model": ["m"] * 2, "condition": ["base", "+homo"], "n": [4, 4],
                                 **{f"a long column name of the table number {i}": acc for i in range(12)},
                                 "note": ["-50.00* (n=3, MDE 70.00) and a long explanation of what it means"] * 2})
            tables.save_table(wide, "04_wide", "smoke", caption="wide")
        finally:
            os.environ.pop(paths.RUN_ENV)
    assert runs.main(["compare", "default", "subject-x.abc123", "--profile", "smoke", "--table", "04_wide",
                      "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 100, max(out.splitlines(), key=len)
    assert "too wide for 100 columns" in out and "| row" in out and "| m · +homo" in out
    assert out.count("| +0.25   |") == 24                      # every row × column's B − A, each number whole
    assert runs.main(["compare", "default", "subject-x.abc123", "--profile", "smoke", "--table", "04_acc",
                      "--width", "200"]) == 0
    assert "too wide" not in capsys.readouterr().out          # a table that fits keeps its layout
    for fmt in ("csv", "html"):
        assert runs.main(["compare", "default", "subject-x.abc123", "--profile", "smoke", "--format", fmt]) == 0
        said = capsys.readouterr().out.strip()
        path = saved_runs / "outputs" / "smoke" / "compare" / f"default_vs_subject-x.abc123.{fmt}"
        assert said.endswith(f"default_vs_subject-x.abc123.{fmt}") and path.is_file()
        text = path.read_text(encoding="utf-8")
        assert "a long column name of the table number 11 [B − A]" in text and "04_acc" in text
    got = pd.read_csv(saved_runs / "outputs" / "smoke" / "compare" / "default_vs_subject-x.abc123.csv")
    assert set(got["table"]) == {"04_acc", "04_wide"}
