"""Helpers the tests and the benches share (not shipped): a free loopback port, waiting for a port to listen, and
a real terminal on loopback (the core's Receiver behind http.server) that can be slow, fail or act like a board."""
