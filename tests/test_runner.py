"""The notebook runner (python -m medaudit.runner), run as make runs it: a
real papermill execution of small notebooks written into a temporary
compendium (MEDAUDIT_ROOT; params/ copied from the checkout)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from medaudit import runner
from support.sandbox import compendium_root

ROOT = Path(__file__).resolve().parents[1]
SMOKE = yaml.safe_load((ROOT / "params" / "smoke.yaml").read_text())
PAPERMILL_WARNING = "Passed unknown parameter"


def _notebook(path: Path, parameters: str, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]}),
                *(nbformat.v4.new_code_cell(c) for c in cells)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture()
def root(tmp_path):
    compendium_root(tmp_path)
    return tmp_path


def _run(root: Path, nb: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEDAUDIT_ROOT": str(root)}
    out = root / "outputs" / "smoke" / "notebooks" / nb.name
    return subprocess.run([sys.executable, "-m", "medaudit.runner", str(nb), str(out), "--profile", "smoke",
                           "--no-progress-bar", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def _injected(nb_path: Path) -> dict:
    import ast

    cell = next(c for c in nbformat.read(nb_path, as_version=4).cells
                if "injected-parameters" in c.metadata.get("tags", []))
    return {t.id: ast.literal_eval(n.value) for n in ast.parse(cell.source).body for t in n.targets}


SEEN = ('import json\n'
        'json.dump({"profile": profile, "k_samples": k_samples, "infer_conditions": infer_conditions,\n'
        '           "subject": subject}, open("seen.json", "w"))')


def test_the_notebook_gets_only_what_it_declares(root):
    nb = _notebook(root / "notebooks" / "10_tiny.ipynb",
                   'profile = "x"\nk_samples = 1\ninfer_conditions = []\nsubject = {}', SEEN)
    r = _run(root, nb, "-p", "k_samples", "5", "-y", "{infer_conditions: [base, +homo]}")
    assert r.returncode == 0, r.stderr
    assert PAPERMILL_WARNING not in r.stdout + r.stderr
    assert "without encryption" not in r.stderr          # the kernel's TCP warning says nothing to act on
    # overrides that change answers make a run of their own (medaudit.runs; tests/test_runs.py)
    out, = (root / "outputs" / "smoke" / "runs").glob("*/notebooks/10_tiny.ipynb")
    assert not (root / "outputs" / "smoke" / "notebooks").exists()
    # exactly the four declared names, with the profile's values and the overrides
    assert _injected(out) == {"profile": "smoke", "k_samples": 5, "infer_conditions": ["base", "+homo"],
                              "subject": SMOKE["subject"]}
    seen = json.loads((root / "notebooks" / "seen.json").read_text())   # the kernel ran in notebooks/
    assert seen["k_samples"] == 5 and seen["subject"] == SMOKE["subject"]
    assert [p.name for p in out.parent.iterdir()] == ["10_tiny.ipynb"]    # no temporary file left


def test_a_failed_notebook_is_kept_and_its_error_printed(root):
    nb = _notebook(root / "notebooks" / "11_fails.ipynb", 'profile = "x"',
                   'print("before the error")', 'raise ValueError(f"boom under {profile}")')
    out = root / "outputs" / "smoke" / "notebooks" / "11_fails.ipynb"
    out.parent.mkdir(parents=True)
    out.write_text("an older successful run")
    r = _run(root, nb)
    assert r.returncode == 1
    assert "11_fails.ipynb failed" in r.stderr
    assert "ValueError: boom under smoke" in r.stderr        # ename and evalue
    assert 'raise ValueError(f"boom under {profile}")' in r.stderr   # the traceback's last lines
    kept = root / "outputs" / "smoke" / "failed" / "11_fails.ipynb"
    assert kept.is_file()
    assert str(os.path.relpath(kept, root)) in r.stderr
    errors = [o for c in nbformat.read(kept, as_version=4).cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors and errors[0]["evalue"] == "boom under smoke"
    # the previous good notebook is kept as it was, never replaced by the failed run
    assert out.read_text() == "an older successful run"
    assert "the previous outputs/smoke/notebooks/11_fails.ipynb and its tables and figures are kept" in r.stderr
    assert [p.name for p in out.parent.iterdir()] == ["11_fails.ipynb"]    # and no temporary file

    # fixed: the next run writes the output and drops the failed copy
    _notebook(nb, 'profile = "x"', 'print("fine")')
    r = _run(root, nb)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and not kept.exists()


SAVES = ('import pandas as pd\nfrom medaudit.report import tables\n'
         'tables.save_table(pd.DataFrame({"run": [RUN]}), "15_t", profile, caption="which run")')


def _last_good(root: Path, name: str) -> tuple[Path, Path]:
    """What a successful run left: its notebook and its table 15_t (run 1)."""
    out = root / "outputs" / "smoke" / "notebooks" / name
    table = root / "outputs" / "smoke" / "tables" / "15_t.csv"
    for p, text in ((out, "the last good run"), (table, "run\n1\n")):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return out, table


@pytest.mark.slow  # two notebook runs (a kernel each): 20 s to a minute on 2 shared cores
def test_a_failed_run_keeps_the_last_good_notebook_and_its_tables(root):
    """A run that saved its table and then failed (here
    in its last cell) replaced nothing: the last good notebook and its
    table stay; the failed run's table is dropped with it. A good run then
    replaces both."""
    out, table = _last_good(root, "15_keeps.ipynb")
    nb = _notebook(root / "notebooks" / "15_keeps.ipynb", 'profile = "x"', SAVES.replace("RUN", "2"),
                   'raise RuntimeError("late failure")')
    r = _run(root, nb)
    assert r.returncode == 1
    assert out.read_text() == "the last good run" and table.read_text() == "run\n1\n"
    assert not (root / "outputs" / "smoke" / ".staging").exists()
    _notebook(nb, 'profile = "x"', SAVES.replace("RUN", "3"))
    r = _run(root, nb)
    assert r.returncode == 0, r.stderr
    assert table.read_text() == "run\n3\n" and out.read_text() != "the last good run"
    assert not (root / "outputs" / "smoke" / ".staging").exists()


@pytest.mark.parametrize("where", ["tables", "outputs"])
def test_a_read_only_outputs_folder_is_one_line_and_keeps_the_last_good_notebook(root, where):
    """A read-only tables/ (or outputs/<profile>/) folder read as
    a 49-line double traceback and removed the last good notebook. Root
    writes through chmod, so the read-only folder is /sys/kernel (sysfs: no
    one creates files there) put in place by a symlink."""
    unwritable = Path("/sys/kernel")
    if not unwritable.is_dir():
        pytest.skip("no /sys/kernel on this system")
    out, table = _last_good(root, "17_ro.ipynb")
    if where == "tables":
        shutil.rmtree(table.parent)
        table.parent.symlink_to(unwritable)
    else:
        (root / "outputs" / "smoke").rename(root / "outputs" / "smoke-real")
        (root / "outputs" / "smoke").symlink_to(unwritable)
    nb = _notebook(root / "notebooks" / "17_ro.ipynb", 'profile = "x"', SAVES.replace("RUN", "2"))
    r = _run(root, nb)
    assert r.returncode == 1
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) <= 2 and "Traceback" not in r.stderr, r.stderr
    assert "nothing was run" in lines[0] and lines[1].startswith("cannot write the outputs to outputs/smoke")
    if where == "tables":
        assert out.read_text() == "the last good run"


def test_an_override_the_notebook_does_not_take_is_an_error_naming_what_it_takes(root, monkeypatch):
    """`-p n_items 50` to a notebook without n_items ran and
    changed nothing (rc 0). Now: exit 2 and the parameters it takes; make
    all (one ARGS for every notebook) passes --skip-undeclared."""
    nb = _notebook(root / "notebooks" / "18_takes.ipynb", 'profile = "x"\nk_samples = 1\nseed = 0',
                   'open("ran.txt", "w").write("ran")')
    r = _run(root, nb, "-p", "n_items", "50")
    assert r.returncode == 2
    assert "n_items (from -p n_items 50): 18_takes.ipynb does not take this parameter" in r.stderr
    assert "(18_takes.ipynb takes: k_samples, seed)" in r.stderr
    assert not (root / "notebooks" / "ran.txt").exists()
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    # a typo suggests only what this notebook takes (n_items is a profile key, but not this notebook's)
    with pytest.raises(runner.config.ConfigError) as e:
        runner.prepare(nb, "smoke", [("-p", ["n_itemz", "5"])])
    assert "n_itemz (from -p n_itemz 5): 18_takes.ipynb does not take this parameter" in str(e.value)
    assert "n_items" not in str(e.value).replace("n_itemz", "") and "(18_takes.ipynb takes: k_samples, seed)" \
        in str(e.value)
    with pytest.raises(runner.config.ConfigError, match=r"did you mean 'k_samples'\?"):
        runner.prepare(nb, "smoke", [("-p", ["k_sample", "5"])])
    got = runner.prepare(nb, "smoke", [("-p", ["n_items", "50"]), ("-p", ["k_samples", "4"])], skip_undeclared=True)
    assert got == {"profile": "smoke", "k_samples": 4, "seed": SMOKE["seed"]}
    # a redefinition of a model is for the roles that name it, never "not taken"
    spec = "{models: {embedded: {name: x, backend: openai, model: m}}}"
    assert runner.prepare(nb, "smoke", [("-y", [spec])])["k_samples"] == SMOKE["k_samples"]


def test_invalid_parameters_exit_2_before_anything_runs(root):
    nb = _notebook(root / "notebooks" / "12_marker.ipynb", 'profile = "x"\nk_samples = 1',
                   'open("ran.txt", "w").write("ran")')
    out = root / "outputs" / "smoke" / "notebooks" / "12_marker.ipynb"
    out.parent.mkdir(parents=True)
    out.write_text("an older successful run")
    r = _run(root, nb, "-p", "k_sample", "10", "-p", "infer_items", "0", "-p", "k_samples", "0")
    assert r.returncode == 2
    assert ("k_sample (from -p k_sample 10): 12_marker.ipynb does not take this parameter, so it would change "
            "nothing; did you mean 'k_samples'?") in r.stderr
    assert "infer_items (from -p infer_items 0): 12_marker.ipynb does not take" in r.stderr
    assert "k_samples = 0 (from -p k_samples 0)" in r.stderr          # the schema's check of what it takes
    r = _run(root, nb, "-p", "k_sample", "10", "--skip-undeclared")    # make all: every key of the schema
    assert r.returncode == 2 and "k_sample = 10 (from -p k_sample 10): unknown key; did you mean 'k_samples'?" \
        in r.stderr
    assert not (root / "notebooks" / "ran.txt").exists()
    assert out.read_text() == "an older successful run"         # nothing ran, nothing was replaced
    assert not (root / "outputs" / "smoke" / "failed").exists()


def test_an_unknown_profile_exits_2_listing_the_profiles(root):
    nb = _notebook(root / "notebooks" / "13_p.ipynb", 'profile = "x"')
    env = {**os.environ, "MEDAUDIT_ROOT": str(root)}
    r = subprocess.run([sys.executable, "-m", "medaudit.runner", str(nb), str(root / "o.ipynb"), "--profile",
                        "smoek"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2
    assert ("unknown profile 'smoek'; did you mean 'smoke'? "
            "(profiles in params/: default, gpubench, paper, smoke, validation-paper, validation)") in r.stderr


def test_a_notebook_parameter_unknown_to_the_schema_is_an_error(root, monkeypatch):
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    nb = _notebook(root / "notebooks" / "14_new.ipynb", 'profile = "x"\nbatch_size = 4')
    with pytest.raises(runner.config.ConfigError, match=r"declares \['batch_size'\]"):
        runner.prepare(nb, "smoke", [])


def test_overrides_are_read_as_papermill_reads_them_in_order(tmp_path):
    f = tmp_path / "o.yaml"
    f.write_text("k_samples: 7\njudge_b: null\n")
    values, sources = runner.collect_overrides([
        ("-p", ["n_items", "None"]), ("-p", ["k_samples", "4"]), ("-p", ["temperature", "0.5"]),
        ("-p", ["human_labels", "labels.csv"]), ("-r", ["seed", "12"]),
        ("-p", ["infer_conditions", "[base, +homo]"]), ("-f", [str(f)]),
        ("-p", ["judge_b", "{name: g, backend: openai, model: gpt-4.1-mini}"]),
    ])
    assert values == {"n_items": None, "k_samples": 7, "temperature": 0.5, "human_labels": "labels.csv",
                      "seed": "12", "infer_conditions": ["base", "+homo"],
                      "judge_b": {"name": "g", "backend": "openai", "model": "gpt-4.1-mini"}}
    assert sources["k_samples"] == f"-f {f}" and sources["seed"] == "-r seed 12"
    with pytest.raises(runner.config.ConfigError, match="must be a YAML mapping"):
        runner.collect_overrides([("-y", ["[1, 2]"])])
    with pytest.raises(runner.config.ConfigError, match="written twice"):
        runner.collect_overrides([("-y", ["{a: 1, a: 2}"])])
    with pytest.raises(runner.config.ConfigError, match=r"-p infer_conditions \[base:1:6: not valid YAML"):
        runner.collect_overrides([("-p", ["infer_conditions", "[base"])])
    with pytest.raises(runner.config.ConfigError, match="cannot read the file"):
        runner.collect_overrides([("-f", [str(tmp_path / "missing.yaml")])])


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists() or not shutil.which("make"),
                    reason="needs the project's .venv and make")
def test_make_nb_refuses_a_typo_at_once():
    """The documented make interface; -o keeps make from rebuilding the venv."""
    r = subprocess.run(["make", "-o", ".venv/.installed", "nb", "NB=03", "PROFILE=smoke", "ARGS=-p k_sample 10"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "did you mean 'k_samples'?" in r.stderr
    assert PAPERMILL_WARNING not in r.stdout + r.stderr


def test_models_are_named_and_redefined_from_the_command_line(root, monkeypatch):
    """-p role NAME names an entry of `models`; -y/-f/-p models redefine entries
    one by one (a later one wins per entry); the notebook gets full specs and
    never `models` itself."""
    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    tiny = "{name: smollm2-135m, backend: llamacpp, model: smollm2-135m, options: {n_threads: 1}}"
    items = [("-y", [f"{{models: {{tiny: &t {tiny}, embedded: *t}}}}"]),   # a YAML alias, as in the profiles
             ("-p", ["models", "{other: {name: o, backend: openai, model: gpt-4.1-mini}}"]),
             ("-p", ["judge", "embedded_8k"])]
    values, sources = runner.collect_overrides(items)
    assert set(values["models"]) == {"tiny", "embedded", "other"}
    assert sources["models.embedded"].startswith("-y ") and sources["models.other"].startswith("-p models")
    nb = _notebook(root / "notebooks" / "15_roles.ipynb", 'profile = "x"\nsubject = {}\njudge = {}\nsoap_models = []')
    got = runner.prepare(nb, "smoke", items)
    spec = {"name": "smollm2-135m", "backend": "llamacpp", "model": "smollm2-135m", "options": {"n_threads": 1}}
    assert got == {"profile": "smoke", "subject": spec, "judge": SMOKE["models"]["embedded_8k"],
                   "soap_models": [SMOKE["models"]["embedded_8k"]]}
    with pytest.raises(runner.config.ConfigError, match=r"judge = 'embeded' \(from -p judge embeded\).*"
                                                        r"did you mean 'embedded'"):
        runner.prepare(nb, "smoke", [("-p", ["judge", "embeded"])])
    declares = _notebook(root / "notebooks" / "16_models.ipynb", 'profile = "x"\nmodels = {}')
    with pytest.raises(runner.config.ConfigError, match=r"declares \['models'\]: a profile key that no notebook"):
        runner.prepare(declares, "smoke", [])


SAVES_DATA = ('import pandas as pd\nfrom medaudit.prep import data\n'
              'data.save_frame(pd.DataFrame({"run": [RUN]}), profile, "15_d")\n'
              'assert data.load_frame(profile, "15_d")["run"].tolist() == [RUN]   # read back within the run')


@pytest.mark.slow  # two notebook runs (a kernel each): 20 s to a minute on 2 shared cores
def test_a_failed_run_keeps_the_last_good_derived_data(root):
    """A run that wrote a derived table (data.save_frame, as 01 and 02 write
    items and variants) and then failed left the last good file as it was;
    within the run the notebook read its own new rows; a good run replaces it."""
    good = root / "outputs" / "smoke" / "data" / "15_d.jsonl"
    good.parent.mkdir(parents=True, exist_ok=True)
    good.write_text('{"run":1}\n')
    nb = _notebook(root / "notebooks" / "15_data.ipynb", 'profile = "x"', SAVES_DATA.replace("RUN", "2"),
                   'raise RuntimeError("late failure")')
    r = _run(root, nb)
    assert r.returncode == 1 and "late failure" in r.stderr
    assert good.read_text() == '{"run":1}\n'
    assert not (root / "outputs" / "smoke" / ".staging").exists()
    _notebook(nb, 'profile = "x"', SAVES_DATA.replace("RUN", "3"))
    r = _run(root, nb)
    assert r.returncode == 0, r.stderr
    assert good.read_text() == '{"run":3}\n'


def _wait(cond, timeout: float, what: str):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow  # starts a kernel and kills its runner: 10-40 s on 2 shared cores
def test_sigterm_records_the_run_interrupted_and_leaves_no_staging(root, monkeypatch):
    """``kill`` (SIGTERM) used to end the runner at once: run.json and make runs
    said "running" forever, and .NN.running-<pid>.ipynb and .staging/NN-<pid>/
    stayed, even after a later good run. Now it stops as Ctrl-C does; and what a
    SIGKILL leaves is listed as interrupted and removed by the next run."""
    import signal

    from medaudit import runs

    monkeypatch.setenv("MEDAUDIT_ROOT", str(root))
    nb = _notebook(root / "notebooks" / "16_slow.ipynb", 'profile = "x"',
                   'import os, pathlib, time\npathlib.Path("kernel.pid").write_text(str(os.getpid()))\n'
                   'time.sleep(300)')
    out = root / "outputs" / "smoke" / "notebooks" / "16_slow.ipynb"
    env = {**os.environ, "MEDAUDIT_ROOT": str(root)}
    cmd = [sys.executable, "-m", "medaudit.runner", str(nb), str(out), "--profile", "smoke", "--no-progress-bar"]
    staging = root / "outputs" / "smoke" / ".staging"
    kernel_pid = root / "notebooks" / "kernel.pid"

    def started(p):
        _wait(lambda: kernel_pid.is_file() and kernel_pid.read_text().strip(), 240, "the kernel to run the cell")
        m = runs.read_manifest("smoke", "default")["notebooks"]["16_slow"]
        assert m["status"] == "running" and m["pid"] == p.pid
        assert any(staging.glob(f"16_slow-{p.pid}")) and any(out.parent.glob(f".16_slow.running-{p.pid}.ipynb"))
        return int(kernel_pid.read_text())

    p = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        kernel = started(p)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert "interrupted (SIGTERM)" in err
    assert runs.read_manifest("smoke", "default")["notebooks"]["16_slow"]["status"] == "interrupted"
    assert "16 interrupted" in runs.listing("smoke")["notebooks"].iloc[0]
    assert not staging.exists() and not list(out.parent.glob(".16_slow.running-*"))
    _wait(lambda: not runner._alive(kernel), 30, "the kernel to be shut down")
    assert (root / "outputs" / "smoke" / "failed" / "16_slow.ipynb").is_file()

    # SIGKILL cannot be caught: what it leaves reads "interrupted", and the next run removes it
    kernel_pid.unlink()
    p = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        kernel = started(p)
        p.kill()
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(kernel, signal.SIGKILL)           # the orphaned kernel of the killed runner, which we started
    assert "16 interrupted" in runs.listing("smoke")["notebooks"].iloc[0]
    assert list(out.parent.glob(f".16_slow.running-{p.pid}.ipynb")) and (staging / f"16_slow-{p.pid}").is_dir()
    _notebook(nb, 'profile = "x"', 'print("fine")')
    r = _run(root, nb)
    assert r.returncode == 0, r.stderr
    assert not staging.exists() and not list(out.parent.glob(".16_slow.running-*"))
    assert runs.read_manifest("smoke", "default")["notebooks"]["16_slow"]["status"] == "ok"
