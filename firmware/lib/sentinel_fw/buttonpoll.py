# The ACK button: a GPIO with pull-up read by polling (ESP32 pin IRQs are soft anyway and bounce); the core's
# Button turns raw levels into "short"/"long" events. The optional lamp in the button shows there is something to
# acknowledge.


class ButtonPoller:
    def __init__(self, pin, debouncer, active_low=True, lamp=None):
        self.pin = pin
        self.debouncer = debouncer
        self.active_low = active_low
        self.lamp = lamp
        self._lamp_on = None
        self.events = 0

    def poll(self, t_ms):
        """None, "short" or "long"."""
        v = self.pin.value()
        pressed = (v == 0) if self.active_low else (v == 1)
        ev = self.debouncer.sample(pressed, t_ms)
        if ev is not None:
            self.events += 1
        return ev

    def set_lamp(self, on):
        if self.lamp is None or on == self._lamp_on:
            return
        self._lamp_on = on
        self.lamp.value(1 if on else 0)
