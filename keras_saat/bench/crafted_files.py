"""Crafted inputs for the hostile-input tests and the bench's hostile part."""

CASES = []  # HostileCase rows (keras_saat.bench.hostile)
