"""The terminal in a browser tab: `GET /` is a small self-contained page (no CDN, works offline) that shows the live
matrix as the room sees it (sRGB-corrected, as in the window), the panel's facts, and the ACK button.

The right to press. The page never holds the HMAC secret and signs nothing: its buttons ask the emulator to act as
its own ACK button does (a short press mutes, a 3 s hold clears, unmute lifts both), which is the power anyone
standing at the box has. That power is given per run, as a random token (`secrets.token_urlsafe`, new at every
start, never written to disk):

- a browser on the same machine (loopback peer address) gets the token inside the page;
- any other browser gets the page read-only, unless its URL carries the token (`/?token=...`), printed once at
  start for the operator to open elsewhere;
- a press must carry the token (header X-Sentinel-UI-Token), be JSON (so a cross-site form cannot send it without a
  CORS preflight that is never granted), come with a Host header naming this server by IP, localhost or the
  configured host (a DNS-rebinding page has another name), and an Origin, when sent, equal to that host.
Anything else is refused with 403 and changes nothing.

The handlers are plain functions of the request's parts, so the HTTP framework serving them can change.
"""

import hmac
import ipaddress
import json
import secrets

from emulator import facts

TOKEN_HEADER = "X-Sentinel-UI-Token"
PRESSES = ("short", "long", "unmute")
MAX_PRESS_BODY = 256


def new_token():
    return secrets.token_urlsafe(18)


def is_loopback_addr(addr):
    try:
        return ipaddress.ip_address((addr or "").split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _host_name(host_header):
    h = (host_header or "").strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def host_allowed(host_header, configured_host):
    """Host header names this server: an IP literal, localhost, or the configured listen host."""
    name = _host_name(host_header)
    if not name:
        return False
    if name in ("localhost", (configured_host or "").lower()):
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _answer(status, obj):
    return status, "application/json", json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _refuse(message):
    return _answer(403, {"ok": False, "error": "forbidden", "message": message})


def index(token, remote_addr, host_header, configured_host):
    """(status, content type, body) of GET /."""
    give = is_loopback_addr(remote_addr) and host_allowed(host_header, configured_host)
    html = PAGE.replace("__TOKEN__", token if give else "")
    return 200, "text/html; charset=utf-8", html.encode("utf-8")


def view(engine):
    """GET /ui/view.json: the frame in screen colours and the panel's facts (what /api/v1/status says, in words)."""
    v = engine.view
    if v is None or v.frame is None:
        return _answer(503, {"ok": False, "error": "starting", "message": "no frame rendered yet"})
    f = v.frame
    return _answer(
        200,
        {
            "ok": True,
            "seq": f.seq,
            "width": f.width,
            "height": f.height,
            "rgb": facts.screen_rgb(f.rgb).hex(),
            "panel": facts.panel(v),
        },
    )


def press(engine, token, headers, body, *, configured_host, act):
    """POST /ui/press {"press": "short" | "long" | "unmute"}. act(kind) applies it in the engine."""
    h = {str(k).lower(): v for k, v in headers.items()}
    host = h.get("host")
    if not host_allowed(host, configured_host):
        return _refuse("Host header %r does not name this emulator" % (host or "")[:60])
    origin = h.get("origin")
    if origin is not None and origin.split("://", 1)[-1].rstrip("/").lower() != (host or "").strip().lower():
        return _refuse("cross-origin press refused")
    given = h.get(TOKEN_HEADER.lower()) or ""
    if not given or not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8")):
        return _refuse(
            "this page has no right to press: open it on the emulator's machine, or use the URL with "
            "?token= printed at start"
        )
    ctype = (h.get("content-type") or "").split(";")[0].strip().lower()
    if ctype != "application/json":
        return _answer(
            415, {"ok": False, "error": "unsupported_media_type", "message": "Content-Type must be application/json"}
        )
    if len(body) > MAX_PRESS_BODY:
        return _answer(413, {"ok": False, "error": "too_large", "message": "at most %d bytes" % MAX_PRESS_BODY})
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeError, ValueError):
        return _answer(400, {"ok": False, "error": "bad_json", "message": "body must be a JSON object"})
    kind = obj.get("press") if isinstance(obj, dict) else None
    if kind not in PRESSES:
        return _answer(
            422, {"ok": False, "error": "invalid_field", "message": "press must be one of %s" % ", ".join(PRESSES)}
        )
    act(kind)
    return _answer(200, {"ok": True, "press": kind})


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="sentinel-ui-token" content="__TOKEN__">
<title>GPU Sentinel terminal</title>
<style>
body{margin:0;background:#121318;color:#e1e4eb;font:15px/1.4 system-ui,sans-serif;display:flex;gap:24px;
     padding:24px;flex-wrap:wrap}
