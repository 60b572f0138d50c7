"""Where a trained model is: a workdir, a `.keras` file or a preset folder, classified
once without importing TensorFlow."""

import dataclasses
from pathlib import Path

from keras_saat.errors import KerasSaatError
from keras_saat.models.preset import CONFIG_FILE as PRESET_CONFIG_FILE
from keras_saat.models.preset import WEIGHTS_FILE, is_preset
from keras_saat.workdir import CONFIG_FILE, MODEL_FILE

WORKDIR = "workdir"
KERAS_FILE = "keras_file"
PRESET = "preset"
KERAS_SUFFIX = ".keras"

GIVE = "give a trained workdir, a .keras file or a preset folder"


@dataclasses.dataclass(frozen=True)
class TrainedModelPath:
    """A path to a trained model and what it holds.

    Args:
        path: Path. The path as given.
        kind: str. `WORKDIR` (config.yaml and model.keras), `KERAS_FILE` (a `.keras` file,
            or a folder that holds only a model.keras) or `PRESET` (config.json and
            model.weights.h5).
        model_file: Path or None. The `.keras` file to load: a workdir's model.keras, the
            file itself; None for a preset.
    """

    path: Path
    kind: str
    model_file: Path | None = None

    @classmethod
    def of(cls, path, flag=None):
        """What `path` holds; a KerasSaatError naming it (after `flag`, "--workdir" or
        "--preset") when it holds no trained model."""
        if "://" in str(path):  # before Path, which folds "gs://" into "gs:/"
            named = f"{flag} {path}" if flag else str(path)
            raise KerasSaatError(
                f"{named}: trained models load from local files only; download it first"
            )
        path = Path(path)
        named = f"{flag} {path}" if flag else str(path)
        if path.is_file():
            if path.suffix != KERAS_SUFFIX:
                raise KerasSaatError(
                    f"{named} is a file but not a {KERAS_SUFFIX} file (model.save or "
                    f"ModelCheckpoint writes one); {GIVE}"
                )
            return cls(path, KERAS_FILE, path)
        if not path.is_dir():
            raise KerasSaatError(f"{named}: no such file or folder; {GIVE}")
        if is_preset(path):
            return cls(path, PRESET)
        model_file = path / MODEL_FILE
        if (path / CONFIG_FILE).is_file():
            if not model_file.is_file():
                raise KerasSaatError(
                    f"{named} has no {MODEL_FILE}: training saves it after its first epoch; "
                    "run `keras-saat train` there until it has"
                )
            return cls(path, WORKDIR, model_file)
        if model_file.is_file():  # a workdir's model without its config: the file alone
            return cls(path, KERAS_FILE, model_file)
        raise KerasSaatError(
            f"{named} is neither a workdir (no {CONFIG_FILE}) nor a preset folder (no "
            f"{PRESET_CONFIG_FILE} and {WEIGHTS_FILE}): no saved model there; {GIVE}"
        )

    def __fspath__(self):
        return str(self.path)

    __str__ = __fspath__
