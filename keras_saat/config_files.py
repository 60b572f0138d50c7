"""Config text: YAML files read within bounds, `--set` overrides and the packaged recipes."""

from pathlib import Path

import yaml

from keras_saat.config_ranges import shown
from keras_saat.errors import KerasSaatError, did_you_mean
from keras_saat.io_utils import YAML_MAX_BYTES, load_yaml


def parse_override(text):
    """Parses 'section.key=value' into a nested dict; the value is read as YAML."""
    path, equals, raw = text.partition("=")
    parts = path.strip().split(".")
    if not equals or not all(parts) or len(parts) > 2:
        raise KerasSaatError(
            f"--set {shown(text)}: expected section.key=value, e.g. train.epochs=5"
        )
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())[:300]
        raise KerasSaatError(
            f"--set {shown(text)}: the value is not valid YAML ({reason})"
        ) from None
    return {parts[0]: value} if len(parts) == 1 else {parts[0]: {parts[1]: value}}


def read_config_file(path):
    """The YAML document in `path`, read only up to YAML_MAX_BYTES (`load_yaml`'s bounds)."""
    with open(path, "rb") as file:
        data = file.read(YAML_MAX_BYTES + 1)
    if len(data) > YAML_MAX_BYTES:
        raise KerasSaatError(
            f"config file {path} is over {YAML_MAX_BYTES // 1024} KiB; a config is a few lines"
        )
    try:
        return load_yaml(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise KerasSaatError(f"config file {path} is not UTF-8 text") from None
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())[:300]
        raise KerasSaatError(f"config file {path} is not valid YAML: {reason}") from None


def _recipes():
    from importlib import resources

    return resources.files("keras_saat") / "recipes"


def recipe_names():
    """The packaged experiment configs, by name ("shapes_soft", ...)."""
    return sorted(p.name[:-5] for p in _recipes().iterdir() if p.name.endswith(".yaml"))


def recipe_path(name):
    """The file of a packaged experiment config ("shapes_soft", "shapes_hard")."""
    path = _recipes() / f"{name}.yaml"
    if not path.is_file():
        raise KerasSaatError(
            f"no recipe {name!r}{did_you_mean(name, recipe_names())}; "
            f"recipes: {', '.join(recipe_names())}"
        )
    return Path(str(path))
