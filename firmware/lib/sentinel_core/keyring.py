# Several key ids at once, so a secret can be rotated without a moment where alarms are refused.
from sentinel_core.signing import Signer


class KeyRing:
    def __init__(self, keys=None):
        self._signers = {}
        if keys:
            for key_id in keys:
                self.add(key_id, keys[key_id])

    def add(self, key_id, secret):
        if not isinstance(key_id, str) or not 0 < len(key_id) <= 64 or not all("!" <= c <= "~" for c in key_id):
            # What X-API-Key can carry (docs/PROTOCOL.md): a key id outside it could never be used.
            raise ValueError("key id must be 1..64 visible ASCII characters")
        self._signers[key_id] = Signer(secret)

    def remove(self, key_id):
        self._signers.pop(key_id, None)

    def signer(self, key_id):
        """The Signer for key_id, or None for an unknown key."""
        return self._signers.get(key_id)

    def ids(self):
        return sorted(self._signers)

    def __len__(self):
        return len(self._signers)

    def __repr__(self):
        # Never the secrets.
        return "KeyRing(%s)" % ", ".join(self.ids())
