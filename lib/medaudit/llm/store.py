"""The response store: SQLite in WAL mode, one row per completion.

Every row is written in its own transaction the moment its completion
arrives, under a key that hashes everything that can change the text
(:func:`medaudit.llm.base.request_key`). A run killed at any point therefore
loses at most the completions in flight; a rerun asks only for the missing
keys. Several processes may write at once: WAL lets readers and one writer
proceed together, ``BEGIN IMMEDIATE`` with a long busy timeout serialises the
writers instead of failing with "database is locked".

The same ``responses`` table receives imported responses (``source`` =
"imported"), so the analyses read one table whatever produced it.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable

import pandas as pd

COLUMNS = {
    "key": "TEXT PRIMARY KEY",
    "source": "TEXT NOT NULL",            # generated | imported
    "backend": "TEXT",
    "model": "TEXT NOT NULL",             # model name as the analyses show it
    "model_id": "TEXT",                   # sha256 of the weights or API model id
    "item_id": "TEXT NOT NULL",
    "condition": "TEXT NOT NULL",
    "prompt_format": "TEXT NOT NULL",     # mcq | mcq_explain | open | soap | judge | …
    "sample": "INTEGER NOT NULL",         # k = 0 … K-1
    "permutation": "TEXT",                # shown letters → original: e.g. "CADB"
    "temperature": "REAL", "top_p": "REAL", "max_tokens": "INTEGER", "seed": "INTEGER",
    "prompt": "TEXT",                     # the messages as JSON
    "response_text": "TEXT",
    "parsed_answer": "TEXT",              # original-letter answer, NULL when unparsed
    "parse_status": "TEXT",               # ok | no_answer | multiple | …
    "answer_logprob": "REAL",
    "letter_logprobs": "TEXT",            # JSON {original letter: logprob}
    "tokens_in": "INTEGER", "tokens_out": "INTEGER",
    "latency_s": "REAL", "retries": "INTEGER", "cost_usd": "REAL",
    "created_at": "REAL",
    # added later: older stores gain them on open (NULL in their old rows)
    "finish_reason": "TEXT",              # stop | length | content_filter | … (why the text ended)
    "served_model": "TEXT",               # the model the server says answered (API responses)
    "settings": "TEXT",                   # JSON: settings actually sent where they differ (reasoning APIs)
    "judged_key": "TEXT",                 # a verdict's row: the key of the response it judges (imported verdicts)
    "top_k": "INTEGER",                   # top-k sampling when on (NULL: off)
    "repetition_penalty": "REAL",         # repetition penalty when on (NULL: off)
}


class StoreWriteError(OSError):
    """The store could not be written (disk full, read-only, I/O error):
    names the file and the cause in words. Rows written before are kept."""


class StoreCorruptError(sqlite3.DatabaseError):
    """The store's file is not a readable SQLite database (a truncated copy,
    another file under its name): names the file and the fix."""


class ResponseStore:
    """The SQLite response store at ``path``: one row per completion under its request
    key, each written in its own transaction (module docstring); a file that is not a readable
    database is a :class:`StoreCorruptError` that says how to start a new one."""
    def __init__(self, path: str | Path, timeout_s: float = 120.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None,
                                    check_same_thread=False)
        try:
            self._open(timeout_s)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and not ("malformed" in str(e) or "not a database" in str(e)):
                raise
            self._con.close()
            shown = self.path.resolve()
            raise StoreCorruptError(
                f"the response store {shown} is not a readable SQLite database ({e}). It only caches answers: "
                f"move it aside (mv {shown} {shown}.corrupt) and rerun; a new store is made and the answers are "
                f"asked, replayed or imported again") from None

    def _open(self, timeout_s: float) -> None:
        self._con.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
        # switching to WAL takes an exclusive lock and SQLite does not always
        # wait for it: two processes creating the file at once can see "locked"
        self._retry(lambda: self._con.execute("PRAGMA journal_mode=WAL"), timeout_s)
        self._con.execute("PRAGMA synchronous=NORMAL")
        cols = ", ".join(f'"{c}" {t}' for c, t in COLUMNS.items())
        self._write(f"CREATE TABLE IF NOT EXISTS responses ({cols})")
        have = {r[1] for r in self._con.execute("PRAGMA table_info(responses)")}
        for c, t in COLUMNS.items():
            if c not in have:      # a store made by an older version: same rows, new columns
                self._write(f'ALTER TABLE responses ADD COLUMN "{c}" {t}')
        self._write("CREATE INDEX IF NOT EXISTS responses_item ON responses(model, item_id, condition)")

    def _retry(self, op, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            try:
                return op()
            except sqlite3.OperationalError as e:
                if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                    raise
                attempt += 1
                time.sleep(min(0.02 * attempt, 0.5))

    # -- writing ---------------------------------------------------------
    def _write(self, sql: str, rows: Iterable[tuple] | None = None) -> None:
        """One immediate transaction; retried while another writer holds the lock.

        When SQLite has already rolled the transaction back itself (a full
        disk does that), no second ROLLBACK is attempted: it would fail with
        "cannot rollback - no transaction is active" and hide the cause. A
        full disk, a read-only file or an I/O error becomes a
        :class:`StoreWriteError` that says so and names the file."""
        for attempt in range(50):
            try:
                self._con.execute("BEGIN IMMEDIATE")
                try:
                    if rows is None:
                        self._con.execute(sql)
                    else:
                        self._con.executemany(sql, rows)
                    self._con.execute("COMMIT")
                    return
                except BaseException:
                    if self._con.in_transaction:
                        try:
                            self._con.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass     # the original error below says what happened
                    raise
            except sqlite3.OperationalError as e:
                msg = str(e)
                if "locked" not in msg and "busy" not in msg:
                    raise self._explain(e) from e
                time.sleep(min(0.05 * (attempt + 1), 1.0))
        raise sqlite3.OperationalError(f"{self.path}: database stayed locked")

    def _explain(self, e: sqlite3.OperationalError) -> Exception:
        msg = str(e)
        where = f"{self.path.resolve()} (on the file system of {self.path.resolve().parent})"
        if "full" in msg:
            return StoreWriteError(f"the disk is full: cannot write the response store {where}; free space "
                                   f"there and rerun (answers stored before are kept, the run resumes)")
        if "readonly" in msg or "read-only" in msg:
            return StoreWriteError(f"the response store {where} is read-only: {msg}")
        if "disk I/O" in msg:
            return StoreWriteError(f"disk I/O error writing the response store {where}: {msg}")
        return e

    def put_many(self, rows: list[dict]) -> int:
        """Insert rows (dicts with COLUMNS keys); existing keys are left as
        they are. Returns the number of rows given."""
        if not rows:
            return 0
        now = time.time()
        names = list(COLUMNS)
        values = []
        for r in rows:
            r = {**r, "created_at": r.get("created_at") or now}
            for c in ("letter_logprobs", "settings"):
                if isinstance(r.get(c), dict):
                    r[c] = json.dumps(r[c], sort_keys=True)
            values.append(tuple(r.get(c) for c in names))
        placeholders = ", ".join("?" for _ in names)
        quoted = ", ".join(f'"{c}"' for c in names)
        self._write(f"INSERT OR IGNORE INTO responses ({quoted}) VALUES ({placeholders})", values)
        return len(rows)

    def put(self, row: dict) -> None:
        """Insert one row (:meth:`put_many`); an existing key is left as it is."""
        self.put_many([row])

    def delete_imported(self, model: str, prompt_formats: Iterable[str] | None = None) -> int:
        """Delete ``model``'s imported rows (only those in ``prompt_formats``
        when given: one mitigation arm) and the imported verdicts that judge
        them (their ``judged_key``); returns how many rows went. Generated
        rows are never deleted here."""
        fmts = list(prompt_formats) if prompt_formats is not None else None
        only = f" AND prompt_format IN ({','.join('?' * len(fmts))})" if fmts is not None else ""
        where = (f"source = 'imported' AND ((model = ?{only}) OR judged_key IN "
                 f"(SELECT key FROM responses WHERE model = ? AND source = 'imported'{only}))")
        args = (model, *(fmts or ()), model, *(fmts or ()))
        n = self.query(f"SELECT COUNT(*) FROM responses WHERE {where}", args)[0][0]
        self._write(f"DELETE FROM responses WHERE {where}", [args])
        return int(n)

    # -- reading ---------------------------------------------------------
    def has(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` are stored."""
        keys = list(keys)
        found: set[str] = set()
        for i in range(0, len(keys), 900):
            chunk = keys[i:i + 900]
            q = f"SELECT key FROM responses WHERE key IN ({','.join('?' * len(chunk))})"
            found.update(k for (k,) in self._con.execute(q, chunk))
        return found

    def count(self) -> int:
        """The number of rows in the store."""
        return self._con.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """The rows of one read-only SQL statement over the store (a column
        selection the frame methods do not give without reading every column)."""
        return self._con.execute(sql, params).fetchall()

    def count_answers(self, model: str, prompt_formats: Iterable[str], source: str) -> int:
        """How many rows of ``source`` (generated | imported) the store holds
        for the model name ``model`` in any of ``prompt_formats``."""
        formats = list(prompt_formats)
        if not formats:
            return 0
        q = (f"SELECT COUNT(*) FROM responses WHERE source = ? AND model = ? "
             f"AND prompt_format IN ({','.join('?' * len(formats))})")
        return self._con.execute(q, (source, model, *formats)).fetchone()[0]

    def frame(self, where: str = "", params: tuple = (), conditions: Iterable[str] | None = None) -> pd.DataFrame:
        """The responses as a long table (``letter_logprobs`` decoded), in the
        order they were stored; only those of ``conditions`` where given (a
        study's own, read without the rest of a large store)."""
        if conditions is not None:
            conds = list(dict.fromkeys(conditions))
            where = (f"{where} AND " if where else "WHERE ") + f"condition IN ({','.join('?' * len(conds))})"
            params = (*params, *conds)
        df = pd.read_sql_query(f"SELECT * FROM responses {where}", self._con, params=params)
        # a TEXT column with NULLs reads back as NaN (pandas >= 3 str dtype), which is truthy
        df["letter_logprobs"] = df["letter_logprobs"].map(
            lambda s: json.loads(s) if isinstance(s, str) and s else None).astype(object)
        return df

    def where_in(self, column: str, values: Iterable[str], where: str = "", params: tuple = ()) -> pd.DataFrame:
        """The rows whose ``column`` is one of ``values`` (and, if given, that
        meet the SQL condition ``where`` with ``params``), in no set order;
        asked in chunks, under SQLite's limit on bound parameters."""
        if column not in COLUMNS:
            raise ValueError(f"no column {column!r} in the response store")
        values = list(dict.fromkeys(values))
        cond = f"{where} AND " if where else ""
        parts = [self.frame(f'WHERE {cond}"{column}" IN ({",".join("?" * len(chunk))})', (*params, *chunk))
                 for chunk in (values[i:i + 500] for i in range(0, len(values), 500))]
        return pd.concat(parts, ignore_index=True) if parts else self.frame("WHERE 0")

    def by_keys(self, keys: Iterable[str]) -> pd.DataFrame:
        """The rows of these keys (in no set order; absent keys are absent)."""
        return self.where_in("key", keys)

    def close(self) -> None:
        """Close the connection."""
        self._con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


