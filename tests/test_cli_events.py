"""``--events``, ``--trace`` and ``trioplay timeline`` on the command line (issue 13, item 6)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from trioplay._cli import main
from trioplay._trace import VERSION, read_events
from trioplay._trace import _records as r

from .test_trace import check_chrome_trace


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_writes_its_events_and_a_valid_chrome_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    args = ["demo", "--rows", "80", "--store", store]
    code, _, err = _cli(
        capsys, *args, "--events", "out/demo-events.jsonl", "--trace", "out/demo-trace.json"
    )
    assert code == 0, err
    events = list(read_events(tmp_path / "out" / "demo-events.jsonl"))
    assert isinstance(events[0], r.RunStarted)
    assert isinstance(events[-1], r.RunFinished)
    assert events[-1].status == "completed"
    committed = [e for e in events if isinstance(e, r.RowCommitted)]
    assert len(committed) == 79  # 80 leads, one a duplicate key
    trace = json.loads((tmp_path / "out" / "demo-trace.json").read_text(encoding="utf-8"))
    slices = check_chrome_trace(trace)
    assert sum(1 for e in slices if e["ph"] == "X" and e["pid"] == 4) > 80  # provider calls
    assert not list((tmp_path / "out").glob(".*partial"))

    svg = tmp_path / "out" / "timeline.svg"
    code, _, err = _cli(capsys, "timeline", "out/demo-events.jsonl", "--out", str(svg))
    assert code == 0, err
    assert f"{svg}: the timeline of {len(events):,} events" in err
    root = ET.fromstring(svg.read_text(encoding="utf-8"))
    assert root.tag.endswith("svg")

    # Replayed: a second run records its replays.
    code, _, err = _cli(capsys, *args, "--events", "again.jsonl")
    assert code == 0, err
    replays = [e for e in read_events(tmp_path / "again.jsonl") if isinstance(e, r.ReceiptReplayed)]
    assert replays


def test_the_timeline_default_name_and_what_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "run.jsonl"
    events.write_text(
        f'{{"type":"run.started","v":{VERSION},"at":0.0,"run":"r","play":"p","attempt":1}}\n'
        f'{{"type":"run.finished","v":{VERSION},"at":2.0,"run":"r","status":"completed",'
        '"error":null}\n',
        encoding="utf-8",
    )
    code, _, err = _cli(capsys, "timeline", str(events))
    assert code == 0, err
    assert (tmp_path / "run.svg").read_text(encoding="utf-8").startswith("<svg")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"run.started"}\n', encoding="utf-8")
    code, _, err = _cli(capsys, "timeline", str(bad), "--out", str(tmp_path / "x.svg"))
    assert code == 2
    assert "line 1" in err
    assert not (tmp_path / "x.svg").exists()
    code, _, err = _cli(capsys, "timeline", str(tmp_path / "none.jsonl"))
    assert code == 2
    assert "no such file" in err


def test_events_of_a_failed_run_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    play = tmp_path / "boom.py"
    play.write_text(
        "import trioplay\n\n"
        "@trioplay.play('boom')\n"
        "async def boom(ctx, input):\n"
        "    ctx.log('about to fail')\n"
        "    raise RuntimeError('boom')\n",
        encoding="utf-8",
    )
    events = tmp_path / "events.jsonl"
    trace = tmp_path / "trace.json"
    store = f"sqlite:///{tmp_path / 's.db'}"
    code, _, _ = _cli(
        capsys, "run", str(play), "--store", store, "--events", str(events), "--trace", str(trace)
    )
    assert code == 1
    kept = list(read_events(events))
    assert isinstance(kept[-1], r.RunFinished)
    assert kept[-1].status == "failed"
    assert any(isinstance(e, r.PlayLog) and e.message == "about to fail" for e in kept)
    check_chrome_trace(json.loads(trace.read_text(encoding="utf-8")))
