# The ACK button: a GPIO with pull-up read by polling (ESP32 pin IRQs are soft anyway and bounce), and the optional
# lamp in the button that shows there is something to acknowledge. Only the pins: debouncing the raw level into
# "short"/"long" presses is the core's (sentinel_core.button, driven by sentinel_core.shell).


class ButtonPoller:
    def __init__(self, pin, active_low=True, lamp=None):
        self.pin = pin
        self.active_low = active_low
        self.lamp = lamp
        self._lamp_on = None

    def pressed(self):
        """The raw level: True while the button is held down (bounces included)."""
        v = self.pin.value()
        return (v == 0) if self.active_low else (v == 1)

    def set_lamp(self, on):
        if self.lamp is None or on == self._lamp_on:
            return
        self._lamp_on = on
        self.lamp.value(1 if on else 0)
