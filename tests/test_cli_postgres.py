"""After a PostgreSQL connection cut in the middle of a run, the command line
shows the first error (the write that failed), not its own queries after the
run, and says so in a few lines, not one warning per row (issue 14, point 4).

The cut is real: the CLI reaches the server through a TCP proxy on 127.0.0.1
that the test closes while rows are being written.
"""

from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING
from urllib.parse import quote

import psycopg
import pytest
import trio

from .support import TRIOPLAY
from .tcp_proxy import FaultyProxy
from .test_postgres import DSN, _admin
from .test_postgres import schema as schema  # the fixture: a schema of the test's own

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.postgres, pytest.mark.deadline(90)]

PLAY = """
import trio
import trioplay

ROWS = 3000
tools = trioplay.ToolRegistry()


@tools.tool("finder")
async def finder(input, call):
    if int(input["domain"][1:].split(".")[0]) >= 1000:
        await trio.sleep_forever()  # the run cannot end before the cut
    await trio.sleep(0.005)
    return f"info@{input['domain']}"


async def email(row, rc):
    return await rc.tool("finder", {"domain": row["domain"]})


@trioplay.play("cut")
async def cut(ctx, input):
    rows = [{"domain": f"d{i}.example"} for i in range(ROWS)]
    await ctx.dataset("leads", rows).with_column("email", email).run(key="domain")
"""


def _through(port: int, name: str) -> str:
    """The test server's URL, with the proxy's port and the test's schema."""
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    user = quote(str(params.get("user") or "postgres"))
    if params.get("password"):
        user += ":" + quote(str(params["password"]))
    return f"postgresql://{user}@127.0.0.1:{port}/{params.get('dbname') or 'test'}?schema={name}"


def _committed(name: str) -> int:
    try:
        [(count,)] = _admin(f'SELECT count(*) FROM "{name}".sheet_rows')
    except psycopg.errors.UndefinedTable:
        return 0
    return int(count)


async def test_a_cut_shows_the_write_that_failed_once(
    tmp_path: Path,
    schema: str,
) -> None:
    play = tmp_path / "cut.py"
    play.write_text(PLAY)
    params = psycopg.conninfo.conninfo_to_dict(DSN)
    proxy = FaultyProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        argv = [
            str(TRIOPLAY), "run", str(play), "--run-id", "r",
            "--store", _through(proxy.port, schema),
            "--limit", "writer_max_flush=0.02", "--limit", "cleanup_timeout=0.5",
            "--limit", "store_retry=0",
        ]  # fmt: skip
        done: list[subprocess.CompletedProcess[bytes]] = []
        ended = trio.Event()

        async def run() -> None:
            done.append(
                await trio.run_process(
                    argv, cwd=tmp_path, capture_stdout=True, capture_stderr=True, check=False
                )
            )
            ended.set()

        nursery.start_soon(run)
        # Cut once rows are being written (read straight from the server);
        # the rows past the first 1,000 wait for the cut, however slowly
        # this loop polls on a busy machine.
        while not ended.is_set():
            if await trio.to_thread.run_sync(_committed, schema) >= 300:
                break
            await trio.sleep(0.05)
        assert not ended.is_set(), "the run ended before the cut"
        proxy.cut()
        with trio.fail_after(60):
            await ended.wait()
        nursery.cancel_scope.cancel()
    [finished] = done
    stdout, stderr = finished.stdout.decode(), finished.stderr.decode()
    url = _through(proxy.port, schema)
    assert finished.returncode == 1, stderr
    assert stdout.startswith("run r: failed (play cut, attempt 1)\n"), stdout
    # The summary counts what the sheet holds, although it could not ask the
    # store; rows of a write the cut left unconfirmed are counted apart.
    counted = re.search(
        r"^  leads: ([\d,]+) completed, 0 failed, 0 skipped"
        r"(?:; ([\d,]+) more in a write whose outcome is unknown \(.+\))?$",
        stdout,
        re.M,
    )
    assert counted is not None, stdout
    completed, unconfirmed = (int((n or "0").replace(",", "")) for n in counted.groups())
    held = _committed(schema)
    assert completed <= held <= completed + unconfirmed, (held, stdout)
    assert held >= 300

    # One error, the run's own: a write the cut broke, named with the store.
    [error] = [line for line in stderr.splitlines() if line.startswith("error: ")]
    failed = re.match(
        rf"error: StoreError: {re.escape(url)}: (\w+): (connection lost|cannot connect)", error
    )
    assert failed is not None, stderr
    assert failed.group(1) in WRITES, error
    assert f"  {error}" in stdout.splitlines()  # the summary's error line is the same
    for query in ("list_datasets", "count_rows"):  # the CLI's own queries after the run
        assert query not in stdout + stderr

    # A warning per in-flight call is said once, with how many more there were
    # (when the cut caught calls in flight: test_cli_summary shows the count).
    said = [line for line in stderr.splitlines() if not line.startswith("leads: ")]
    assert len(said) <= 8, stderr
    assert len({line[:50] for line in said}) == len(said), stderr
    more = [line for line in said if "more like" in line]
    assert all(
        re.search(r"^\S+: [\d,]+ more like \".+\" not shown \(--debug shows every one\)$", line)
        for line in more
    ), more


WRITES = {
    "write_terminal_rows", "complete_many", "fail_many", "release_many", "claim_many",
    "heartbeat_many", "claim_page", "heartbeat_pages", "finish_page", "release_page",
    "begin_attempt",
}  # fmt: skip
