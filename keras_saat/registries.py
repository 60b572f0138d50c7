"""Registry: a name -> entry table for one kind of pluggable thing.

The attention types, dataset readers and export formats each keep one; config choices
come from `names()`, and an unknown name is a KerasSaatError naming the nearest one.
"""

from keras_saat.errors import KerasSaatError, did_you_mean


class Registry:
    """Entries of one kind, by name, in registration order (the built-in ones first).

    Args:
        kind: str. What an entry is, for error messages ("attention", "dataset reader").
    """

    def __init__(self, kind):
        self.kind = kind
        self._entries = {}

    def register(self, name, entry):
        """Adds (or replaces) an entry; returns it, so it can decorate a class or function."""
        self._entries[str(name)] = entry
        return entry

    def names(self):
        return list(self._entries)

    def get(self, name):
        if name not in self._entries:
            raise KerasSaatError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, self._entries)}; "
                f"registered: {', '.join(self._entries)}"
            )
        return self._entries[name]
