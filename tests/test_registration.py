"""`import keras_saat` is all `keras.saving.load_model` needs, whatever is imported first."""

import ast
import subprocess
import sys

import pytest

from keras_saat.registration import SERIALIZABLE_MODULES
from tests.helpers import ROOT


def run_python(code, *argv):
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def registering_modules():
    """The modules whose source applies `register_keras_serializable`."""
    found = set()
    for path in (ROOT / "keras_saat").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "register_keras_serializable":
                module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
                found.add(module)
    return found


def test_every_registering_module_is_listed():
    assert registering_modules() == set(SERIALIZABLE_MODULES)


def test_import_keeps_keras_and_tensorflow_out():
    out = run_python(
        "import sys, keras_saat, keras_saat.serving.rest_client\n"
        "print(sorted(m for m in ('keras', 'tensorflow') if m in sys.modules))"
    )
    assert out.strip() == "[]"


ORDERS = {
    "keras_saat, then keras": "import keras_saat\nimport keras\n",
    "keras, then keras_saat": "import keras\nimport keras_saat\n",
    "keras_saat, then tensorflow": "import keras_saat\nimport tensorflow\nimport keras\n",
}


@pytest.fixture(scope="module")
def saved_model_file(tmp_path_factory):
    from tests.helpers import small_model

    model, _ = small_model()
    path = tmp_path_factory.mktemp("registration") / "model.keras"
    model.save(path)
    return path


@pytest.mark.parametrize("order", list(ORDERS))
def test_load_model_after_import_alone(order, saved_model_file):
    """A fresh process reads our `.keras` file with only `import keras_saat` (no class named)."""
    code = ORDERS[order] + (
        "import sys\n"
        "model = keras.saving.load_model(sys.argv[1])\n"
        "print(type(model).__module__, type(model).__name__, len(model.vocabulary))\n"
    )
    out = run_python(code, str(saved_model_file))
    assert out.split() == ["keras_saat.models.captioner", "Captioner", "15"]
