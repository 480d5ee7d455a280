"""sentinel-send: send one alarm (a preset or your own), an ACK, an unmute or a heartbeat to a terminal."""

import argparse
import json
import shlex
import sys
import time

from host_client.client import AlarmClient, copy_alarm, send_many
from host_client.config import check_url, resolve
from host_client.errors import ConfigError, RefusedError, SentinelError, ServerError, TransportError
from sentinel_core.alarm import AUDIO_MODES, LIGHT_MODES, PRESETS, level_from_name, preset
from sentinel_core.errors import ProtocolError
from sentinel_core.validate import REPEAT_MAX, parse_color

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

EPILOG = """examples:
  sentinel-send --preset p0 --text "训练集群紧急预警，机架 A03 节点 gpu-worker-08 触发通信死锁" --key A03:gpu-worker-08
  sentinel-send --preset normal --key A03:gpu-worker-08          # recovered: green for 10 s, clears the incident
  sentinel-send --text "disk 91% on ctl-01" --level P1 --color "#FFA500"
  sentinel-send --ack                                             # mute (15 min by default), as the button does
  sentinel-send --unmute                                          # end the mute and the acknowledgements
  sentinel-send --heartbeat 60                                    # arm the dead-man's switch; --heartbeat 0 disarms
  sentinel-send --preset p1 --text test --dry-run                 # print the signed request as curl

terminal: --url/--key-id/--secret-file, or SENTINEL_URL, SENTINEL_KEY_ID, SENTINEL_SECRET(_FILE), or --config FILE;
with none of these, the local emulator's config file is used.
exit status: 0 delivered, 1 refused by the terminal, 2 usage or configuration error (a bad URL, --timeout 0, an
unreadable secret file), 3 terminal unreachable (refused, timed out: after the retries, each said on stderr)."""


def build_parser():
    p = argparse.ArgumentParser(
        prog="sentinel-send", description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = p.add_argument_group("what to send")
    what.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="the RFC's presets: p0 red flash, spoken 3 times; "
        "p1 orange breath, once; normal green 10 s, '训练集群已恢复正常'",
    )
    what.add_argument("--text", help="words to show and speak (at most 400 bytes of UTF-8)")
    what.add_argument("--level", choices=["P0", "P1", "NORMAL"], help="alarm level (default: from the preset, else P1)")
    what.add_argument("--color", help="#RRGGBB")
    what.add_argument("--light", choices=LIGHT_MODES, help="light pattern")
    what.add_argument("--audio", choices=AUDIO_MODES, help="speech: once, cycle (repeat), none")
    what.add_argument("--repeat", type=int, help="times to speak in cycle mode (1..%d)" % REPEAT_MAX)
    what.add_argument("--key", help="incident key: a NORMAL with the same key clears it")
    what.add_argument("--id", help="message id for idempotent retries (default: random)")
    what.add_argument("--duration", type=int, help="seconds on display (NORMAL) or until expiry (P0/P1)")
    what.add_argument("--ack", action="store_true", help="send a remote ACK (mute) instead of an alarm")
    what.add_argument("--clear", action="store_true", help="with --ack: clear the display, as a long press")
    what.add_argument(
        "--unmute",
        action="store_true",
        help="end the mute and every acknowledgement (with --key: that incident's only)",
    )
    what.add_argument(
        "--heartbeat",
        type=int,
        metavar="SECONDS",
        help="send a heartbeat; 0 disarms the dead-man's switch; else alarm if the next one is later than SECONDS",
    )
    where = p.add_argument_group("where to send it")
    where.add_argument("--url", help="terminal base URL, e.g. http://10.0.0.20")
    where.add_argument("--key-id", help="key id the terminal knows")
    where.add_argument(
        "--secret-file", help="file holding the shared secret (the secret is never a flag: flags show up in ps)"
    )
    where.add_argument("--config", help="JSON or TOML file with url, key_id, secret or secret_file")
    where.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="CONFIG",
        help="another terminal's config file: send to it too (fan-out); repeatable",
    )
    how = p.add_argument_group("how")
    how.add_argument("--timeout", type=float, default=3.0, help="seconds per attempt (default 3)")
    how.add_argument("--retries", type=int, default=3, help="extra attempts on connection errors, 5xx, 429")
    how.add_argument("--dry-run", action="store_true", help="print the signed request as a curl command; send nothing")
    return p


