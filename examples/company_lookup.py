"""Look up each domain's company on an HTTP service: ``ctx.fetch`` and an ``HttpTool``.

Start the service (``examples/company_service.py``) and give the play its
address in ``COMPANY_SERVICE_URL``::

    $ python examples/company_service.py
    listening on http://127.0.0.1:40215
    $ export COMPANY_SERVICE_URL=http://127.0.0.1:40215      # in another terminal
    $ trioplay run examples/company_lookup.py --csv examples/domains.csv --out out/companies.jsonl

The play fetches the sector names once (``ctx.fetch``: recorded in a
receipt), then looks up every domain through the ``company_lookup`` tool
(an ``HttpTool`` that POSTs ``{"domain": ...}``). A domain the service does
not know answers 404, which the tool turns into a recorded
``ToolExecutionError``: that row fails alone, and a rerun gets the same
answer from its receipt without asking again.

127.0.0.1 is not a public address, so fetch refuses it unless a network is
opened: ``examples/trioplay.toml``, beside this file, does that
(``allow_networks``). See docs/getting-started.md for a run, end to end.
"""

import os

import trioplay
from trioplay.adapters import HttpTool

SERVICE_URL = "COMPANY_SERVICE_URL"


def service_url():
    """The service's address, from the environment (its port changes from run to run)."""
    url = os.environ.get(SERVICE_URL, "").rstrip("/")
    if not url:
        raise trioplay.PlayDefinitionError(
            f"{SERVICE_URL} is not set: start `python examples/company_service.py` "
            f"and set {SERVICE_URL} to the address it prints"
        )
    return url


def tools():
    registry = trioplay.ToolRegistry()
    registry.add_tool(
        HttpTool(
            tool_id="company_lookup",
            url=f"{service_url()}/lookup",
            provider="company-service",
            rate=trioplay.Rate(50, per=1.0),
            concurrency=4,
        )
    )
    return registry


async def company(row, rc):
    return await rc.tool("company_lookup", {"domain": row["domain"]})


@trioplay.play("company-lookup")
async def company_lookup(ctx, input):
    sectors = (await ctx.fetch(f"{service_url()}/sectors")).json["sectors"]

    def sector(row, rc):
        return sectors[row["company"]["sector"]]

    rows = ctx.csv(input["csv"], required=["domain"])
    result = await (
        ctx.dataset("companies", rows)
        .with_column("company", company)
        .with_column("sector", sector)
        .run(key="domain")
    )
    ctx.log(f"{result.completed_count} companies found, {result.failed_count} not")
    return {"found": result.completed_count, "unknown": result.failed_count}
