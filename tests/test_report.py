"""nova report on a small checked-in results file: plots exist, tables have the right rows, links resolve."""
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nova.cli.main import main
from nova.report import ResultsError, load_results, write_report
from nova.report.plots import stamp_text

DATA = Path(__file__).parent / "data"
BENCH = DATA / "bench_small.json"
# A synthetic oracle file (format only, not a measurement): two problems
ORACLE = {"format": "nova-oracle/1",
          "environment": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda": "13.0", "nova": "0.1.0",
                          "date": "2026-11-30"},
          "rows": [{"M": 1024, "N": 1024, "K": 1024, "dtype": "tf32", "candidates": 3, "correct": 3,
                    "pick_schedule": "A", "pick_us": 30.0, "best_schedule": "B", "best_us": 27.0, "ratio": 0.9,
                    "pick_rank": 2, "timed": []},
                   {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16", "candidates": 3, "correct": 3,
                    "pick_schedule": "C", "pick_us": 430.0, "best_schedule": "C", "best_us": 430.0, "ratio": 1.0,
                    "pick_rank": 1, "timed": []}]}


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key):
                self.targets.append(a[key])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    oracle = tmp / "oracle.json"
    oracle.write_text(json.dumps(ORACLE))
    out = tmp / "out"
    assert main(["report", "--results", str(BENCH), "--oracle", str(oracle), "--out", str(out)]) == 0
    return out


def test_plots_exist(report):
    for name in ("roofline.png", "ratio_vs_cublas.png", "predicted_vs_measured.png", "oracle_ratio.png"):
        data = (report / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name


def test_tables_have_the_right_rows(report):
    rows = json.loads(BENCH.read_text())["rows"]
    md = (report / "README.md").read_text()
    sections = re.split(r"^## ", md, flags=re.M)
    bench_sec = next(s for s in sections if s.startswith("Nova vs cuBLAS"))
    pred_sec = next(s for s in sections if s.startswith("Prediction error"))
    oracle_sec = next(s for s in sections if s.startswith("Oracle"))

    def body_rows(sec):
        return [ln for ln in sec.splitlines() if ln.startswith("| ") and not ln.startswith("| shape")]

    assert len(body_rows(bench_sec)) == len(rows)
    assert len(body_rows(pred_sec)) == len(rows)
    assert len(body_rows(oracle_sec)) == 2
    assert "worst 1024x1024x1024 tf32 0.900" in md
    for r in rows:
        assert f"| {r['M']}x{r['N']}x{r['K']} " in bench_sec
    html = (report / "index.html").read_text()
    body_counts = [t.split("<tbody>")[1].count("<tr>") for t in html.split("<table")[1:]]
    env_rows = len(load_results([str(BENCH)]).environment)
    assert body_counts == [env_rows, len(rows), len(rows), 2]      # environment, bench, prediction, oracle


def test_html_links_resolve(report):
    parser = _Links()
    parser.feed((report / "index.html").read_text())
    assert len(parser.targets) >= 4
    for target in parser.targets:
        assert (report / target).is_file(), target
    for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (report / "README.md").read_text()):
        assert (report / target).is_file(), target


def test_every_figure_is_stamped():
    env = load_results([str(BENCH)]).environment
    text = stamp_text(env, ["tf32", "bf16"])
    assert "NVIDIA H200" in text and "torch 2.11.0+cu130" in text and "bf16, tf32" in text and "2026-11-30" in text


def test_default_directory_and_csv_input(tmp_path, monkeypatch):
    """A CSV takes its environment from the JSON beside it; the default folder is reports/<target>-<date>."""
    import pandas as pd
    d = json.loads(BENCH.read_text())
    pd.DataFrame(d["rows"]).to_csv(tmp_path / "bench.csv", index=False)
    (tmp_path / "bench.json").write_text(json.dumps(d))
    monkeypatch.chdir(tmp_path)
    out = write_report([str(tmp_path / "bench.csv")])
    assert out == Path("reports/h200-2026-11-30") and (out / "roofline.png").is_file()


def test_bad_input_is_one_clear_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(ResultsError, match="not a benchmark"):
        load_results([str(bad)])
    with pytest.raises(ResultsError, match="does not exist"):
        load_results([str(tmp_path / "missing.json")])


def test_repeat_oracle_runs_and_cost_table(tmp_path):
    """A second oracle file is a repeat run: the summary compares it with the run of record on the
    same problems, and its Inductor compile times fill the cost table."""
    first, repeat = tmp_path / "oracle.json", tmp_path / "repeat.json"
    first.write_text(json.dumps(ORACLE))
    rows = [dict(ORACLE["rows"][0], ratio=0.95, config_ms=0.5, tune_s=1.5, inductor_compile_s=12.0)]
    repeat.write_text(json.dumps(dict(ORACLE, rows=rows)))
    out = tmp_path / "out"
    assert main(["report", "--results", str(BENCH), "--oracle", f"{first},{repeat}", "--out", str(out)]) == 0
    md = (out / "README.md").read_text()
    assert f"Oracle repeat run ({repeat}): tf32 0.950 over 1 problems (run of record on the same problems: 0.900)" in md
    cost = next(s for s in re.split(r"^## ", md, flags=re.M) if s.startswith("Cost"))
    body = [ln for ln in cost.splitlines() if ln.startswith("| ") and not ln.startswith("| shape")]
    assert len(body) == 1 and "1024x1024x1024" in body[0] and "12" in body[0]
