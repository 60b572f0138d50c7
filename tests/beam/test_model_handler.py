"""SavedModelHandler: file references read a model call at a time, calls bounded by bytes."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("apache_beam")

from keras_saat.images.image_files import MAX_BATCH_BYTES, MAX_FILE_BYTES  # noqa: E402
from tests.helpers import ROOT, cap_address_space, sparse_images  # noqa: E402


def test_a_batch_of_large_files_costs_one_call_of_bytes_not_the_batch(
    small_export, test_images, tmp_path
):
    """40 files just under the 64 MiB read bound (sparse, so free on disk) and two real
    images in one batch of 42, in a child capped at what it holds after loading the
    SavedModel plus 768 MiB: the whole batch's bytes (2.5 GiB) would not fit."""
    assert MAX_BATCH_BYTES <= MAX_FILE_BYTES
    paths = sparse_images(tmp_path, 40, test_images[:2])
    model = str(small_export / "1")
    script = "\n".join([
        "import json, sys",
        "from keras_saat.beam.model_handler import ImageFile, SavedModelHandler",
        f"handler = SavedModelHandler({model!r}, batch_size=42)",
        "model = handler.load_model()",
        f"handler.run_inference([ImageFile({paths[20]!r})], model)",  # warm: the first call
        cap_address_space(768 * 1024 * 1024),
        f"results = handler.run_inference([ImageFile(p) for p in {paths!r}], model)",
        "print(json.dumps([[bool(r.inference['valid']), r.inference['error'].decode()]"
        " for r in results]))",
    ])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=180, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    assert len(rows) == 42
    assert [valid for valid, _ in rows] == [False] * 20 + [True, True] + [False] * 20
    assert all(error for valid, error in rows if not valid)
