"""Registry: a name -> entry table for one kind of pluggable thing.

Attention types, backbones, dataset readers and export formats each keep one and expose
its methods under their own names (`register_attention = ATTENTIONS.register`). Config
choices come from `names()`. An entry may be the text "package.module:attribute",
imported when first asked for, so a registry of heavy things stays light.
"""

import importlib

from keras_saat.errors import KerasSaatError, did_you_mean


class Registry:
    """Entries of one kind, by name, in registration order (the built-in ones first).

    Args:
        kind: str. What an entry is, for error messages ("attention", "dataset reader").
        case_sensitive: bool. False: names are looked up in lower case. Defaults to True.
        hint: callable or None. `hint(name)` -> extra text for the unknown-name error
            (how to install what provides it, say). Defaults to None.
    """

    def __init__(self, kind, case_sensitive=True, hint=None):
        self.kind = kind
        self.case_sensitive = case_sensitive
        self.hint = hint
        self._entries = {}

    def _key(self, name):
        return str(name) if self.case_sensitive else str(name).lower()

    def register(self, name, entry):
        """Adds (or replaces) the entry `name`; returns the entry, so it can decorate."""
        self._entries[self._key(name)] = entry
        return entry

    def names(self):
        """The registered names, in registration order (the built-in ones first)."""
        return list(self._entries)

    def get(self, name):
        """The entry registered as `name`; a KerasSaatError naming the nearest if unknown."""
        key = self._key(name)
        if key not in self._entries:
            extra = self.hint(key) if self.hint else ""
            raise KerasSaatError(
                f"unknown {self.kind} {str(name)!r}{did_you_mean(key, self._entries)}{extra}; "
                f"registered: {', '.join(self._entries)}"
            )
        entry = self._entries[key]
        if isinstance(entry, str) and ":" in entry:
            module, attribute = entry.split(":", 1)
            entry = self._entries[key] = getattr(importlib.import_module(module), attribute)
        return entry
