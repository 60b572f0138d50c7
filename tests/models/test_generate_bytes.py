"""`Captioner.generate_stream` (and so `keras-saat caption`) holds a batch's bytes, not
`batch_size` times the largest file: large files are cut into smaller batches."""

import json
import os
import subprocess
import sys
import textwrap

from tests.helpers import ROOT, cap_address_space, sparse_images


def test_a_folder_of_files_near_the_read_bound_costs_a_batch_of_bytes(
    small_preset, test_images, tmp_path
):
    """40 files just under the 64 MiB read bound (sparse: free on disk) and two real images
    at batch 32, in a child capped 768 MiB above what it holds after loading the model and
    one warm call: 32 such files in one batch would be 2 GiB."""
    paths = sparse_images(tmp_path, 40, test_images[:2])
    script = textwrap.dedent(f"""
        import json
        from keras_saat import load_captioner
        model = load_captioner({str(small_preset)!r})
        list(model.generate_stream({[str(p) for p in test_images]!r}, batch_size=32))
        {cap_address_space(768 * 1024 * 1024)}
        rows = list(model.generate_stream({paths!r}, batch_size=32))
        print(json.dumps([[r["image"], r["error"]] for r in rows]))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    assert [image for image, _ in rows] == paths  # every file a row, in order
    assert [bool(error) for _, error in rows] == [True] * 20 + [False, False] + [True] * 20
