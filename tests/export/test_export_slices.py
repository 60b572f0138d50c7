"""A request of many images runs the SavedModel a slice at a time: the same outputs as one
call, in the memory of a slice (stock TF Serving hands the graph the whole request)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import tensorflow as tf

from keras_saat.export.saved_model import SLICE_IMAGES
from keras_saat.serving.signatures import DEFAULT_SIGNATURE
from tests.helpers import ROOT, cap_address_space


def test_a_request_over_a_slice_gives_each_image_the_outputs_of_a_small_call(
    small_export, test_images
):
    signature = tf.saved_model.load(str(small_export / "1")).signatures[DEFAULT_SIGNATURE]
    images = [p.read_bytes() for p in test_images] + [b"not an image"]
    small = signature(image_bytes=tf.constant(images))
    count = SLICE_IMAGES + 6  # two slices, the second padded
    many = signature(image_bytes=tf.constant([images[i % 4] for i in range(count)]))
    assert many["caption"].shape == (count,) and many["attention"].shape[0] == count
    none = signature(image_bytes=tf.constant([], tf.string))  # an empty request: empty outputs
    assert none["caption"].shape == (0,) and none["attention"].shape[0] == 0
    for i in range(count):
        for key in ("caption", "tokens", "valid", "error"):
            assert np.array_equal(many[key][i].numpy(), small[key][i % 4].numpy()), (key, i)
        np.testing.assert_allclose(many["log_prob"][i], small["log_prob"][i % 4], atol=1e-4)
        np.testing.assert_allclose(many["attention"][i], small["attention"][i % 4], atol=1e-4)


def test_four_thousand_one_pixel_images_fit_the_memory_of_a_slice(small_export):
    """4,000 one-pixel PNGs (280 kB of request) in one call, in a child capped at what it
    holds after loading the SavedModel and one warm call plus 768 MiB: this small model
    run over the whole request at once grows by about 2.2 GB, a slice at a time by under
    50 MB."""
    script = textwrap.dedent(f"""
        import json
        import tensorflow as tf
        signature = tf.saved_model.load({str(small_export / "1")!r}).signatures[
            {DEFAULT_SIGNATURE!r}]
        png = tf.io.encode_png(tf.zeros((1, 1, 3), tf.uint8)).numpy()
        signature(image_bytes=tf.constant([png] * {SLICE_IMAGES}))  # warm: one whole slice
        {cap_address_space(768 * 1024 * 1024)}
        out = signature(image_bytes=tf.constant([png] * 4000))
        print(json.dumps([int(out["valid"].numpy().sum()), int(out["caption"].shape[0])]))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [4000, 4000]
