"""Package attributes imported on first use (PEP 562), so light imports stay light."""

import importlib


def lazy_getattr(package, exports, namespace):
    """A module `__getattr__` that imports `exports[name]` (a module path) when asked for
    `name` and caches it in `namespace` (the package's globals()); `package` names the
    package in the error."""

    def __getattr__(name):
        if name in exports:
            namespace[name] = getattr(importlib.import_module(exports[name]), name)
            return namespace[name]
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