def build_alarm(args):
    if args.preset:
        if args.preset != "normal" and not args.text:
            raise ConfigError("--preset %s needs --text" % args.preset)
        a = preset(args.preset, args.text, key=args.key, id=args.id, duration=args.duration)
    elif args.text:
        a = preset(
            {"P0": "p0", "P1": "p1", "NORMAL": "normal"}[args.level or "P1"],
            args.text,
            key=args.key,
            id=args.id,
            duration=args.duration,
        )
    else:
        raise ConfigError("nothing to send: give --preset, --text, --ack, --unmute or --heartbeat")
    if args.level:
        a.level = level_from_name(args.level)
    if args.color:
        try:
            a.color = parse_color(args.color)
        except ProtocolError as e:
            raise ConfigError("--color: %s" % e.message) from None
    a.light_mode = args.light or a.light_mode
    a.audio_mode = args.audio or a.audio_mode
    if args.repeat is not None:
        a.repeat_times = args.repeat
    return copy_alarm(a)  # through the constructor again, so its normalisation applies to the changed fields


def curl_command(req):
    parts = ["curl", "-sS", "-X", "POST", req.url]
    for k, v in req.headers.items():
        parts += ["-H", "%s: %s" % (k, v)]
    parts += ["--data-binary", req.body.decode()]
    return " ".join(shlex.quote(x) for x in parts)


def say_retry(url, fan_out):
    """on_retry for the CLI: one line on stderr per retry, so a slow terminal is not silence."""

    def on_retry(attempt, tries, delay, error):
        why = error.reason if isinstance(error, TransportError) else "answered %d %s" % (error.status, error.code)
        print(
            "sentinel-send: %stry %d/%d after %.1f s: %s" % (url + ": " if fan_out else "", attempt, tries, delay, why),
            file=sys.stderr,
            flush=True,
        )

    return on_retry


def mute_words(client, ack, key):
    """How long an ACK's mute lasts, as the terminal says it: its answer's `mute_remaining_s` when it gives one,
    else its status page's `mute.remaining_s` (a keyed ACK is the incident's alone: the status page has no time
    for it); the default is named when the terminal says nothing."""
    left = ack.answer.get("mute_remaining_s")
    if left is None and key is None:
        try:
            st = json.loads(client.status_page())
            m = st.get("mute") if isinstance(st, dict) else None
            if isinstance(m, dict) and m.get("active") and isinstance(m.get("remaining_s"), (int, float)):
                left = m["remaining_s"]
        except (SentinelError, ValueError):
            left = None  # a terminal without a readable status page: say the default below
    what = "muted" if key is None else "incident %s silenced" % key
    if not isinstance(left, (int, float)) or isinstance(left, bool) or left <= 0:
        return "%s for the terminal's mute_s (15 min unless configured otherwise); --unmute ends it" % what
    until = time.strftime("%H:%M", time.localtime(time.time() + left))
    return "%s for %s (until %s); --unmute ends it" % (what, _duration(left), until)


