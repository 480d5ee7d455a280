"""`python -m emulator` / `sentinel-emulator`: the GPU Sentinel terminal on a laptop.

sentinel-emulator                  window + HTTP on 127.0.0.1:8765 + voice on the sound card
sentinel-emulator --headless       no window (frames kept in memory; GET /snapshot.png)
sentinel-emulator --wav-dir DIR    each utterance written to DIR/NNNN-<lang>.wav instead of the sound card
sentinel-emulator demo             play the RFC's story (P0 NCCL deadlock, ACK, recovery) against a running one

Exit status: 0 stopped, 1 cannot run (the port is in use or the address is not this host's; the engine failed),
2 configuration error. SIGHUP re-reads the config file's live settings (quiet hours, mute, speech gap).
"""

import argparse
import logging
import os
import signal
import sys
import threading
import time

EXIT_OK, EXIT_CANNOT_RUN, EXIT_CONFIG = 0, 1, 2

_logger = logging.getLogger("sentinel.emulator")


def _log(msg):
    """The running emulator's log, in every daemon's dialect (host_client/logs.py: JSON lines, or --log-format
    text): a sentence for a person; "warning: ..." is logged at WARNING, a stopped engine at ERROR."""
    if msg.startswith("warning: "):
        _logger.warning(msg[len("warning: ") :])
    elif msg.startswith("engine stopped"):
        _logger.error(msg)
    else:
        _logger.info(msg)


def _fail(msg):
    """Why the emulator cannot start: one plain line on stderr, as the gateway and the probe say it."""
    print("sentinel-emulator: " + msg, file=sys.stderr, flush=True)


def _say(msg):
    """The demo's words for the person running it (a client, not a daemon: no log dialect)."""
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


def reload_settings(args, engine, path):
    """SIGHUP: read the config file again and give the running terminal the settings that can change live (quiet
    hours, mute, speech gap, label length, idle pattern); the others are named as needing a restart."""
    from emulator import config as config_mod

    try:
        cfg, _, _, _ = config_mod.load(path, _overrides(args))
        said = engine.reload(cfg)
    except (config_mod.ConfigError, ValueError) as e:
        _log("reload refused, the running settings stay: %s" % e)
        return
    _log("reloaded %s: %s" % (path, said))


def build_parser():
    p = argparse.ArgumentParser(
        prog="sentinel-emulator",
        description="GPU Sentinel terminal emulator",
        epilog="exit status: 0 stopped, 1 cannot run (port in use, address not this host's, the engine failed), "
        "2 configuration error. kill -HUP re-reads quiet hours, mute and speech gap from the config file.",
    )
    p.add_argument(
        "--config",
        help="config file (default: $SENTINEL_EMULATOR_CONFIG or "
        "$XDG_CONFIG_HOME/gpu-sentinel/emulator.json); created with a random secret "
        "on first start",
    )
    p.add_argument("--host", help="listen address for this run (default from the config: 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port for this run (default from the config: 8765)")
    p.add_argument("--size", help="matrix WIDTHxHEIGHT for this run, e.g. 32x8 (default 16x16)")
    p.add_argument("--headless", action="store_true", help="no window, even if a display is available")
    p.add_argument("--wav-dir", help="write each utterance to a WAV file in this directory instead of speaking")
    p.add_argument("--no-voice", action="store_true", help="do not speak at all (the light still works)")
    p.add_argument("--no-persist", action="store_true", help="do not keep active alarms and the mute across restarts")
    p.add_argument("--screenshot", help="save a PNG of the window after --screenshot-after frames, then quit")
    p.add_argument("--screenshot-after", type=int, default=45, help="frames before --screenshot (default 45)")
    p.add_argument("--run-for", type=float, help="quit after this many seconds (scripts, smoke tests)")
    p.add_argument(
        "--log-format",
        choices=("json", "text"),
        default="json",
        help="the log on stderr: json, one JSON object per line with an ISO-8601 UTC time (default, as the gateway "
        "and the probe write it); text: for humans",
    )
    sub = p.add_subparsers(dest="command")
    d = sub.add_parser("demo", help="play the RFC's story against a running emulator")
    d.add_argument("--config", dest="demo_config", help="config file to read url, key_id and secret from")
    d.add_argument("--url", help="terminal URL (default: the config's url)")
    d.add_argument("--pause", type=float, default=8.0, help="seconds between the story's steps (default 8)")
    return p


def _overrides(args):
    out = {}
    if args.host:
        out["host"] = args.host
    if args.port is not None:
        out["port"] = args.port
    if args.size:
        try:
            w, h = args.size.lower().split("x")
            out["width"], out["height"] = int(w), int(h)
        except ValueError:
            raise SystemExit("--size must look like 16x16, got %r" % args.size) from None
    return out


def _want_window(args):
    if args.headless:
        return False
    if args.screenshot:
        return True
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        if os.environ.get("SDL_VIDEODRIVER") != "dummy":
            _log("no display found ($DISPLAY unset): running headless (GET /snapshot.png shows the matrix)")
            return False
    return True


