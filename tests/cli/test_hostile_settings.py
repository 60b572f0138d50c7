"""Hostile command-line inputs: special files named like images, alias bombs and deep
nesting in YAML, absurd numbers in every numeric config key.

The attacks that would hang or fill memory run in a child process whose address
space is capped (RLIMIT_AS) a little above what it holds after its imports, and with
a time limit; the unbounded code fails there (MemoryError, a kill, or the timeout)
where the bounded code answers in a line.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import typing

import pytest

from keras_saat.cli import main
from keras_saat.config import ExperimentConfig, load_config, save_config
from keras_saat.config_ranges import RANGES
from keras_saat.errors import KerasSaatError
from keras_saat.workdir import CONFIG_FILE
from tests.helpers import ROOT, cap_address_space
from tests.support.crafted_settings import (
    billion_laughs,
    deep_nesting,
    special_image_files,
)

HEADROOM_MB = 512  # address space over what the child holds after its imports
TIME_LIMIT_S = 120  # the unbounded code needs minutes, or never ends (a FIFO)


def run_capped(setup, body, headroom_mb=HEADROOM_MB):
    """Runs `setup` (imports), caps the address space, runs `body`; returns its stdout."""
    script = "\n".join(
        [
            textwrap.dedent(setup),
            cap_address_space(headroom_mb * 1024 * 1024),
            textwrap.dedent(body),
        ]
    )
    # Few malloc arenas: each reserves 64 MiB of address space for a thread that mallocs.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["MALLOC_ARENA_MAX"] = "2"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT_S,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish within {TIME_LIMIT_S} s")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def config_error_capped(path):
    """The one-line error `load_config(path)` gives, in a capped child."""
    return run_capped(
        "from keras_saat.config import load_config\nfrom keras_saat.errors import KerasSaatError",
        f"""
        try:
            load_config({str(path)!r})
        except KerasSaatError as err:
            print(err)
        """,
    )


def test_special_files_named_like_images_are_error_rows_and_the_image_is_read(tmp_path):
    paths = special_image_files(tmp_path)
    out = run_capped(
        "import json, sys\nfrom keras_saat.images.image_files import encoded_images, find_images",
        """
        rows = {n: [len(d), e] for n, d, e in encoded_images(find_images(sys.argv[1:]))}
        print(json.dumps(rows))
        """.replace("sys.argv[1:]", repr([str(p) for p in paths.values()])),
    )
    rows = json.loads(out)
    assert rows[str(paths["image"])][1] == "" and rows[str(paths["image"])][0] > 0
    assert rows[str(paths["dev_zero"])] == [0, "a device, not a regular file; give an image file"]
    assert rows[str(paths["fifo"])] == [0, "a FIFO, not a regular file; give an image file"]
    assert "8589934592 bytes, over the 64 MiB" in rows[str(paths["sparse"])][1]
    assert "a folder with no image files" in rows[str(paths["folder"])][1]


def test_a_folder_of_special_files_reads_only_its_image(tmp_path):
    paths = special_image_files(tmp_path)
    out = run_capped(
        "import json\nfrom keras_saat.images.image_files import encoded_images, find_images",
        f"""
        rows = {{n: e for n, d, e in encoded_images(find_images([{str(paths["image"].parent)!r}]))}}
        print(json.dumps(rows))
        """,
    )
    rows = json.loads(out)
    assert rows.pop(str(paths["image"])) == ""
    assert len(rows) == 3 and all("not a regular file" in e or "64 MiB" in e for e in rows.values())


def test_an_empty_folder_alone_is_still_a_command_error(tmp_path):
    from keras_saat.images.image_files import find_images

    (tmp_path / "y.png").mkdir()
    with pytest.raises(KerasSaatError, match="holds no image files"):
        find_images([tmp_path / "y.png"])


@pytest.mark.parametrize(
    "text, error",
    [
        (billion_laughs(), "an alias (*name) at line 3; aliases are not allowed"),
        (deep_nesting(), "nested more than 32 levels deep at line 1"),
    ],
    ids=["billion_laughs", "deep_nesting"],
)
def test_yaml_bombs_are_one_line_errors(tmp_path, text, error):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    out = config_error_capped(path)
    assert out.strip() == f"config file {path} is not valid YAML: {error}"


def test_an_alias_bomb_in_a_set_value_is_refused():
    bomb = "[" + ", ".join(["&a [1, 1]"] + ["*a"] * 3) + "]"
    with pytest.raises(KerasSaatError, match="aliases are not allowed"):
        load_config(None, [f"name={bomb}"])


def test_a_sparse_8gb_config_file_is_refused_unread(tmp_path):
    path = tmp_path / "config.yaml"
    with open(path, "wb") as file:
        file.truncate(8 * 1024**3)
    out = config_error_capped(path)
    assert out.strip() == f"config file {path} is over 1024 KiB; a config is a few lines"


def test_an_integer_of_5000_digits_is_a_one_line_error():
    with pytest.raises(KerasSaatError) as caught:
        load_config(None, ["train.epochs=" + "9" * 5000])
    message = str(caught.value)
    assert "the value is not valid YAML (a value that cannot be read" in message
    assert len(message) < 600 and "\n" not in message


def test_a_long_value_is_shortened_in_the_message():
    with pytest.raises(KerasSaatError) as caught:
        load_config(None, ["train.epochs=" + "x" * 100_000])
    assert len(str(caught.value)) < 400 and "train.epochs" in str(caught.value)


def numeric_keys():
    """(section, key, annotation types) of every int or float config key."""
    hints = typing.get_type_hints(ExperimentConfig)
    for section in ("model", "data", "train", "decode", "export"):
        for key, annotation in typing.get_type_hints(hints[section]).items():
            kinds = typing.get_args(annotation) or (annotation,)
            if int in kinds or float in kinds:
                yield section, key, kinds


def test_every_numeric_key_has_a_range_its_default_is_in():
    config = ExperimentConfig()
    for section, key, _ in numeric_keys():
        assert (section, key) in RANGES, f"{section}.{key} has no range"
        default = getattr(getattr(config, section), key)
        if default is not None:
            load_config(None, [f"{section}.{key}={default}"])  # accepted


ABSURD = ["0", "-1", str(2**31), str(2**63), "1.0e308", ".nan", "-.inf"]


@pytest.mark.parametrize("section, key", [(s, k) for s, k, _ in numeric_keys()])
def test_absurd_numbers_are_one_line_errors_naming_the_key(section, key):
    low, high, *open_low = RANGES[section, key]
    for text in ABSURD:
        try:
            value = float(text.replace(".nan", "nan").replace(".inf", "inf"))
        except ValueError:
            value = None
        inside = value is not None and not math.isnan(value)
        inside = inside and (low < value if open_low else low <= value) and value <= high
        if inside:
            load_config(None, [f"{section}.{key}={text}"])
            continue
        with pytest.raises(KerasSaatError) as caught:
            load_config(None, [f"{section}.{key}={text}"])
        message = str(caught.value)
        assert f"config {section}.{key}:" in message and "\n" not in message
        assert "out of range" in message or "is not a valid" in message


def test_export_refuses_a_negative_max_pixels_before_it_loads_the_model(tmp_path, capsys):
    workdir = tmp_path / "run"
    workdir.mkdir()
    save_config(ExperimentConfig(), workdir / CONFIG_FILE)
    (workdir / "model.keras").write_bytes(b"")  # never read: the flags are checked first
    code = main(["export", "--workdir", str(workdir), "--out", "out", "--max-pixels", "-1"])
    assert code == 2 and capsys.readouterr().err.strip() == (
        "keras-saat: error: config export.max_pixels: -1 is out of range; "
        "give an integer from 1 to 1000000000"
    )


@pytest.mark.slow
def test_train_refuses_a_shuffle_buffer_of_2_31_before_it_starts(tmp_path):
    # In a child process: training with that buffer ends in a segmentation fault.
    argv = ["train", "--config", "shapes_soft", "--workdir", str(tmp_path / "run")]
    argv += ["--set", f"data.shuffle_buffer={2**31}"]
    done = subprocess.run(
        [sys.executable, "-m", "keras_saat.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "keras-saat: error: config data.shuffle_buffer: 2147483648 is out of range; "
        "give an integer from 0 to 100000000"
    )


@pytest.mark.slow
def test_caption_gives_every_special_file_a_row_and_captions_the_image(small_preset, tmp_path):
    paths = special_image_files(tmp_path)
    out = tmp_path / "captions.jsonl"
    argv = ["caption", "--preset", str(small_preset), *map(str, paths.values()), "--out", str(out)]
    run_capped(
        "import sys\nfrom keras_saat.cli import main",
        f"sys.exit(0 if main({argv!r}) == 2 else 1)",
        headroom_mb=4096,
    )
    rows = {row["image"]: row for row in map(json.loads, out.read_text().splitlines())}
    # Captioned: a string (an untrained model's may be empty, by its random weights) and no error.
    captioned = rows.pop(str(paths["image"]))
    assert isinstance(captioned["caption"], str) and not captioned["error"], captioned
    assert sorted(rows) == sorted(str(p) for k, p in paths.items() if k != "image")
    assert all(row["caption"] is None and row["error"] for row in rows.values())


@pytest.mark.slow
def test_extraction_skips_a_dataset_image_over_the_file_limit(shapes_dir, tmp_path):
    shutil.copytree(shapes_dir, tmp_path / "shapes")
    big = sorted((tmp_path / "shapes" / "images").glob("*.png"))[0]
    with open(big, "wb") as file:
        file.truncate(8 * 1024**3)  # sparse: no disk, but 8 GiB if read
    out = run_capped(
        """
        import tensorflow as tf
        from keras_saat.data import read_karpathy
        from keras_saat.data.feature_cache.feature_extraction import extract_features
        from keras_saat.encoders import ImageEncoder
        encoder = ImageEncoder("shapes_cnn")
        """,
        f"""
        dataset = read_karpathy({str(tmp_path / "shapes" / "dataset_shapes.json")!r})
        cache, skips = extract_features(
            encoder, dataset, {str(tmp_path / "c")!r}, splits=("train",), log=lambda _: None
        )
        print(cache.count("train"), dict(skips.where))
        """,
        headroom_mb=3072,
    )
    assert out.startswith("39 ") and "image file over 64 MiB" in out and big.name in out


def test_running_out_of_memory_is_named_in_one_line():
    import tensorflow as tf

    from keras_saat.errors import out_of_memory

    for err in (MemoryError(), tf.errors.ResourceExhaustedError(None, None, "OOM")):
        message = out_of_memory(err)
        assert message.startswith("out of memory (") and "batch size" in message
        assert "\n" not in message
    assert out_of_memory(ValueError("no")) == ""
