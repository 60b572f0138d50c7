"""Preset folders against crafted files: every size a preset declares (config.json's
model sizes, the vocabulary, the weights' datasets) is bounded and checked against the
weights file before Keras builds or loads anything; a `.keras` file (`load_captioner`)
gets the same checks.

The crafted presets (tests/support/crafted_presets.py, the bench's hostile rows) load
in one child process whose address space is capped 1.5 GiB above what a small preset's
build needs, with a time limit: a loader that trusted them would allocate gigabytes or
spin for minutes there instead of answering with one line.
"""

import json
import re

import pytest

from keras_saat.errors import KerasSaatError
from keras_saat.models import preset_checks
from keras_saat.text.vocabulary import Vocabulary
from tests.helpers import run_capped_cases
from tests.support import crafted_presets

WARM = (
    "import tempfile; from tests.support.crafted_presets import small_preset, _load_preset; "
    "_load_preset(small_preset(Path(tempfile.mkdtemp()) / 'warm'))"
)

# case -> what its one-line answer names (the file, the item and the limit it broke)
EXPECTED = {
    "preset_lstm_units_30000": r"config.json: lstm_units is 30000; .* from 0 to 8192",
    "keras_file_units_30000": r"model.keras: config.json: lstm_units is 30000; .* from 0 to 8192",
    "keras_file_h5_3_7gib": r"model.keras: model.weights.h5: dataset vars/0 declares \(1000000000,\) .*the file's size",
    "preset_units_8000_tiny_h5": r"model.weights.h5 holds \d+ weights; .* implies at least 576752128",
    "preset_config_json_1gb": r"config.json is 1073741824 bytes, over the 1048576",
    "preset_metadata_1gb": r"metadata.json is 1073741824 bytes, over the 1048576",
    "preset_vocab_1gb": r"vocabulary.txt is 1073741824 bytes, over the 8388608",
    "preset_vocab_200k_words": r"vocabulary.txt has over 100000 lines",
    "preset_vocab_1m_duplicates": r"vocabulary.txt has over 100000 lines",
    "preset_h5_3_7gib_dataset": r"model.weights.h5: dataset vars/0 declares \(1000000000,\) .*the file's size",
    "preset_h5_3_7gib_gzip": r"model.weights.h5: dataset vars/0 declares \(1000000000,\) .*2147483648 bytes \(compressed",
}


def test_every_crafted_preset_has_an_expectation():
    cases = crafted_presets.PRESET_CASES + crafted_presets.KERAS_FILE_CASES
    assert sorted(case.name for case in cases) == sorted(EXPECTED)


@pytest.fixture(scope="module")
def capped():
    """Every crafted preset loaded in one capped child, in turn."""
    return run_capped_cases(sorted(EXPECTED), warm=WARM, headroom_mb=1536, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_crafted_preset_is_refused_inside_the_memory_cap(capped, name):
    status, answers, stderr = capped
    assert name in answers, f"the loader died or ran out of time ({status}) on {name}: {stderr}"
    answer = answers[name]
    assert re.search(EXPECTED[name], answer), answer


@pytest.mark.parametrize("value", [-1, 1.5, "12", 8193])
def test_a_model_size_outside_its_limit_is_refused(tmp_path, value):
    with pytest.raises(KerasSaatError, match=r"lstm_units is .* from 0 to 8192"):
        preset_checks.check_model_sizes({"lstm_units": value}, 10, tmp_path / "config.json")


def test_the_largest_sizes_the_caps_allow_pass_and_a_real_preset_loads(tmp_path):
    """The caps leave room for the paper's sizes; a preset within them loads as before."""
    settings = {key: limit for key, limit in preset_checks.MODEL_LIMITS.items()}
    preset_checks.check_model_sizes(settings, preset_checks.MAX_VOCABULARY_WORDS, tmp_path)
    folder = crafted_presets.small_preset(tmp_path / "p")
    model = crafted_presets._load_preset(folder)
    assert model.decoder.lstm_units == 12 and len(model.vocabulary) == 15


def test_the_vocabulary_limits_count_lines_and_bytes(tmp_path):
    path = tmp_path / "vocabulary.txt"
    path.write_text("\n".join(["<pad>", "<unk>", "<start>", "<end>", "a", "b"]) + "\n")
    assert Vocabulary.load(path, max_words=6, max_bytes=100).words[-1] == "b"
    with pytest.raises(KerasSaatError, match="over 5 lines"):
        Vocabulary.load(path, max_words=5)
    with pytest.raises(KerasSaatError, match="over the 20 allowed"):
        Vocabulary.load(path, max_bytes=20)


def test_a_config_without_a_config_object_is_a_clear_error(tmp_path):
    folder = crafted_presets.small_preset(tmp_path / "p")
    (folder / "config.json").write_text(json.dumps([1, 2]))
    with pytest.raises(KerasSaatError, match="holds no Keras config"):
        crafted_presets._load_preset(folder)
