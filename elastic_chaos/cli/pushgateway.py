"""``--pushgateway URL`` of ``run``, ``report`` and ``gameday``: push a run's metrics after it.

The metrics are the folder's (elastic_chaos.reporting.views.prometheus, the same families as
its ``metrics.prom``), grouped by job ``elastic-chaos`` and the run's folder
name. The URL is checked when the command line is read (http or https, a host,
a numeric port; ``HOST:PORT`` means http) and the gateway is reached once
before the run starts (:func:`preflight`): a typo or a gateway that is not up
is a usage error (exit 2) before minutes of a run, not a traceback after it. A
push that still fails after the run is said on stderr; ``run`` then exits 4
(the toolkit's error: the run's verdict stands, its metrics are not on the
dashboard).
"""
from __future__ import annotations

import argparse
import http.client
import socket
import sys
import urllib.parse
from typing import TYPE_CHECKING, Any

from elastic_chaos.errors import SpecError

if TYPE_CHECKING:
    from elastic_chaos.reporting.run_report import RunReport

HELP = ("push the run's metrics (as metrics.prom) to this Prometheus Pushgateway, e.g. "
        "http://pushgateway:9091 (HOST:PORT means http); checked and reached before the run starts; grouped by "
        "job=elastic-chaos and run=<report folder name>")

REACH_TIMEOUT_S = 3.0
"""How long the check before a run waits for the gateway to accept a connection."""


def add_flag(parser: Any) -> None:
    parser.add_argument("--pushgateway", metavar="URL", type=_gateway_url, help=HELP)


def gateway_url(text: str) -> str:
    """``text`` as the gateway's URL (``HOST:PORT`` -> ``http://HOST:PORT``); SpecError saying
    what is wrong: empty, a scheme other than http/https, no host, a port that is not a number
    in 1..65535, or a path, query or fragment (the push adds its own path)."""
    text = text.strip()
    if not text:
        raise SpecError("--pushgateway '': empty; give http://HOST:PORT (or HOST:PORT), or leave the flag out")
    shown = text[:200]
    url = text if "://" in text else f"http://{text}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SpecError(f"--pushgateway {shown!r}: the port is not a number in 1..65535 ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise SpecError(f"--pushgateway {shown!r}: the scheme {parts.scheme!r} is not http or https")
    if not parts.hostname:
        raise SpecError(f"--pushgateway {shown!r}: no host; give http://HOST:PORT")
    if port == 0:
        raise SpecError(f"--pushgateway {shown!r}: the port is not a number in 1..65535")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise SpecError(f"--pushgateway {shown!r}: give the gateway's address only (http://HOST:PORT), no path")
    return url.rstrip("/")


def _gateway_url(text: str) -> str:
    try:
        return gateway_url(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--pushgateway ")) from None


def preflight(gateway: str | None) -> None:
    """Before a run: SpecError when ``gateway`` (a URL :func:`gateway_url` accepted) does not
    accept a TCP connection within REACH_TIMEOUT_S. Nothing for None. Blocks up to 3 s."""
    if gateway is None:
        return
    parts = urllib.parse.urlsplit(gateway)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise SpecError(f"--pushgateway {gateway}: cannot reach it ({why}); start the gateway, fix the address, "
                        "or leave --pushgateway out") from None


def push_report(report: RunReport, gateway: str | None) -> bool:
    """Push a run's metrics to ``gateway`` (nothing when it is None); False, said on stderr,
    when the push failed."""
    if gateway is None:
        return True
    from elastic_chaos.reporting.views.prometheus import push
    try:
        push(report, gateway)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        print(f"elastic-chaos: error: metrics of {report.folder} not pushed to {gateway}: {exc}", file=sys.stderr)
        return False
    print(f"metrics pushed to {gateway} (job=elastic-chaos, run={report.folder.resolve().name})")
    return True
