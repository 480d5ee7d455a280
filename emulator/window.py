"""The pygame window: the matrix as round LEDs, the ACK button, and the terminal's state in words.

It runs in the main thread (some platforms insist) and only reads the engine's published View. A click (or space /
A) is a press of the ACK button: a short one when released inside the button, a long one once held for the
long-press time; U unmutes. The core's debouncer stays with the box's mechanical button.
"""

import os
import shutil
import subprocess
import time

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import pygame

from emulator import facts
from emulator.facts import TO_SCREEN
from emulator.reading import is_chinese

BG = (18, 19, 24)
PANEL = (28, 30, 38)
INK = (225, 228, 235)
DIM = (130, 136, 150)
OFF_LED = (34, 35, 42)
GOOD = (60, 200, 90)
BAD = (235, 70, 60)
WARN = (240, 190, 40)
LEVEL_COLORS = {"P0": (230, 40, 40), "P1": (245, 160, 20), "NORMAL": (40, 190, 70)}

CJK_FONT_CANDIDATES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/wenquanyi/wqy-microhei/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
    "/usr/share/fonts/truetype/arphic/uming.ttc",
    "/System/Library/Fonts/PingFang.ttc",
    "/System/Library/Fonts/STHeiti Medium.ttc",
    "/Library/Fonts/Arial Unicode.ttf",
    "C:\\Windows\\Fonts\\msyh.ttc",
    "C:\\Windows\\Fonts\\simhei.ttf",
)

# The LEDs' drive levels through the sRGB curve, as the browser page shows them (emulator/facts.py).
_TO_SCREEN = TO_SCREEN


def find_cjk_font():
    """A font file that has Chinese glyphs, or None."""
    for path in CJK_FONT_CANDIDATES:
        if os.path.exists(path):
            return path
    if shutil.which("fc-list"):
        try:
            out = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, timeout=5).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        for line in out.splitlines():
            path = line.split(":")[0].strip()
            if path and os.path.exists(path):
                return path
    return None


ELLIPSIS = "\u2026"


def wrap_text(text, measure, width, max_lines=4):
    """Lines of at most width (measure(s) -> (w, h)); Chinese breaks between any two characters, other scripts
    between words (a word longer than a line is broken too). A text that needs more than max_lines ends its last
    line with an ellipsis, so a cut text never reads as a whole one."""
    chinese = is_chinese(text)
    tokens = list(text) if chinese else text.split(" ")
    sep = "" if chinese else " "
    lines = []
    line = ""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        trial = tok if not line else line + sep + tok
        if measure(trial)[0] <= width:
            line = trial
            i += 1
            continue
        if not line:
            # one word wider than the line: as many characters as fit
            n = 1
            while n < len(tok) and measure(tok[: n + 1])[0] <= width:
                n += 1
            lines.append(tok[:n])
            tokens[i] = tok[n:]
        else:
            lines.append(line)
            line = ""
        if len(lines) == max_lines:
            break
    else:
        if line:
            lines.append(line)
        return lines
    # cut: the last line ends with an ellipsis that fits
    last = lines[-1]
    while last and measure(last.rstrip() + ELLIPSIS)[0] > width:
        last = last[:-1]
    lines[-1] = last.rstrip() + ELLIPSIS
    return lines


