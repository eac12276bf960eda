"""The enrich-leads example play, as ``trioplay demo`` runs it.

Run it on the bundled leads (or any CSV with a ``domain`` column)::

    trioplay run examples/enrich_leads.py --csv engine/_demo_data/leads.csv --out out/leads.csv

Run the same command again: committed rows are skipped and every tool call is
replayed from its receipt, so the summary says ``provider calls: 0``.

The play and its simulated tools live in ``engine/_cli/_demo.py`` (installed
as ``trioplay._cli._demo``) so that ``trioplay demo`` works from an installed
package, which has no ``examples/`` folder; read that file for the code.
``trioplay run`` finds ``enrich_leads`` (decorated with ``@trioplay.play``)
and ``tools()`` here.
"""

from trioplay._cli._demo import enrich_leads, tools

__all__ = ["enrich_leads", "tools"]
