"""What --runner needs of the command line without apache-beam (these run everywhere):
Beam's options after `--`, and one line naming the extra when it is missing."""

import subprocess
import sys
from pathlib import Path

import pytest

from keras_saat.cli.flags import split_beam_args

ROOT = Path(__file__).parents[2]

# apache_beam set to None in sys.modules: its import fails as on a machine without it.
SCRIPT = """
import sys
sys.modules["apache_beam"] = None
from keras_saat.cli import main
sys.exit(main(sys.argv[1:]))
"""
CAPTION = ["caption", "--saved-model", "models/x", "photo.png", "--out", "o", "--runner", "local"]
EXTRACT = ["extract-features", "--config", "shapes_soft", "--workdir", "w", "--runner", "local"]


@pytest.mark.parametrize("argv", [CAPTION, EXTRACT], ids=["caption", "extract-features"])
def test_runner_without_apache_beam_names_the_extra(tmp_path, argv):
    (tmp_path / "photo.png").write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        'keras-saat: error: apache-beam is not installed; pip install "keras-saat[beam]"'
    )


def test_beam_options_follow_the_first_double_dash_after_runner():
    argv = ["caption", "--saved-model", "m", "a.png", "--out", "o", "--runner", "local"]
    assert split_beam_args([*argv, "--", "--direct_num_workers=2", "--", "x"]) == (
        argv,
        ["--direct_num_workers=2", "--", "x"],
    )
    assert split_beam_args(["caption", "--runner=flink", "--", "--flink_master=h:8081"]) == (
        ["caption", "--runner=flink"],
        ["--flink_master=h:8081"],
    )


def test_without_runner_a_double_dash_stays_argparses():
    argv = ["caption", "--workdir", "w", "--", "-odd-name.png"]
    assert split_beam_args(argv) == (argv, [])