class Window:
    def __init__(self, engine, url=None, title="GPU Sentinel terminal emulator", fps=30, log=None):
        self.engine = engine
        self.url = url
        self.fps = fps
        self.log = log or print
        pygame.display.init()
        pygame.font.init()
        w, h = engine.width, engine.height
        self.pitch = max(8, min(40, 448 // max(w, h)))
        self.margin = 24
        self.matrix_w = w * self.pitch
        self.matrix_h = h * self.pitch
        self.panel_x = self.margin * 2 + self.matrix_w
        self.panel_w = 380
        self.size = (self.panel_x + self.panel_w + self.margin, max(self.matrix_h + self.margin * 2, 500))
        self.screen = pygame.display.set_mode(self.size)
        pygame.display.set_caption(title)
        self.clock = pygame.time.Clock()
        self.font_title = pygame.font.Font(None, 34)
        self.font = pygame.font.Font(None, 24)
        self.font_small = pygame.font.Font(None, 20)
        self.cjk_path = find_cjk_font()
        self.font_text = pygame.font.Font(self.cjk_path, 22) if self.cjk_path else pygame.font.Font(None, 26)
        self.font_text_small = pygame.font.Font(self.cjk_path, 16) if self.cjk_path else self.font_small
        bx = self.panel_x + 20
        self.button_rect = pygame.Rect(bx, self.size[1] - self.margin - 92, self.panel_w - 40, 64)
        self.mouse_down = False
        self.key_down = False
        self.pressed_since = None
        self.long_fired = False
        self.running = True
        self.frames = 0
        self._led_cache = {}

    # -- input ------------------------------------------------------------------
    # A click or a key press is a press of the ACK button: completed (released) inside the button it is one short
    # press, however quick; held for the long-press time it is a long press at that moment, as on the box. The
    # debounce belongs to the box's mechanical button (sentinel_core.button), not to a mouse.
    def _long_s(self):
        button = getattr(self.engine, "button", None)
        return (getattr(button, "long_ms", 3000) or 3000) / 1000.0

    def _press(self, kind):
        self.engine.press_event(kind)

    def _down(self):
        if self.pressed_since is None:
            self.pressed_since = time.monotonic()
            self.long_fired = False

    def _up(self, inside=True):
        if not (self.mouse_down or self.key_down):
            if self.pressed_since is not None and not self.long_fired and inside:
                self._press("short")
            self.pressed_since = None
            self.long_fired = False

    def _check_long(self):
        if (
            self.pressed_since is not None
            and not self.long_fired
            and time.monotonic() - self.pressed_since >= self._long_s()
        ):
            self.long_fired = True
            self._press("long")

    def handle(self, event):
        if event.type == pygame.QUIT:
            self.running = False
        elif event.type == pygame.KEYDOWN:
            if event.key == pygame.K_ESCAPE:
                self.running = False
            elif event.key in (pygame.K_SPACE, pygame.K_a) and not self.key_down:
                self.key_down = True
                self._down()
            elif event.key == pygame.K_u:
                self._press("unmute")
        elif event.type == pygame.KEYUP:
            if event.key in (pygame.K_SPACE, pygame.K_a) and self.key_down:
                self.key_down = False
                self._up()
        elif event.type == pygame.MOUSEBUTTONDOWN and event.button == 1:
            if self.button_rect.collidepoint(event.pos):
                self.mouse_down = True
                self._down()
        elif event.type == pygame.MOUSEBUTTONUP and event.button == 1:
            if self.mouse_down:
                self.mouse_down = False
                # released outside the button: no press (a click the operator took back)
                self._up(inside=self.button_rect.collidepoint(event.pos))

    # -- drawing ------------------------------------------------------------------
    def _led(self, rgb):
        surf = self._led_cache.get(rgb)
        if surf is None:
            p = self.pitch
            surf = pygame.Surface((p, p), pygame.SRCALPHA)
            c = p // 2
            r = max(2, int(p * 0.40))
            if rgb == (0, 0, 0):
                pygame.draw.circle(surf, OFF_LED, (c, c), r)
            else:
                screen = (_TO_SCREEN[rgb[0]], _TO_SCREEN[rgb[1]], _TO_SCREEN[rgb[2]])
                glow = (screen[0], screen[1], screen[2], 70)
                pygame.draw.circle(surf, glow, (c, c), min(c, r + max(1, p // 10)))
                pygame.draw.circle(surf, screen, (c, c), r)
                hi = tuple(min(255, v + 60) for v in screen)
                pygame.draw.circle(surf, hi, (c - r // 3, c - r // 3), max(1, r // 4))
            if len(self._led_cache) > 4096:
                self._led_cache.clear()
            self._led_cache[rgb] = surf
        return surf

    def _draw_matrix(self, frame):
        frame_rect = pygame.Rect(self.margin - 8, self.margin - 8, self.matrix_w + 16, self.matrix_h + 16)
        pygame.draw.rect(self.screen, (8, 8, 10), frame_rect, border_radius=10)
        if frame is None:
            return
        rgb = frame.rgb
        p = self.pitch
        i = 0
        for y in range(frame.height):
            for x in range(frame.width):
                px = (rgb[i], rgb[i + 1], rgb[i + 2])
                i += 3
                self.screen.blit(self._led(px), (self.margin + x * p, self.margin + y * p))

    def _text(self, text, pos, font=None, color=INK):
        surf = (font or self.font).render(text, True, color)
        self.screen.blit(surf, pos)
        return surf.get_height()

    def _wrap(self, text, font, width, max_lines=4):
        return wrap_text(text, font.size, width, max_lines)

    def _dot(self, x, y, ok, label):
        color = DIM if ok is None else (GOOD if ok else BAD)
        pygame.draw.circle(self.screen, color, (x + 6, y + 8), 6)
        self._text(label, (x + 18, y), self.font_small, BAD if ok is False else (DIM if ok is None else INK))

    def _draw_panel(self, view):
        px = self.panel_x
        pygame.draw.rect(
            self.screen,
            PANEL,
            pygame.Rect(px, self.margin - 8, self.panel_w, self.size[1] - 2 * self.margin + 16),
            border_radius=10,
        )
        x = px + 20
        y = self.margin + 4
        y += self._text("GPU SENTINEL", (x, y), self.font_title) + 2
        if self.url:
            y += self._text(self.url, (x, y), self.font_small, DIM)
        y += 12
        snap = view.snapshot if view else {}
        f = facts.panel(view)
        lines = f["lines"]
        level = f["level"]
        pattern = f["pattern"] or "?"
        color = LEVEL_COLORS.get(level, (70, 75, 90))
        if pattern == "config_error" or pattern.startswith("health_"):
            color = WARN
        surf = self.font.render(lines["badge"], True, (0, 0, 0) if level or color == WARN else INK)
        rect = pygame.Rect(x, y, surf.get_width() + 20, surf.get_height() + 10)
        pygame.draw.rect(self.screen, color, rect, border_radius=6)
        self.screen.blit(surf, (x + 10, y + 5))
        self._text(lines["counts"], (rect.right + 12, y + 6), self.font_small, DIM)
        y = rect.bottom + 12

        shown = snap.get("shown") or {}
        active = snap.get("active") or []
        text = f["text"]
        if text:
            if is_chinese(text) and not self.cjk_path:
                text = (shown.get("text") or active[0].get("key") or "") + "  (install a CJK font for Chinese)"
            for line in self._wrap(text, self.font_text, self.panel_w - 40, max_lines=4):
                y += self._text(line.strip(), (x, y), self.font_text) + 2
        y += 10

        if f["speaking"]:
            said = lines["speech"]
            if is_chinese(said) and not self.cjk_path:
                said = said[: said.index(": ") + 2] + "(Chinese)"
            line = self._wrap(said, self.font_text_small, self.panel_w - 40, 1)
            y += self._text(line[0] if line else said, (x, y), self.font_text_small, WARN) + 4
        else:
            y += self._text(lines["speech"], (x, y), self.font_small, DIM) + 4
        if lines["silence"]:
            # Why the alarm the room sees is not being spoken.
            y += self._text(lines["silence"], (x, y), self.font_small, WARN) + 4
        if lines["voice"]:
            y += self._text(lines["voice"], (x, y), self.font_small, BAD) + 4
        if f["mute"]["active"]:
            y += self._text(lines["mute"], (x, y), self.font, WARN) + 4
        else:
            y += self._text(lines["mute"], (x, y), self.font_small, DIM) + 4
        if lines["quiet"]:
            y += self._text(lines["quiet"], (x, y), self.font_small, WARN if f["quiet"]["active"] else DIM) + 4
        y += 6
        h = f["health"]
        cx = x
        for label in ("clock", "network", "voice", "heartbeat"):
            self._dot(cx, y, h[label], label)
            cx += 30 + self.font_small.size(label)[0]
        self._draw_button(view)

    def _draw_button(self, view):
        pressed = (view.button_pressed if view else False) or self.mouse_down or self.key_down
        r = self.button_rect
        base = (200, 55, 45) if not pressed else (130, 35, 30)
        pygame.draw.rect(self.screen, (10, 10, 12), r.move(0, 4), border_radius=14)
        pygame.draw.rect(self.screen, base, r.move(0, 3 if pressed else 0), border_radius=14)
        label = self.font_title.render("ACK", True, INK)
        self.screen.blit(label, (r.centerx - label.get_width() // 2, r.y + 10 + (3 if pressed else 0)))
        hint = "click or space / A: mute 15 min   hold 3 s: clear   U: unmute"
        sub = self.font_small.render(hint, True, DIM)
        self.screen.blit(sub, (r.centerx - sub.get_width() // 2, r.bottom + 6))
        if self.pressed_since is not None:
            held = time.monotonic() - self.pressed_since
            frac = min(1.0, held / 3.0)
            bar = pygame.Rect(r.x + 12, r.bottom - 12, int((r.width - 24) * frac), 5)
            pygame.draw.rect(self.screen, WARN if frac < 1 else GOOD, bar, border_radius=2)

    def draw(self):
        view = self.engine.view
        self.screen.fill(BG)
        self._draw_matrix(view.frame if view else None)
        self._draw_panel(view)
        pygame.display.flip()

    def save(self, path):
        pygame.image.save(self.screen, path)

    def run(self, max_frames=None, screenshot=None, screenshot_at=None, should_stop=None):
        """The window loop. max_frames/screenshot(_at frame) let tests and the docs run it unattended. A press still
        held when it returns has sent nothing (a press acts on release, or at the long-press time)."""
        while self.running and self.engine.alive and not (should_stop and should_stop()):
            for event in pygame.event.get():
                self.handle(event)
            self._check_long()
            self.draw()
            self.frames += 1
            if screenshot and screenshot_at is not None and self.frames == screenshot_at:
                self.save(screenshot)
                self.log("window: screenshot saved to %s" % screenshot)
            if max_frames is not None and self.frames >= max_frames:
                break
            self.clock.tick(self.fps)

    def close(self):
        pygame.display.quit()