def serve(args):
    from emulator import config as config_mod
    from emulator.engine import Engine
    from emulator.voice import Voice
    from emulator.web import Server, create_app
    from host_client.logs import setup as setup_log
    from host_client.transport import listen_error

    try:
        cfg, path, created, warnings = config_mod.load(args.config, _overrides(args))
    except config_mod.ConfigError as e:
        _fail("config error: %s" % e)
        return EXIT_CONFIG
    setup_log("sentinel.emulator", fmt=args.log_format)
    for w in warnings:
        _log("warning: " + w)
    if created:
        _log("first start: created %s (mode 600) with a new random secret" % path)
    # The port first: one that is taken stops the start before the voice, the engine or the saved state are touched.
    try:
        server = Server(None, cfg["host"], cfg["port"])
    except OSError as e:
        _fail(listen_error(cfg["host"], cfg["port"], e, "--host/--port, or host/port in %s" % path))
        return EXIT_CANNOT_RUN
    if args.no_voice:
        voice = Voice(mode="off")
    elif args.wav_dir:
        voice = Voice(
            mode="wav", wav_dir=args.wav_dir, rate=cfg["voice"].get("rate", 170), voices=cfg["voice"], log=_log
        )
    else:
        voice = Voice(mode="device", rate=cfg["voice"].get("rate", 170), voices=cfg["voice"], log=_log)
    voice.start()
    state_path = None if args.no_persist else os.path.join(os.path.dirname(path), "emulator-state.json")
    try:
        engine = Engine(cfg, voice=voice, state_path=state_path, log=_log).start()
    except ValueError as e:
        _fail("config error: %s" % e)
        voice.stop()
        server.stop()
        return EXIT_CONFIG
    app = create_app(cfg, engine)
    server.mount(app).start()
    cfg_url = config_mod.listen_url(dict(cfg, port=server.port))
    if not voice.available:
        voice_desc = "off" if voice.mode == "off" else "unavailable"
    elif voice.mode == "device" and voice.player_kind == "silent":
        voice_desc = "timed silence (no audio device)"
    elif voice.mode == "device":
        voice_desc = "sound card via %s" % voice.player_kind
    else:
        voice_desc = "WAV files in %s" % voice.wav_dir
    _log(
        "GPU Sentinel emulator listening on %s (%dx%d matrix, voice: %s)"
        % (server.url, cfg["width"], cfg["height"], voice_desc)
    )
    _log("key id: %s   (secret in %s)" % (cfg["key_id"], path))
    _log("send the first alarm from another terminal:")
    print(
        "    " + config_mod.send_command(dict(cfg, port=server.port), program=config_mod.sender_program()), flush=True
    )
    _log("status: curl %s/api/v1/status    metrics: %s/metrics" % (cfg_url, cfg_url))
    # The page's right to press, for this run only: a browser on this machine gets it inside the page; the URL
    # below carries it to another screen (stdout, like the send command; it is not the signing secret).
    remote = config_mod.remote_url(dict(cfg, port=server.port))
    if remote is None:
        _log("the terminal in a browser: %s/  (this machine only: --host 0.0.0.0 lets other machines in)" % cfg_url)
    else:
        _log("the terminal in a browser: %s/  (to press ACK from another machine, open:)" % cfg_url)
        print("    %s/?token=%s" % (remote, app.extensions["sentinel_ui_token"]), flush=True)
    _log(
        "kill -HUP %d re-reads %s: quiet hours, mute and speech gap change live (docs/EMULATOR.md)"
        % (os.getpid(), path)
    )

    def on_hup(_sig, _frame):
        # the reload waits for the engine's thread: not inside the signal handler
        threading.Thread(target=reload_settings, args=(args, engine, path), name="reload", daemon=True).start()

    signal.signal(signal.SIGHUP, on_hup)

    stop = threading.Event()

    def on_signal(_sig, _frame):
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    deadline = None if args.run_for is None else time.monotonic() + args.run_for
    rc = 0
    try:
        if _want_window(args):
            from emulator.window import Window

            win = Window(engine, url=server.url, fps=cfg["fps"], log=_log)
            max_frames = args.screenshot_after if args.screenshot else None
            if deadline is not None and max_frames is None:
                max_frames = int(args.run_for * cfg["fps"])
            win.run(
                max_frames=max_frames,
                screenshot=args.screenshot,
                screenshot_at=args.screenshot_after if args.screenshot else None,
                should_stop=stop.is_set,
            )
            win.close()
        else:
            while not stop.is_set() and engine.alive:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                stop.wait(0.2)
        if engine.error:
            rc = EXIT_CANNOT_RUN
    finally:
        _log("stopping")
        server.stop()
        engine.stop()
        voice.stop()
    return rc


def _known_options(parser):
    opts = set()
    for action in parser._actions:
        opts.update(action.option_strings)
        for sub in (
            (getattr(action, "choices", None) or {}).values() if isinstance(action, argparse._SubParsersAction) else ()
        ):
            opts |= _known_options(sub)
    return opts


def _unknown_option(parser, argv):
    """An option nobody defines (a typo such as --wavdir) otherwise reads as the sub-command's argument and argparse
    says "invalid choice ... (choose from 'demo')": name it, and the option it probably meant."""
    import difflib

    known = _known_options(parser)
    for arg in argv:
        if arg == "--":
            return None
        if arg.startswith("-") and len(arg) > 1 and not arg.lstrip("-").replace(".", "").isdigit():
            name = arg.split("=", 1)[0]
            prefixed = [k for k in known if k.startswith(name)] if name.startswith("--") else []
            if name not in known and len(prefixed) != 1 and not (not name.startswith("--") and len(name) > 2):
                close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
                return "unknown option %s%s" % (name, " (did you mean %s?)" % close[0] if close else "")
    return None


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    problem = _unknown_option(parser, argv)
    if problem:
        parser.error(problem)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from emulator.demo import run_demo

        return run_demo(config_path=args.demo_config or args.config, url=args.url, pause=args.pause, log=_say)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
