"""`import keras_saat` registers the serializable classes with Keras, without importing Keras.

`keras.saving.load_model` finds a custom class only once its module has run; importing
those modules imports TensorFlow, which the command line's start and the serving
clients must not pay for. So registration happens now when Keras is loaded, else right
after its first import completes, watched from `sys.meta_path`.
"""

import importlib
import sys
import threading
import warnings

# Every module that defines a `register_keras_serializable` class (a test keeps the list whole).
SERIALIZABLE_MODULES = (
    "keras_saat.encoders.add_coords",
    "keras_saat.encoders.folding",
    "keras_saat.encoders.image_encoder",
    "keras_saat.images.photometry",
    "keras_saat.layers.feature_familiarity",
    "keras_saat.layers.hard_attention",
    "keras_saat.layers.lstm_decoder",
    "keras_saat.layers.soft_attention",
    "keras_saat.models.captioner",
    "keras_saat.training.optimization",
)

# Imports whose completion may leave Keras loaded. Registration waits until the outermost
# one has run, so it never imports a module of ours that is half-way through its own code.
_WATCHED = ("keras", "tensorflow", "keras_saat.")


def _register_quietly():
    """Imports SERIALIZABLE_MODULES (each registers its classes), warning instead of
    raising: the triggering import is the user's."""
    try:
        for name in SERIALIZABLE_MODULES:
            importlib.import_module(name)
    except Exception as err:  # any failure of ours: reported, never raised
        warnings.warn(
            f"keras_saat could not register its classes with Keras ({type(err).__name__}: "
            f"{err}); `from keras_saat import Captioner` before keras.saving.load_model",
            RuntimeWarning,
            stacklevel=2,
        )


def _initializing(name):
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _keras_loaded(finished=None):
    """Whether Keras (and TensorFlow, when it is importing Keras) is done importing;
    `finished` names a module whose code has just run to its end."""
    running = [n for n in ("keras", "tensorflow") if n != finished and _initializing(n)]
    return "keras" in sys.modules and not running


class _Loader:
    """Runs the wrapped loader, then registers when the outermost watched import ends
    (duck-typed: importlib.abc would import importlib.resources into every start)."""

    def __init__(self, loader, watcher):
        self._loader, self._watcher = loader, watcher

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with self._watcher.lock:
            self._watcher.depth += 1
        try:
            self._loader.exec_module(module)
        finally:
            with self._watcher.lock:
                self._watcher.depth -= 1
                outermost = not self._watcher.depth
            if outermost:  # also after a failed import that left Keras loaded
                self._watcher.finished(module.__name__)

    def __getattr__(self, name):  # resource readers, get_source, is_package, ...
        return getattr(self._loader, name)


class _KerasWatcher:
    """Finds nothing itself: wraps the loaders of watched imports found by the next finders."""

    def __init__(self):
        self.depth = 0
        self.lock = threading.Lock()

    def find_spec(self, fullname, path=None, target=None):
        if not (fullname in _WATCHED[:2] or fullname.startswith(_WATCHED[2])):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self)
                return spec
        return None

    def finished(self, name):
        """The outermost watched import, `name`, has run: register once Keras is loaded."""
        if _keras_loaded(name) and self in sys.meta_path:
            sys.meta_path.remove(self)
            _register_quietly()


def register_with_keras():
    """Registers now when Keras is loaded, else as soon as its import completes."""
    if _keras_loaded():
        _register_quietly()
    elif not any(isinstance(f, _KerasWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _KerasWatcher())


def forgo():
    """For a process that reads no Keras file (the SavedModel server): nothing is registered."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _KerasWatcher)]
