"""Package attributes imported on first use (PEP 562), so light imports stay light."""

import importlib


def lazy_getattr(package, exports, namespace):
    """A module `__getattr__` that imports `exports[name]` (a module path) when asked for `name`.

    Args:
        package: str. The package's name, for the error message.
        exports: dict. Attribute name -> the module that defines it.
        namespace: dict. The package's globals(); a loaded attribute is cached there.
    """

    def __getattr__(name):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
