# The state file on flash: the state machine's export_state() as JSON. Written to a temporary file and renamed,
# so a power cut during a write leaves the previous state, never half a file.
import json
import os


class Store:
    def __init__(self, path="/state.json"):
        self.path = path
        self.tmp = path + ".tmp"
        self.writes = 0
        self.last_error = None

    def load(self):
        """The saved dict, or None when there is none or it is unreadable (the reason in last_error)."""
        # Parsed from the open file: MicroPython's json.load reads the stream as it goes, so the file's whole text
        # (~2.4 KB with 16 active alarms) never sits in the heap beside what it is parsed into, at boot's peak.
        try:
            with open(self.path) as f:
                d = json.load(f)
        except OSError:
            return None
        except ValueError:
            self.last_error = "%s is not valid JSON: ignored" % self.path
            return None
        if not isinstance(d, dict):
            self.last_error = "%s does not hold an object: ignored" % self.path
            return None
        return d

    def save(self, d):
        # Streamed into the file: the whole text never sits in the heap beside the request being served.
        return self.save_with(lambda f: json.dump(d, f))

    def save_with(self, fill):
        """Write the file with fill(f), which writes the JSON document into the open text file f."""
        try:
            with open(self.tmp, "w") as f:
                fill(f)
            os.rename(self.tmp, self.path)
        except OSError as e:
            self.last_error = "writing %s: %s" % (self.path, e)
            return False
        self.writes += 1
        self.last_error = None
        return True
