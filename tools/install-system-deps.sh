#!/usr/bin/env bash
# Debian packages the test suite drives for real: espeak-ng (pyttsx3's speech engine on Linux, for WAV output),
# sox (measures the WAVs), prometheus-alertmanager (the gateway's end-to-end test against a real Alertmanager),
# prometheus (promtool and the server, for deploy/prometheus), slurm-wlm and munge (sentinel-remedy's real Slurm).
# `install-system-deps.sh emulator` (what `make emulator` runs): only what the emulator itself needs at run time
# (python3-venv, espeak-ng, a CJK font), not the test suite's servers and browser.
set -euo pipefail
mode="${1:-all}"
need=()
# Debian's system Python needs python3-venv for `python3 -m venv` (ensurepip is split out of python3 there).
python3 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v espeak-ng >/dev/null 2>&1 || need+=(espeak-ng)
[ -e /usr/lib/x86_64-linux-gnu/libespeak-ng.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libespeak-ng.so.1 ] || need+=(libespeak-ng1)
if [ "$mode" != emulator ]; then
# curl: the HTTP conformance suite sends a chunked body with it (tests/test_http_conformance.py).
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v sox >/dev/null 2>&1 || need+=(sox)
# Headless chromium: the browser test of the emulator's page (tests/test_emulator_browser.py, over DevTools).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# prometheus: promtool checks and unit-tests deploy/prometheus; the real server scrapes in the deploy e2e test.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# slurm-wlm (slurmctld, slurmd, scontrol, sbatch...) and munge: sentinel-remedy's tests drain nodes and requeue jobs
# on a real single-host Slurm (testkit/slurm_live.py); slurm-client alone lacks the daemons.
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need+=(munge)
fi
# A CJK font so the emulator's window shows Chinese alarm text (without it: the ASCII label only).
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || need+=(fonts-wqy-microhei)
# `--bench` (make bench): golang-go builds the RFC's Go gateway and wrk drives both in bench/bench_gateway_rfc.py.
# The tests need neither, so a plain setup does not install them.
if [ "${1:-}" = "--bench" ]; then
  command -v go >/dev/null 2>&1 || need+=(golang-go)
  command -v wrk >/dev/null 2>&1 || need+=(wrk)
  # gcc-multilib: gcc -m32 for a 32-bit MicroPython Unix port with the firmware frozen (bench/bench_firmware_heap.py's
  # SENTINEL_FROZEN_MICROPYTHON figures: the ESP32's object sizes; docs/FIRMWARE.md "Memory" says how to build it).
  [ "$(uname -m)" != x86_64 ] || compgen -G "/usr/lib/gcc/x86_64-linux-gnu/*/32/crtbegin.o" >/dev/null || need+=(gcc-multilib)
fi
if [ ${#need[@]} -eq 0 ]; then
  echo "Debian packages: everything needed is installed"
  exit 0
fi
echo "installing Debian packages: ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "+ $SUDO apt-get update"
$SUDO apt-get update -qq
echo "+ $SUDO apt-get install --no-install-recommends ${need[*]}"
# apt's own progress lines (Get:, Unpacking, Setting up) show what it fetches and installs
$SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
