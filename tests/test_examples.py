"""examples/company_lookup.py, run for real (issue 14, acceptance 2).

The example service (examples/company_service.py) runs in a subprocess on
127.0.0.1, port 0; its address reaches the play through COMPANY_SERVICE_URL;
``trioplay run`` finds examples/trioplay.toml beside the play, which opens
127.0.0.1 to fetch. The command line runs in this process (``support.cli``);
the session of docs/getting-started.md (tests/test_cli_docs.py) runs the
installed entry point on the same example and service.
"""

from __future__ import annotations

import contextlib
import json
import re
import selectors
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .support import cli

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLAY = EXAMPLES / "company_lookup.py"
DOMAINS = EXAMPLES / "domains.csv"


@contextlib.contextmanager
def company_service() -> Iterator[str]:
    """Run examples/company_service.py on a free port; yield the address it prints."""
    with subprocess.Popen(
        [sys.executable, str(EXAMPLES / "company_service.py"), "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as service:
        try:
            assert service.stdout is not None
            with selectors.DefaultSelector() as selector:
                selector.register(service.stdout, selectors.EVENT_READ)
                ready = selector.select(timeout=30)
            assert ready, "the service printed nothing within 30 s"
            line = service.stdout.readline()
            match = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", line)
            assert match is not None, (line, service.stderr.read() if service.poll() else "")
            yield match.group(1)
        finally:
            service.terminate()
            service.wait(timeout=30)


def _stats(url: str) -> Any:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
        return json.load(response)


def test_the_company_lookup_example_runs_against_its_service(tmp_path: Path) -> None:
    out = tmp_path / "companies.jsonl"
    argv = [
        "run", str(PLAY), "--csv", str(DOMAINS), "--out", str(out),
        "--store", f"sqlite:///{tmp_path / 'store.db'}", "--run-id", "lookup",
    ]  # fmt: skip
    with company_service() as url:
        env = {"COMPANY_SERVICE_URL": url}
        done = cli(*argv, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        why = lines.pop(2)  # why the row failed: the 404, cut to 80 characters
        assert why.startswith(
            "    1 failed: 1 ToolExecutionError (HTTP tool 'company_lookup': POST "
        ), why
        assert why.endswith("...) e.g. nowhere.example"), why
        assert lines[:5] == [
            "run lookup: completed (play company-lookup, attempt 1)",
            "  companies: 5 completed, 1 failed, 0 skipped; sheet holds 5 completed, 1 failed",
            "  provider calls: 6",
            "  replayed receipts: 0",
            "  failed calls (recorded): 1",
        ]
        assert "trioplay.play: [lookup] 5 companies found, 1 not" in done.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [(row["domain"], row["company"]["name"], row["sector"]) for row in rows] == [
            ("acme.example", "Acme Corporation", "Manufacturing"),
            ("globex.example", "Globex", "Energy"),
            ("initech.example", "Initech", "Software"),
            ("umbrella.example", "Umbrella Health", "Health care"),
            ("hooli.example", "Hooli", "Software"),
        ]
        assert rows[0] == {
            "domain": "acme.example",
            "contact": "Road Runner",
            "company": {
                "domain": "acme.example",
                "name": "Acme Corporation",
                "sector": "manufacturing",
                "employees": 1200,
            },
            "sector": "Manufacturing",
        }
        # One fetch of the sectors, one lookup per row; the unknown domain is a 404.
        assert _stats(url) == {"sectors": 1, "lookup": 6}

        failed = cli(
            "export", "lookup", "companies", "--status", "failed", "--out", "-",
            "--store", f"sqlite:///{tmp_path / 'store.db'}",
            cwd=tmp_path,
        )  # fmt: skip
        assert failed.returncode == 0, failed.stderr
        assert failed.stdout.splitlines()[1].startswith(
            "nowhere.example,Nobody,\"ToolExecutionError: HTTP tool 'company_lookup': "
            f"POST {url}/lookup answered 404 Not Found"
        )

        # The rerun replays the fetch and the recorded 404; the service hears nothing.
        again = cli(*argv, cwd=tmp_path, env=env)
        assert again.returncode == 0, again.stderr
        assert "  provider calls: 0\n  replayed receipts: 2\n" in again.stdout
        assert _stats(url) == {"sectors": 1, "lookup": 6}


def test_the_example_needs_its_configuration_and_its_address(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    base = ["run", str(PLAY), "--csv", str(DOMAINS), "--store", store]
    unset = cli(*base, cwd=tmp_path, env={"COMPANY_SERVICE_URL": ""})
    assert unset.returncode == 2
    assert unset.stderr.strip().endswith(
        "COMPANY_SERVICE_URL is not set: start `python examples/company_service.py` "
        "and set COMPANY_SERVICE_URL to the address it prints"
    )
    # Without examples/trioplay.toml, fetch refuses 127.0.0.1.
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    with company_service() as url:
        refused = cli(*base, "--config", str(empty), cwd=tmp_path, env={"COMPANY_SERVICE_URL": url})
    assert refused.returncode == 1, refused.stderr
    assert "UnsafeOutboundUrl" in refused.stderr
    assert "allow_networks can open it" in refused.stderr
