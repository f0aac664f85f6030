"""Run many ``python -m medaudit.…`` entry points in one interpreter.

    python cli_child.py ROOT '[["medaudit.publish.site", "--help"], ...]'

Each entry runs as ``python -m`` would run it (``runpy.run_module`` with
``__name__ == "__main__"`` and ``sys.argv`` set), its stdout and stderr
captured and its exit status read from ``SystemExit``; the files it created
under ROOT are listed. One JSON line per entry: {args, code, stdout, stderr,
new}. One interpreter start instead of one per entry: the imports (pandas,
scipy, the library) are paid once.
"""
from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def main() -> None:
    root, entries = Path(sys.argv[1]), json.loads(sys.argv[2])
    for args in entries:
        module, argv = args[0], args[1:]
        before = _files(root)
        out, err = io.StringIO(), io.StringIO()
        code = 0
        old_argv = sys.argv
        sys.argv = [module, *argv]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                err.write(str(e.code))
        except Exception as e:  # noqa: BLE001 - reported to the test
            code, _ = -1, err.write(f"{type(e).__name__}: {e}")
        finally:
            sys.argv = old_argv
        print(json.dumps({"args": args, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                          "new": sorted(_files(root) - before)}), flush=True)


if __name__ == "__main__":
    main()
