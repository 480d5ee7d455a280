"""GPU Sentinel terminal emulator: the shared core behind flask (emulator.front), pygame, pyttsx3 (docs/EMULATOR.md)."""

import os

# pygame prints a greeting on import; the emulator's log is for alarms.
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