def _duration(s):
    s = int(round(s))
    return "%d s" % s if s < 60 else "%d min" % ((s + 30) // 60)


def unreachable(e, timeout):
    """For a terminal that never answered: what happened, how often, and what to check."""
    tries = "%d tr%s" % (e.attempts, "y" if e.attempts == 1 else "ies")
    if isinstance(e, TransportError):
        if e.reason == "timed out":
            return "timed out (%s of %g s each): is it running, and is this its address?" % (tries, timeout)
        return "%s (%s): is it running? (sentinel-emulator, or the box's power and Wi-Fi)" % (e.reason, tries)
    return "answered %d %s: %s (%s)" % (e.status, e.code, e.message, tries)


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if not args.timeout > 0:  # 0 makes the socket non-blocking; a negative one is meaningless
            raise ConfigError("--timeout must be more than 0 seconds (got %g)" % args.timeout)
        if args.retries < 0:
            raise ConfigError("--retries must be 0 or more (got %d)" % args.retries)
        if args.url is not None:
            check_url(args.url, "--url")
        t = resolve(url=args.url, key_id=args.key_id, secret_file=args.secret_file, config=args.config)
        fan_out = bool(args.also)
        clients = [
            AlarmClient(
                t.url,
                t.key_id,
                t.secret,
                timeout=args.timeout,
                retries=args.retries,
                on_retry=say_retry(t.url, fan_out),
            )
        ]
        for extra in args.also:
            e = resolve(config=extra, env={})
            clients.append(
                AlarmClient(
                    e.url,
                    e.key_id,
                    e.secret,
                    timeout=args.timeout,
                    retries=args.retries,
                    on_retry=say_retry(e.url, fan_out),
                )
            )
        if args.ack or args.unmute or args.heartbeat is not None:
            if sum((args.ack, args.unmute, args.heartbeat is not None)) > 1:
                raise ConfigError("give one of --ack, --unmute and --heartbeat")
            c = clients[0]
            if args.dry_run:
                from sentinel_core.receiver import PATH_ACK, PATH_HEARTBEAT, PATH_UNMUTE

                if args.ack:
                    path, body = PATH_ACK, {"long": args.clear}
                elif args.unmute:
                    path, body = PATH_UNMUTE, {}
                else:
                    path, body = PATH_HEARTBEAT, {"interval": args.heartbeat}
                if (args.ack or args.unmute) and args.key:
                    body["key"] = args.key
                print(curl_command(c.sign(path, body)))
                return EXIT_OK
            if args.ack:
                ack = c.ack(args.key, long=args.clear, by="sentinel-send")  # shown as who acknowledged
            elif args.unmute:
                ack = c.unmute(args.key)
            else:
                ack = c.heartbeat(args.heartbeat)
            said = "duplicate" if ack.duplicate else "ok"
            if args.ack and not args.clear:
                said += ", " + mute_words(c, ack, args.key)
            print("%s: %s" % (ack.url, said))
            return EXIT_OK
        alarm = build_alarm(args)
        if args.dry_run:
            from sentinel_core.receiver import PATH_ALARM

            for c in clients:
                print(curl_command(c.sign(PATH_ALARM, alarm.to_wire())))
            print("# valid for 300 s from now (the terminal's replay window)", file=sys.stderr)
            return EXIT_OK
        worst = EXIT_OK
        for d in send_many(clients, alarm):
            ack = d.ack
            if ack is not None:
                print(
                    "%s: delivered (%s%s, %d attempt%s)"
                    % (
                        d.url,
                        ack.level or "ok",
                        ", duplicate" if ack.duplicate else "",
                        ack.attempts,
                        "" if ack.attempts == 1 else "s",
                    )
                )
            elif isinstance(d.error, (TransportError, ServerError)):
                print("%s: FAILED: %s" % (d.url, unreachable(d.error, args.timeout)), file=sys.stderr)
                worst = max(worst, EXIT_UNREACHABLE)
            else:
                print("%s: FAILED: %s" % (d.url, d.error), file=sys.stderr)
                worst = max(worst, EXIT_REFUSED if isinstance(d.error, RefusedError) else EXIT_UNREACHABLE)
        return worst
    except ConfigError as e:
        print("sentinel-send: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    except RefusedError as e:
        print("sentinel-send: refused: %s" % e, file=sys.stderr)
        return EXIT_REFUSED
    except (TransportError, ServerError) as e:
        print("sentinel-send: %s: %s" % (e.url, unreachable(e, args.timeout)), file=sys.stderr)
        return EXIT_UNREACHABLE
    except SentinelError as e:
        print("sentinel-send: %s" % e, file=sys.stderr)
        return EXIT_UNREACHABLE
    except ValueError as e:
        print("sentinel-send: %s" % e, file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