#box{background:#08080a;border-radius:10px;padding:8px}
#panel{background:#1c1e26;border-radius:10px;padding:16px 20px;width:360px}
h1{font-size:22px;margin:0 0 8px}
.dim{color:#828896}
#badge{display:inline-block;padding:4px 10px;border-radius:6px;font-weight:600;color:#000;background:#464b5a}
#text{font-size:19px;margin:12px 0;min-height:1.4em;word-break:break-all}
.warn{color:#f0be28}.bad{color:#eb463c}
#dots span{margin-right:14px}#dots i{display:inline-block;width:11px;height:11px;border-radius:6px;
  margin-right:5px;vertical-align:-1px;background:#828896}
button{font:600 24px system-ui;color:#e1e4eb;background:#c8372d;border:0;border-radius:14px;width:100%;
  height:64px;margin-top:16px;cursor:pointer;box-shadow:0 4px #0a0a0c}
button:active,button.held{background:#82231e;transform:translateY(3px);box-shadow:0 1px #0a0a0c}
button:disabled{background:#464b5a;cursor:not-allowed}
#unmute{font-size:15px;height:34px;background:#2d3140;margin-top:8px}
#alarms{list-style:none;padding:0;margin:8px 0;max-height:220px;overflow-y:auto;font-size:14px}
#alarms li{padding:4px 6px;border-left:6px solid #464b5a;margin-bottom:3px;background:#15161b}
#bar{height:5px;background:#f0be28;width:0;border-radius:2px;margin-top:4px}
</style></head>
<body>
<div id="box"><canvas id="m" width="448" height="448"></canvas></div>
<div id="panel">
<h1>GPU SENTINEL</h1>
<div><span id="badge">...</span> <span id="counts" class="dim"></span></div>
<div id="text"></div>
<ol id="alarms"></ol>
<div id="speech" class="dim"></div>
<div id="silence" class="warn"></div>
<div id="voice"></div>
<div id="mute" class="dim"></div>
<div id="quiet" class="dim"></div>
<div id="dots" style="margin-top:8px"></div>
<button id="ack">ACK</button><div id="bar"></div>
<button id="unmute">unmute</button>
<div id="hint" class="dim" style="font-size:13px;margin-top:6px">click: mute 15 min &middot; hold 3 s: clear</div>
</div>
<script>
"use strict";
const LEVEL = {P0: "#e62828", P1: "#f5a014", NORMAL: "#28be46"};
const OFF = "rgb(34,35,42)";
const token = new URLSearchParams(location.search).get("token") ||
  document.querySelector('meta[name="sentinel-ui-token"]').content;
const cv = document.getElementById("m"), ctx = cv.getContext("2d");
let size = null;
function $(id) { return document.getElementById(id); }
function draw(v) {
  const p = Math.max(8, Math.min(40, Math.floor(448 / Math.max(v.width, v.height))));
  if (!size || size[0] !== v.width || size[1] !== v.height) {
    cv.width = v.width * p; cv.height = v.height * p; size = [v.width, v.height];
  }
  ctx.fillStyle = "#08080a"; ctx.fillRect(0, 0, cv.width, cv.height);
  const r = Math.max(2, Math.floor(p * 0.4));
  for (let y = 0; y < v.height; y++) for (let x = 0; x < v.width; x++) {
    const i = (y * v.width + x) * 6;
    const c = v.rgb.substr(i, 6);
    ctx.fillStyle = c === "000000" ? OFF : "#" + c;
    ctx.beginPath(); ctx.arc(x * p + p / 2, y * p + p / 2, r, 0, 2 * Math.PI); ctx.fill();
  }
  cv.dataset.seq = v.seq; cv.dataset.pitch = p;
}
function facts(f) {
  const l = f.lines, b = $("badge");
  b.textContent = l.badge;
  b.style.background = LEVEL[f.level] || (/^health_|config_error/.test(f.pattern) ? "#f0be28" : "#464b5a");
  b.style.color = (f.level || b.style.background === "rgb(240, 190, 40)") ? "#000" : "#e1e4eb";
  $("counts").textContent = l.counts;
  $("text").textContent = f.text || "";
  const ol = $("alarms");
  ol.innerHTML = "";
  f.alarms.forEach((a, i) => {
    const li = document.createElement("li");
    li.textContent = l.alarms[i];
    li.style.borderLeftColor = LEVEL[a.level] || "#464b5a";
    li.dataset.key = a.key || ""; li.dataset.level = a.level || "";
    li.className = a.acknowledged ? "dim" : "";
    ol.appendChild(li);
  });
  $("speech").textContent = l.speech;
  $("silence").textContent = l.silence;
  $("voice").textContent = l.voice;
  $("voice").className = l.voice ? "bad" : "";
  $("mute").textContent = l.mute;
  $("mute").className = f.mute.active ? "warn" : "dim";
  $("quiet").textContent = l.quiet;
  $("dots").innerHTML = "";
  for (const name of ["clock", "network", "voice", "heartbeat"]) {
    const ok = f.health[name], s = document.createElement("span"), i = document.createElement("i");
    i.style.background = ok === null ? "#828896" : ok ? "#3cc85a" : "#eb463c";
    s.appendChild(i); s.appendChild(document.createTextNode(name)); $("dots").appendChild(s);
  }
}
async function poll() {
  try {
    const r = await fetch("/ui/view.json", {cache: "no-store"});
    if (r.ok) { const v = await r.json(); draw(v); facts(v.panel); document.body.dataset.ready = "1"; }
  } catch (e) { $("speech").textContent = "emulator unreachable"; }
  setTimeout(poll, 100);
}
async function press(kind) {
  const r = await fetch("/ui/press", {method: "POST", headers: {"Content-Type": "application/json",
    "X-Sentinel-UI-Token": token}, body: JSON.stringify({press: kind})});
  document.body.dataset.lastPress = kind + ":" + r.status;
}
const ack = $("ack");
let downAt = null, longTimer = null, barTimer = null;
function release(fire) {
  clearTimeout(longTimer); clearInterval(barTimer); ack.classList.remove("held"); $("bar").style.width = "0";
  const held = downAt === null ? null : Date.now() - downAt;
  downAt = null;
  if (fire && held !== null) press("short");
}
if (!token) {
  ack.disabled = true; $("unmute").disabled = true;
  $("hint").textContent = "read-only: pressing needs this machine's browser or the URL with ?token= printed at start";
} else {
  ack.addEventListener("pointerdown", e => {
    downAt = Date.now(); ack.classList.add("held"); ack.setPointerCapture(e.pointerId);
    barTimer = setInterval(() => { $("bar").style.width = Math.min(100, (Date.now() - downAt) / 30) + "%"; }, 50);
    longTimer = setTimeout(() => { downAt = null; release(false); press("long"); }, 3000);
  });
  ack.addEventListener("pointerup", e => {
    const r = ack.getBoundingClientRect();
    release(e.clientX >= r.left && e.clientX <= r.right && e.clientY >= r.top && e.clientY <= r.bottom);
  });
  ack.addEventListener("pointercancel", () => release(false));
  document.addEventListener("keydown", e => { if ((e.key === " " || e.key === "a") && !e.repeat) press("short"); });
  $("unmute").addEventListener("click", () => press("unmute"));
}
poll();
</script>
</body></html>
"""
