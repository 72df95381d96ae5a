"""The HTML report as a file: self-contained, escaped, with the summary, charts, result files
and the embedded per-example data (the browser test opens it for real)."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest
from report_runs import ARG_PAYLOAD, ID_PAYLOAD, IMG_PAYLOAD, SCRIPT_PAYLOAD, make_runs

from toolgym import cli
from toolgym.views.report import build_report, success_series
from toolgym.views.report.payload import clip, script_json
from toolgym.views.report.tables import find_result_files, render_json
from toolgym.views.rundata import load_runs

JMWOZ_ROWS = [
    {
        "評価項目": "全体",
        "総データ数": 100,
        "評価対象数": 100,
        "正解数": 61,
        "不正解数": 39,
        "出力ミスのデータ数": 2,
        "全体の正答率(%)": 61.0,
    },
    {
        "評価項目": "ツール名",
        "総データ数": 100,
        "評価対象数": 80,
        "正解数": 70,
        "不正解数": 10,
        "出力ミスのデータ数": 2,
        "全体の正答率(%)": 87.5,
    },
    {
        "評価項目": "引数",
        "総データ数": 100,
        "評価対象数": 70,
        "正解数": 55,
        "不正解数": 15,
        "出力ミスのデータ数": 2,
        "全体の正答率(%)": 78.57,
    },
    {
        "評価項目": "呼び出し不要",
        "総データ数": 100,
        "評価対象数": 20,
        "正解数": 18,
        "不正解数": 2,
        "出力ミスのデータ数": 0,
        "全体の正答率(%)": 90.0,
    },
    {
        "評価項目": SCRIPT_PAYLOAD,
        "総データ数": 100,
        "評価対象数": 1,
        "正解数": 0,
        "不正解数": 1,
        "出力ミスのデータ数": 0,
        "全体の正答率(%)": 0.0,
    },
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    dirs = make_runs(tmp_path_factory.mktemp("runs"))
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in JMWOZ_ROWS)
    (dirs["scripted"] / "score_tiny.json").write_text(lines, encoding="utf-8")
    diagnostics = {
        "per_tool": {
            "Search_hotel": {"precision": 0.5, "recall": 0.25},
            "Booking_taxi": {"precision": 1.0, "recall": 1.0},
        },
        "lenient": {"全体の正答率(%)": 64.0, "note": IMG_PAYLOAD},
    }
    (dirs["scripted"] / "diagnostics_tiny.json").write_text(
        json.dumps(diagnostics, ensure_ascii=False), encoding="utf-8"
    )
    (dirs["oracle"] / "score_broken.json").write_text('{"a": 1}\n{oops\n', encoding="utf-8")
    return dirs


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    result = build_report(
        [runs["oracle"], runs["scripted"], runs["oracle26"]], out / "r.html", png_dir=out / "png"
    )
    return result, result.path.read_text(encoding="utf-8")


def embedded(html: str, element_id: str):
    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.DOTALL)
    assert match, element_id
    return json.loads(match.group(1))


def test_script_json_cannot_close_its_element_and_round_trips():
    value = {"t": "</script><!-- <script>x</script> & \u2028 ' \"", "n": [1.5, float("nan")]}
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"t": value["t"], "n": [1.5, None]}


def test_clip_says_how_much_was_left_out():
    assert clip("abc", 5) == "abc"
    assert clip("abcdefgh", 3) == "abc… [5 more characters not included in the report]"


def test_report_is_self_contained_and_escaped(report):
    result, html = report
    assert result.n_runs == 3 and result.n_trajectories == 20
    assert html.count("<script") == 3  # two JSON data blocks and the viewer
    for payload in (SCRIPT_PAYLOAD, IMG_PAYLOAD, ID_PAYLOAD, ARG_PAYLOAD, "<img src=x"):
        assert payload not in html
    assert not re.findall(r'(?:src|href)="(?!data:|#)', html)  # nothing to fetch
    assert "http://" not in html and "https://" not in html
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src &#x27;none&#x27;" in csp
    viewer = re.search(r"<script>(.*)</script>", html, re.DOTALL).group(1)
    digest = base64.b64encode(hashlib.sha256(viewer.encode()).digest()).decode()
    assert f"sha256-{digest}" in csp  # only the viewer may run
    assert not re.search(r"\.(innerHTML|outerHTML|insertAdjacentHTML)|document\.write|eval\(", viewer)


def test_embedded_data_holds_every_trajectory_verbatim(report, runs):
    _, html = report
    index = embedded(html, "toolgym-index")
    traces = embedded(html, "toolgym-traces")
    assert len(index["items"]) == len(traces["traces"]) == 20
    assert index["graders"] == ["final_state", "steps_exact", "step_ratio"]
    assert index["rules"] == ["≥ 1", "≥ 1", "= 1"]  # the graders' declared pass rules
    assert index["runs"][1]["passFail"] == ["final_state", "steps_exact", "step_ratio"]
    loaded = load_runs([runs["oracle"], runs["scripted"], runs["oracle26"]])
    expected_ids = [t.example_id for r in loaded for t in r.trajectories]
    assert [item[1] for item in index["items"]] == expected_ids
    i = next(k for k, item in enumerate(index["items"]) if item[1] == ID_PAYLOAD and item[0] == 1)
    trace = traces["traces"][i]
    assert trace["fa"] == f"Typed it. {SCRIPT_PAYLOAD} {IMG_PAYLOAD}"
    assert trace["dv"][0] == 1 and "expected type_letter" in trace["dv"][1]
    assert index["items"][i][6] == 1 and index["items"][i][7] == 1  # failed; diverges at call 2
    # pass flags follow each grader's pass rule: step_ratio passes only at exactly 1
    for item in index["items"]:
        for g, value in item[8].items():
            if value is not None:
                passed = value == 1.0  # every rule here is "≥ 1" on 0/1 values or "= 1"
                assert item[9][g] == int(passed), (item[1], index["graders"][int(g)], value)
        completed = item[3] == "completed"
        assert item[6] == int(not completed or 0 in item[9].values())
    assert [s[3] for s in trace["sc"]] == [int(s[1] == 1.0) for s in trace["sc"]]
    assert traces["examples"][trace["x"]]["exp"] == [
        ["type_letter", {"letter": "a"}],
        ["type_letter", {"letter": "b"}],
    ]
    # both typewriter_1 runs share the dataset: its examples are stored once
    assert len(traces["examples"]) == 7 + 6
    cat = next(k for k, item in enumerate(index["items"]) if item[1] == "tw-2-cat" and item[0] == 1)
    tool_steps = [s for s in traces["traces"][cat]["s"] if "t" in s]
    assert tool_steps[1]["a"] == {"letter": ARG_PAYLOAD} and tool_steps[1]["err"] == 1
    error = next(k for k, item in enumerate(index["items"]) if item[3] == "error")
    assert traces["traces"][error]["e"].startswith("IndexError") and traces["traces"][error]["sc"] == []


def test_summary_charts_and_pngs(report):
    result, html = report
    assert "0.500 ± 0.204" in html and "0.333 ± 0.192" in html
    assert result.charts == [
        "final_state: mean ± standard error",
        "steps_exact: mean ± standard error",
        "step_ratio: mean ± standard error",
        "typewriter_1: success by number of expected steps",
        "typewriter_26: success by number of expected steps",
    ]
    images = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert len(images) == 5
    svg = base64.b64decode(images[0]).decode()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "final_state" in svg
    assert len(result.png_files) == 5
    for path in result.png_files:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_success_series_counts_by_expected_steps(runs):
    loaded = load_runs([runs["scripted"]])
    (series,) = success_series(loaded)["typewriter_1"]
    assert series.grader == "final_state"
    run = loaded[0]
    counts: dict[int, list[int]] = {}
    for traj in run.trajectories:
        score = next((s for s in run.scores_of(traj) if s.grader == "final_state"), None)
        if score is not None:
            slot = counts.setdefault(len(run.examples[traj.example_id].expected_steps), [0, 0])
            slot[0] += score.value == 1.0
            slot[1] += 1
    assert series.counts == {k: tuple(v) for k, v in counts.items()}
    assert sum(n for _, n in series.counts.values()) == 6  # the error trajectory is not graded
    assert success_series(loaded, "no_such_grader") == {}


def test_result_files_render_generically_and_escaped(report, runs):
    _, html = report
    section = html[html.index('<section id="jmultiwoz">') :]
    section = section[: section.index("</section>")]
    for header in (
        "評価項目",
        "総データ数",
        "評価対象数",
        "正解数",
        "不正解数",
        "出力ミスのデータ数",
        "全体の正答率(%)",
    ):
        assert re.search(rf"<th[^>]*>{re.escape(header)}</th>", section), header
    assert "78.57" in section and "ツール名" in section
    assert "&lt;script&gt;window.__xss" in section and "&lt;img src=x onerror=" in section
    assert "Search_hotel" in section and "precision" in section
    assert "score_broken.json:2: not JSON" in section
    files = find_result_files(runs["scripted"])
    assert [f.path.name for f in files] == ["score_tiny.json", "diagnostics_tiny.json"]
    assert files[0].data == JMWOZ_ROWS


def test_render_json_shapes():
    assert render_json([{"a": 1, "b": "x"}, {"a": 2, "c": None}]).count("<tr>") == 3
    table = render_json({"row1": {"p": 0.5}, "row2": {"p": 1}})
    assert "<td>row1</td>" in table and "0.5" in table
    assert "<h4>outer</h4>" in render_json({"outer": {"inner": {"deep": [1, {"x": 2}]}}, "k": 1})


def test_report_cli(runs, tmp_path, capsys):
    out = tmp_path / "sub" / "report.html"
    assert cli.main(["report", str(runs["oracle"]), "--out", str(out)]) == 0
    assert out.exists() and "wrote" in capsys.readouterr().out
    assert cli.main(["report", str(tmp_path / "missing"), "--out", str(out)]) == 2


def test_long_arguments_and_states_are_clipped_in_the_payload():
    from toolgym.views.report.payload import _clip_json

    small = {"letter": "a", "nested": [1, 2, {"x": "y"}]}
    assert _clip_json(small, 100) is small
    big = {"text": "é" * 500}
    clipped = _clip_json(big, 100)
    assert isinstance(clipped, str) and clipped.startswith('{"text": "éé') and "more characters" in clipped
