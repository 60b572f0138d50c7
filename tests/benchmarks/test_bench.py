"""The benchmark harness: its FLOP count matches the model it times, and `python -m
benchmarks` checks its flags and prints one JSON object."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.harness import forward_flops, kind_of, step_profile, train_step_flops

ROOT = Path(__file__).parents[2]


def test_the_flop_count_matches_the_model_weights():
    """Every matmul of the count, read off the built layers' kernel shapes."""
    from benchmarks.harness.sizes import captioner

    size = dict(
        backbone="shapes_cnn", locations=64, channels=128, feature_dim=24, embedding_dim=8,
        lstm_units=12, attention_units=10, vocab=30, length=5, batch=3,
    )  # fmt: skip
    model = captioner(size, "soft")
    decoder, attention = model.decoder, model.decoder.attention

    def kernel(layer):
        return int(np.prod(layer.kernel.shape))

    L, T = size["locations"], size["length"]
    per_image = 2 * L * kernel(model.squeeze) + 2 * L * kernel(attention.annotation_projection)
    per_image += 2 * kernel(decoder.init_h) + 2 * kernel(decoder.init_c)
    lstm = sum(
        int(np.prod(w.shape))
        for w in (decoder.lstm_embedding_kernel, decoder.lstm_context_kernel, decoder.lstm_recurrent_kernel)
    )  # fmt: skip
    per_step = (
        2 * kernel(attention.hidden_projection)
        + L * size["attention_units"]  # the add before tanh
        + 2 * L * kernel(attention.score)
        + 2 * L * size["feature_dim"]  # the context sum
        + 2 * kernel(attention.gate)
        + 2 * lstm
        + 2 * (kernel(decoder.output_hidden) + kernel(decoder.output_context))
        + 2 * kernel(decoder.output_logits)
    )
    assert forward_flops(size) == size["batch"] * (per_image + T * per_step)
    assert train_step_flops(size) == 3 * forward_flops(size)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--part", "matmol"], "unknown bench part 'matmol' (did you mean \"matmul\"?)"),
        (["--images", "0"], "--images 0: give a count from 1 to 100000000"),
    ],
)
def test_a_wrong_flag_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("python -m benchmarks: error: ") and message in err


@pytest.mark.slow
def test_the_json_report_is_one_object():
    # The parts run in child processes; the kernels' setting must reach them and be reported.
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--part", "matmul", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["matmul_gflops"] > 0 and report["peak_rss_mb"]["matmul_float32"] > 0
    best, median = report["matmul"][0]["matmul_gflops"], report["matmul"][0]["median_gflops"]
    assert best >= median > 0 and report["matmul"][0]["precision"] == "float32"
    assert report["device"]["auto_precision"] in ("float32", "bfloat16", "float16")
    assert report["machine"]["cpus"] >= 1
    assert report["onednn"] is True


@pytest.mark.parametrize(
    "name, kind",
    [
        ("BatchMatMulV2", "matmul"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
        ("nvjet_tst_128x64_64x6_1x2_h_bz_TNN", "matmul"),
        ("Conv2DBackpropFilter", "matmul"),
        ("ResourceApplyAdam", "optimizer"),
        ("UnsortedSegmentSum", "gathers, scatters and slices"),
        ("ResourceGather", "gathers, scatters and slices"),
        ("dynamic_update_slice_fusion", "gathers, scatters and slices"),
        ("Softmax", "softmax and reductions"),
        ("input_reduce_fusion_3", "softmax and reductions"),
        ("Sum", "softmax and reductions"),
        ("Maximum", "elementwise"),
        ("loop_multiply_fusion_12", "elementwise"),
        ("Tanh", "elementwise"),
        ("Transpose", "copies and transposes"),
        ("Memcpy HtoD", "copies and transposes"),
        ("NoOp", "other"),
    ],
)
def test_ops_and_kernels_are_grouped_by_kind_of_work(name, kind):
    assert kind_of(name) == kind


@pytest.mark.slow
def test_the_step_profile_accounts_for_the_host_ops():
    row = step_profile("tutorial", steps=1, batch=8)
    assert row["where"] == "host" and row["batch"] == 8 and row["wall_ms"] > 0
    assert row["kernels"] > 10  # op events a step
    assert set(row["kinds_ms"]) >= {"matmul", "elementwise"}
    assert sum(row["kinds_ms"].values()) == pytest.approx(row["busy_ms"], rel=1e-3)
    assert max(row["top_ms"].values()) <= row["busy_ms"]
