"""A tiny company directory over HTTP, for ``examples/company_lookup.py``.

Run it in a terminal of its own::

    python examples/company_service.py [PORT]

It listens on 127.0.0.1 only, on PORT (default 0: any free port), and
prints one line, ``listening on http://127.0.0.1:PORT``, then serves until
Ctrl-C:

- ``GET /sectors``: ``{"sectors": {"energy": "Energy", ...}}``, the sector names
- ``POST /lookup`` with ``{"domain": "acme.example"}``: ``200`` and
  ``{"domain", "name", "sector", "employees"}``, or ``404`` and
  ``{"error": "..."}`` for a domain it does not know
- ``GET /stats``: how many requests of each kind it answered, so that you
  can see that a rerun of the play sends none

Only the standard library; nothing here is part of trioplay.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECTORS = {
    "energy": "Energy",
    "health": "Health care",
    "manufacturing": "Manufacturing",
    "software": "Software",
}

COMPANIES = {
    "acme.example": ("Acme Corporation", "manufacturing", 1200),
    "globex.example": ("Globex", "energy", 540),
    "initech.example": ("Initech", "software", 230),
    "umbrella.example": ("Umbrella Health", "health", 8800),
    "hooli.example": ("Hooli", "software", 31000),
}

_counts: Counter[str] = Counter()
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/sectors":
            self._count("sectors")
            self._answer(200, {"sectors": SECTORS})
        elif self.path == "/stats":
            with _lock:
                self._answer(200, dict(_counts))
        else:
            self._answer(404, {"error": f"no such page: {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != "/lookup":
            self._answer(404, {"error": f"no such page: {self.path}"})
            return
        self._count("lookup")
        try:
            domain = json.loads(body)["domain"]
        except (ValueError, KeyError, TypeError):
            self._answer(400, {"error": 'expected a JSON object like {"domain": "acme.example"}'})
            return
        company = COMPANIES.get(domain)
        if company is None:
            self._answer(404, {"error": f"no company is known for {domain!r}"})
            return
        name, sector, employees = company
        self._answer(
            200, {"domain": domain, "name": name, "sector": sector, "employees": employees}
        )

    def _count(self, kind: str) -> None:
        with _lock:
            _counts[kind] += 1

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the play's summary says what happened


def main(argv: list[str]) -> int:
    port = int(argv[1]) if len(argv) > 1 else 0
    with ThreadingHTTPServer(("127.0.0.1", port), Handler) as server:
        print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