RUN_SETTINGS = ("backend", "model_id", "temperature", "top_p", "max_tokens")
IDENTITY = ("model", "prompt_format", "item_id", "condition", "sample", "judged_key")


def current(frame: pd.DataFrame, prefer_keys: Iterable[str] = ()) -> pd.DataFrame:
    """The rows an analysis should read when the store holds several runs.

    The store keeps every answer ever drawn, so rerunning a notebook with a
    changed setting leaves the older answers beside the new ones. Per model
    name and prompt format:

    * if any row's key is in ``prefer_keys`` (the notebook's own plan),
      exactly those rows;
    * otherwise the rows of the most recent run — rows sharing backend,
      model id and sampling settings (temperature, top-p, max tokens) — and,
      where an answer (item, condition, sample) was stored more than once in
      that run, its newest row.

    Imported responses (no settings) form a run of their own.
    """
    if frame.empty:
        return frame
    prefer = set(prefer_keys)
    f = frame.assign(_pref=frame["key"].isin(prefer), _t=frame["created_at"].fillna(0.0))
    parts = []
    ident = [c for c in IDENTITY if c in f.columns]
    for _, g in f.groupby(["model", "prompt_format"], sort=False, dropna=False):
        if g["_pref"].any():
            parts.append(g[g["_pref"]])
            continue
        runs = g.groupby(list(RUN_SETTINGS), dropna=False, sort=False)["_t"].transform("max")
        last = g[runs == runs.max()]
        parts.append(last.sort_values("_t").drop_duplicates(ident, keep="last"))
    out = pd.concat(parts).sort_index()
    return out.drop(columns=["_pref", "_t"]).reset_index(drop=True)
