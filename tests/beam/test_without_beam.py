"""Without apache-beam, --runner is one line naming the extra to install (runs everywhere)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]

# apache_beam set to None in sys.modules: its import fails as on a machine without it.
SCRIPT = """
import sys
sys.modules["apache_beam"] = None
from keras_saat.cli import main
sys.exit(main(["caption", "--saved-model", "models/x", "photo.png", "--out", "o",
               "--runner", "local"]))
"""


def test_runner_without_apache_beam_names_the_extra(tmp_path):
    (tmp_path / "photo.png").write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
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
