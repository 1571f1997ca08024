"""Reading results files: benchmark (``nova bench gemm``), correctness (``nova.bench.correctness``)
and oracle (``nova.bench.oracle``) output, JSON or CSV.

A benchmark JSON is ``{"environment": {...}, "rows": [...]}``; a CSV holds the rows only and takes
its environment from a JSON of the same stem beside it when there is one.  A correctness JSON is
recognised by its ``cases``/``failed`` keys, an oracle JSON by ``"format": "nova-oracle/1"``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

BENCH_REQUIRED = ("M", "N", "K", "dtype", "nova_b2b_us", "cublas_b2b_us")


def device_us(bench: pd.DataFrame) -> pd.Series:
    """Nova's measured device time per call, the quantity the cost model predicts: CUDA-graph replay
    (``nova_graph_us``, results from v0.6 on: the host's issue rate cannot bound it), else the
    back-to-back median of older files."""
    b2b = bench["nova_b2b_us"].astype(float)
    return bench["nova_graph_us"].astype(float).fillna(b2b) if "nova_graph_us" in bench.columns else b2b


class ResultsError(ValueError):
    """A results file that cannot be read or has the wrong shape."""


@dataclass
class Results:
    """Everything the report shows, merged from the given files."""
    bench: pd.DataFrame
    oracle: pd.DataFrame | None = None
    oracle_repeats: list[tuple[str, pd.DataFrame]] = field(default_factory=list)   # later runs: (file, rows)
    correctness: list[dict] = field(default_factory=list)
    environments: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def environment(self) -> dict:
        """The first file's environment, with values that differ between files joined by ' / '."""
        out: dict = {}
        for env in self.environments:
            for k, v in env.items():
                vals = out.setdefault(k, [])
                if v not in vals:
                    vals.append(v)
        return {k: " / ".join(str(x) for x in v) for k, v in out.items()}


def _read_json(path: Path) -> dict:
    """The JSON object of a results file; anything else (unreadable, not JSON, a list) is a ``ResultsError``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ResultsError(f"cannot read results file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: a JSON {type(data).__name__}, not a results file (a JSON object from nova bench "
                           f"gemm, nova.bench.correctness or nova.bench.oracle)")
    return data


def _rows(data: dict, path) -> list[dict]:
    """A results file's ``rows``: a list of objects, else a ``ResultsError``."""
    rows = data.get("rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ResultsError(f"{path}: \"rows\" is not a list of objects")
    return rows


def _environment(data: dict, path) -> dict:
    env = data.get("environment") or {}
    if not isinstance(env, dict):
        raise ResultsError(f"{path}: \"environment\" is not an object")
    return dict(env)


def _sibling_environment(path: Path) -> dict:
    twin = path.with_suffix(".json")
    if twin.exists():
        try:
            env = _read_json(twin).get("environment") or {}
        except ResultsError:                 # not a results object: the CSV goes without an environment
            return {}
        return dict(env) if isinstance(env, dict) else {}
    return {}


def oracle_files(oracle: str | list[str] | None) -> list[str]:
    """``--oracle`` as a list: the first file is the oracle of record, later ones repeat runs."""
    if not oracle:
        return []
    names = oracle.split(",") if isinstance(oracle, str) else list(oracle)
    return [n.strip() for n in names if n.strip()]


def load_results(files: list[str], oracle: str | list[str] | None = None) -> Results:
    """Read every file; benchmark rows are concatenated in file order.  ``oracle``: one oracle
    file, or several (comma-separated or a list): the first is the oracle of record, the others
    repeat runs that the report compares with it (and whose Inductor timings it shows)."""
    frames, res = [], Results(bench=pd.DataFrame())
    for name in files:
        path = Path(name)
        if not path.exists():
            raise ResultsError(f"results file {path} does not exist")
        res.sources.append(str(path))
        if path.suffix == ".csv":
            try:
                frames.append(pd.read_csv(path))
            except (OSError, ValueError) as e:          # pandas' parser and empty-data errors are ValueErrors
                raise ResultsError(f"cannot read results file {path}: {e}") from None
            env = _sibling_environment(path)
        else:
            data = _read_json(path)
            env = _environment(data, path)
            if data.get("format") == "nova-oracle/1":
                res.oracle = oracle_frame(data, path)
            elif "cases" in data and "failed" in data:
                res.correctness.append(data)
            elif "rows" in data:
                frames.append(pd.DataFrame(_rows(data, path)))
            else:
                raise ResultsError(f"{path}: not a benchmark, correctness or oracle results file")
        if env and env not in res.environments:
            res.environments.append(env)
    if frames:
        res.bench = pd.concat(frames, ignore_index=True)
        missing = [c for c in BENCH_REQUIRED if c not in res.bench.columns]
        if missing:
            raise ResultsError(f"benchmark results lack the columns {', '.join(missing)}")
        res.bench["shape"] = [f"{m}x{n}x{k}" for m, n, k in zip(res.bench.M, res.bench.N, res.bench.K)]
    for i, name in enumerate(oracle_files(oracle)):
        data = _read_json(Path(name))
        if data.get("format") != "nova-oracle/1":
            raise ResultsError(f"{name}: not an oracle results file (format nova-oracle/1)")
        if i == 0:
            res.oracle = oracle_frame(data, name)
        else:
            res.oracle_repeats.append((name, oracle_frame(data, name)))
        res.sources.append(str(name))
        env = _environment(data, name)
        if env and env not in res.environments:
            res.environments.append(env)
    return res


def oracle_frame(data: dict, path="oracle results") -> pd.DataFrame:
    """One row per problem (the per-candidate times stay in the JSON)."""
    rows = [{k: v for k, v in r.items() if k != "timed"} for r in _rows(data, path)]
    df = pd.DataFrame(rows)
    if not df.empty:
        missing = [c for c in ("M", "N", "K") if c not in df.columns]
        if missing:
            raise ResultsError(f"{path}: oracle rows lack {', '.join(missing)}")
        df["shape"] = [f"{m}x{n}x{k}" for m, n, k in zip(df.M, df.N, df.K)]
    return df
