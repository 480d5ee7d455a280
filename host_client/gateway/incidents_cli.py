"""`sentinel-gateway incidents [--open] [--json]` and `sentinel-gateway ack KEY`: the incident history of a running
gateway, and an operator's ACK by incident key (it reaches every terminal showing it), over the gateway's own
GET /api/v1/incidents and POST /api/v1/incidents/ack with its ingest token (history.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

COMMANDS = ("incidents", "ack")
EXIT_OK, EXIT_NOT_FOUND, EXIT_CONFIG, EXIT_UNREACHABLE = 0, 1, 2, 3


def subcommand(argv):
    """The exit status of a subcommand in argv, or None when argv runs the gateway itself."""
    words = [a for a in argv if not a.startswith("-")]
    # the value of -c/--config is a word too: a subcommand is a word that is not the value of an option
    skip = set()
    for i, a in enumerate(argv):
        if a in ("-c", "--config", "--host", "--port", "--log-level", "--url", "--wait") and i + 1 < len(argv):
            skip.add(i + 1)
    cmd = next((a for i, a in enumerate(argv) if i not in skip and a in COMMANDS), None)
    if cmd is None or not words:
        return None
    return main(argv)


def main(argv) -> int:
    import os

    from .cli import DEFAULT_CONFIG

    p = argparse.ArgumentParser(prog="sentinel-gateway", description="Read a running gateway's incidents.")
    p.add_argument("-c", "--config", default=os.environ.get("SENTINEL_GATEWAY_CONFIG", DEFAULT_CONFIG))
    p.add_argument("--url", help="the gateway's base URL (default: from the configuration's host and port)")
    sub = p.add_subparsers(dest="cmd", required=True)
    inc = sub.add_parser("incidents", help="list recent incidents: fired, shown, acknowledged (how), escalated")
    inc.add_argument("--open", action="store_true", help="only incidents not resolved and not acknowledged")
    inc.add_argument("--json", action="store_true", help="the gateway's JSON answer as it is")
    ack = sub.add_parser("ack", help="acknowledge an incident by its key on every terminal showing it")
    ack.add_argument("key", help="the incident key, e.g. A03:gpu-worker-08:NCCL_TIMEOUT")
    ack.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the terminals to take it")
    a = p.parse_args(argv)
    try:
        url, token = _target(a.config, a.url)
    except Exception as e:  # noqa: BLE001 - a configuration error, in one line
        print("sentinel-gateway: configuration error: %s" % e, file=sys.stderr)
        return EXIT_CONFIG
    try:
        if a.cmd == "incidents":
            status, body = _call(url + "/api/v1/incidents", token)
            if status != 200:
                return _refused(status, body)
            items = body["incidents"]
            if a.open:
                items = [r for r in items if r.get("open")]
            if a.json:
                print(json.dumps({"incidents": items, "now": body.get("now")}, ensure_ascii=False, indent=2))
            else:
                print(render(items))
            return EXIT_OK
        status, body = _call(url + "/api/v1/incidents/ack", token, {"key": a.key})
        if status == 404:
            print("sentinel-gateway: %s" % body.get("message", "not open"), file=sys.stderr)
            return EXIT_NOT_FOUND
        if status != 202:
            return _refused(status, body)
        want = {t["terminal"] for t in body["terminals"]}
        print("ACK for %s sent to %s" % (a.key, ", ".join(sorted(want))))
        end = time.monotonic() + a.wait
        while time.monotonic() < end:
            _s, listing = _call(url + "/api/v1/incidents", token)
            r = next((x for x in listing.get("incidents", []) if x["key"] == a.key), None)
            done = set((r or {}).get("acknowledged", {}))
            if r is None or want <= done or r.get("resolved") is not None:
                print("acknowledged on %s" % ", ".join(sorted(want)))
                return EXIT_OK
            time.sleep(0.2)
        print("sentinel-gateway: not every terminal took the ACK within %g s; the gateway keeps trying" % a.wait)
        return EXIT_OK
    except OSError as e:
        from host_client.transport import describe

        why = getattr(e, "reason", e)
        print(
            "sentinel-gateway: cannot reach the gateway at %s: %s (is it running? --url names another)"
            % (url, describe(why) if isinstance(why, BaseException) else why),
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE


def _target(config_path, url):
    from .config import load_config

    cfg = load_config(config_path)
    token = cfg.ingest_tokens[0].reveal().decode() if cfg.ingest_tokens else None
    if url:
        return url.rstrip("/"), token
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(cfg.host or "", cfg.host) or "127.0.0.1"
    if ":" in host:
        host = "[%s]" % host
    return "http://%s:%d" % (host, cfg.port), token


def _call(url, token, body=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except ValueError:
            return e.code, {}


def _refused(status, body):
    print("sentinel-gateway: the gateway answered %d: %s" % (status, body.get("message", "")), file=sys.stderr)
    return EXIT_UNREACHABLE if status >= 500 else EXIT_CONFIG


def _when(t):
    return "-" if t is None else time.strftime("%H:%M:%S", time.gmtime(t))


def _unseen(shown):
    return {"false": " (not shown here)", "none": " (no terminal showed it)"}.get(shown, "")


def render(items):
    """One block per incident, newest first, times in UTC."""
    if not items:
        return "no incidents"
    out = []
    for r in items:
        state = (
            "resolved %s" % _when(r["resolved"])
            if r.get("resolved") is not None
            else ("OPEN" if r.get("open") else "acknowledged")
        )
        out.append(
            "%s %s %s  fired %s UTC  %s"
            % (r["level"], r["key"], "(%s)" % r.get("source", ""), _when(r["fired"]), state)
        )
        if r.get("folded"):
            out.append("    %d incidents folded into summaries, the last %s UTC" % (r["folded"], _when(r["last"])))
        for t in r.get("terminals", []):
            shown = r["shown"].get(t)
            ack = r["acknowledged"].get(t)
            esc = r["escalated"].get(t)
            out.append(
                "    %-16s shown %s  ack %s  escalated %s"
                % (
                    t,
                    _when(shown) if shown is not None else "never",
                    "%s (%s)" % (_when(ack["at"]), ack["via"]) if ack else "-",
                    (_when(esc["at"]) + _unseen(esc.get("shown"))) if esc else "-",
                )
            )
    return "\n".join(out)
