"""Precision: the auto rule, bfloat16 training against float32, float32 files, TF32, the
XLA compilation cache."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_saat import Captioner
from keras_saat.config import load_config
from keras_saat.errors import KerasSaatError
from keras_saat.runtime.precision import cpu_has_bfloat16, dtype_policy, resolve_precision
from keras_saat.training.optimization import build_optimizer
from keras_saat.training.trainer import Trainer

VOCAB = ["<pad>", "<unk>", "<start>", "<end>"] + [f"w{i}" for i in range(40)]


@pytest.mark.parametrize(
    "setting, flags, gpus, expected",
    [
        ("auto", {"avx512f", "avx512_bf16"}, [], "bfloat16"),
        ("auto", {"avx512f", "amx_bf16", "amx_tile"}, [], "bfloat16"),
        ("auto", {"avx2", "avx512f"}, [], "float32"),
        ("auto", set(), [(9, 0)], "bfloat16"),  # H100
        ("auto", set(), [(8, 0), (8, 6)], "bfloat16"),  # A100, RTX 30xx
        ("auto", {"avx512_bf16"}, [(7, 0)], "float16"),  # V100: the GPU decides
        ("auto", set(), [(8, 0), (7, 5)], "float16"),  # the oldest GPU decides
        ("none", {"avx512_bf16"}, [(9, 0)], "float32"),
        ("bfloat16", set(), [], "bfloat16"),
        ("float16", set(), [], "float16"),
    ],
)
def test_auto_picks_the_policy_from_the_hardware(setting, flags, gpus, expected):
    assert resolve_precision(setting, cpu_flags=flags, gpus=gpus) == expected


def test_an_unknown_precision_is_refused():
    with pytest.raises(KerasSaatError, match="bfloat16"):
        resolve_precision("bf16", cpu_flags=set(), gpus=[])
    with pytest.raises(KerasSaatError, match="mixed_precision: True is not a valid str"):
        load_config(None, ["train.mixed_precision=true"])
    assert cpu_has_bfloat16({"avx512_bf16"}) and not cpu_has_bfloat16({"avx512f"})


def _model(precision="float32", attention="soft"):
    keras.utils.set_random_seed(3)
    with dtype_policy(precision):
        return Captioner(
            VOCAB, feature_dim=32, embedding_dim=16, lstm_units=32, attention_units=16,
            attention=attention, dropout=0.0, seed=5,
        )  # fmt: skip


def _batch(seed=0, batch=16, length=9):
    rng = np.random.default_rng(seed)
    tokens = np.zeros((batch, length + 1), np.int32)
    tokens[:, 0] = 2
    for row in tokens:
        n = rng.integers(2, length - 1)
        row[1 : 1 + n] = rng.integers(4, len(VOCAB), size=n)
        row[1 + n] = 3
    features = rng.normal(size=(batch, 16, 128)).astype("float32")
    return {"features": tf.constant(features), "tokens": tf.constant(tokens)}


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_a_bfloat16_step_matches_the_float32_step(attention):
    """Same weights, same batch: bfloat16 compute (8-bit mantissa) moves the loss by well
    under 1 %, and every gradient is finite."""
    batch = _batch()
    reference = _model("float32", attention)
    mixed = reference.with_precision("bfloat16")
    assert mixed.decoder.compute_dtype == "bfloat16"
    assert all(v.dtype == "float32" for v in mixed.trainable_variables)
    losses, norms = [], []
    for model in (reference, mixed):
        with tf.GradientTape() as tape:
            outputs = model(batch, training=attention == "hard")
            terms = model.loss_terms(outputs, batch["tokens"])
        gradients = model.weight_gradients(tape, terms["loss"])
        assert terms["loss"].dtype == tf.float32  # the loss is computed in float32
        assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in gradients)
        losses.append(float(terms["loss"]))
        norms.append(float(tf.linalg.global_norm(gradients)))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-2)
    np.testing.assert_allclose(norms[1], norms[0], rtol=5e-2)


@pytest.mark.slow
def test_bfloat16_training_learns_and_saves_a_float32_model(tmp_path):
    from keras_saat.config import TrainConfig
    from keras_saat.experiment.training_run import _save_model
    from keras_saat.models.factories import load_captioner

    config = TrainConfig(mixed_precision="bfloat16", learning_rate=1e-2, lr_schedule="constant")
    model = _model("bfloat16")
    optimizer = build_optimizer(config, steps_per_epoch=10)
    assert not isinstance(optimizer, keras.optimizers.LossScaleOptimizer)  # no scaling needed
    trainer = Trainer(model, optimizer, clipnorm=5.0, jit_compile=False, log=lambda _: None)
    batch = _batch(seed=1)
    losses = [float(trainer.train_step(batch)["loss"]) for _ in range(20)]
    assert np.isfinite(losses).all() and losses[-1] < 0.7 * losses[0]
    _save_model(model, tmp_path / "model.keras")
    loaded = load_captioner(tmp_path / "model.keras")
    assert loaded.precision == "float32" and loaded.decoder.compute_dtype == "float32"
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # The float32 copy scores the batch as the bfloat16 model does, within bf16's precision.
    terms = [m.loss_terms(m(batch), batch["tokens"])["loss"] for m in (loaded, model)]
    np.testing.assert_allclose(float(terms[0]), float(terms[1]), rtol=1e-2)


def test_float16_settings_still_scale_the_loss():
    from keras_saat.config import TrainConfig

    optimizer = build_optimizer(TrainConfig(mixed_precision="float16"), steps_per_epoch=10)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def test_training_with_tensorflows_tf32_default_still_learns(tf32):
    """The suite runs in full float32 (conftest); under TF32 (TensorFlow's default on
    Ampere and later GPUs; CPUs ignore it) training must still converge."""
    assert tf.config.experimental.tensor_float_32_execution_enabled()
    model = _model()
    trainer = Trainer(
        model, keras.optimizers.Adam(1e-2), clipnorm=5.0, jit_compile=False, log=lambda _: None
    )
    batch = _batch(seed=2)
    losses = [float(trainer.train_step(batch)["loss"]) for _ in range(20)]
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.slow
def test_the_compilation_cache_is_written_once_and_read_by_a_second_process(tmp_path):
    """A fresh process that compiles the same XLA function finds it in the cache: the
    cache keeps its one entry and no second one is written."""
    code = textwrap.dedent(
        f"""
        import sys
        from keras_saat.runtime.xla import enable_compilation_cache, tensorflow_started
        import tensorflow as tf
        assert not tensorflow_started()
        import os
        from keras_saat.runtime.xla import set_xla_defaults
        os.environ["XLA_FLAGS"] = "--xla_gpu_enable_triton_gemm=true"
        assert set_xla_defaults()  # a flag the user named is left as it is
        flags = os.environ["XLA_FLAGS"].split()
        assert "--xla_gpu_enable_triton_gemm=true" in flags
        assert "--xla_gpu_enable_triton_gemm=false" not in flags
        del os.environ["XLA_FLAGS"]
        assert set_xla_defaults({str(tmp_path / "autotune")!r})
        flags = os.environ["XLA_FLAGS"].split()
        assert "--xla_gpu_enable_triton_gemm=false" in flags
        assert "--xla_gpu_experimental_enable_fusion_autotuner=false" in flags
        assert f"--xla_gpu_force_compilation_parallelism={{len(os.sched_getaffinity(0))}}" in flags
        assert "--xla_gpu_per_fusion_autotune_cache_dir={tmp_path / "autotune"}" in flags
        assert enable_compilation_cache({str(tmp_path / "cache")!r}).name == "cache"
        f = tf.function(lambda a: tf.nn.relu(a @ a) + 1.0, jit_compile=True)
        print(float(tf.reduce_sum(f(tf.ones([8, 8])))))
        assert tensorflow_started()
        assert enable_compilation_cache({str(tmp_path / "other")!r}) is None  # too late now
        assert not set_xla_defaults()
        """
    )
    # The children start from the user's environment without XLA settings: the suite's
    # own process may have set TF_XLA_FLAGS for an earlier in-process training run.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_XLA_FLAGS", "XLA_FLAGS")}
    outputs = []
    entries = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout.split()[-1])
        entries.append(sorted(p.name for p in (tmp_path / "cache").iterdir()))
    assert outputs == ["576.0", "576.0"]
    assert len(entries[0]) == 1 and entries[0][0].startswith("xla_compile_cache")
    assert entries[1] == entries[0]
    assert not (tmp_path / "other").exists()


def test_the_cache_setting_honours_the_users_flag_and_replaces_only_its_own(tmp_path):
    """A second run in one process moves the cache to its own workdir; a directory the
    user named in TF_XLA_FLAGS is kept and reported."""
    code = textwrap.dedent(
        f"""
        import os
        from keras_saat.runtime.xla import enable_compilation_cache
        first = enable_compilation_cache({str(tmp_path / "a")!r})
        second = enable_compilation_cache({str(tmp_path / "b")!r})
        print(first.name, second.name, os.environ["TF_XLA_FLAGS"].count("cache_directory"))
        os.environ["TF_XLA_FLAGS"] = "--tf_xla_persistent_cache_directory=/mine --x=1"
        print(enable_compilation_cache({str(tmp_path / "c")!r}), os.environ["TF_XLA_FLAGS"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "a b 1",
        "/mine --tf_xla_persistent_cache_directory=/mine --x=1",
    ]
    assert not (tmp_path / "c").exists()


def test_the_xla_defaults_of_a_second_run_replace_the_firsts(tmp_path):
    """A second run in one process gets its own autotuning folder, once, also when the
    user added a flag in between; flags the user named stay as they are, their own
    setting of a default wins, and a flag whose name merely starts with a default's
    does not count as setting it."""
    code = textwrap.dedent(
        f"""
        import os
        from keras_saat.runtime.xla import set_xla_defaults
        os.environ["XLA_FLAGS"] = "--xla_gpu_enable_triton_gemm=true --xla_dump_to=/d"
        assert set_xla_defaults({str(tmp_path / "a")!r})
        first = os.environ["XLA_FLAGS"].split()
        assert set_xla_defaults({str(tmp_path / "b")!r})
        second = os.environ["XLA_FLAGS"].split()
        os.environ["XLA_FLAGS"] += " --xla_dump_hlo_as_text"  # the user adds one between runs
        assert set_xla_defaults()
        third = os.environ["XLA_FLAGS"].split()
        for flags in (first, second, third):
            print(sorted(f.split("=")[1] for f in flags if "autotune_cache_dir" in f))
            print(flags[:2], len([f for f in flags if "triton_gemm" in f]))
        print(third[2])
        os.environ["XLA_FLAGS"] = "--xla_gpu_enable_triton_gemm_any=true"  # another flag
        assert set_xla_defaults()
        print("--xla_gpu_enable_triton_gemm=false" in os.environ["XLA_FLAGS"].split())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    user = "['--xla_gpu_enable_triton_gemm=true', '--xla_dump_to=/d'] 1"
    assert done.stdout.splitlines() == [
        repr([str(tmp_path / "a")]), user, repr([str(tmp_path / "b")]), user, "[]", user,
        "--xla_dump_hlo_as_text", "True",
    ]  # fmt: skip


def test_batching_settings_are_checked():
    from keras_saat.config import load_config
    from keras_saat.data.pipeline.image_file_source import ImageFiles
    from keras_saat.data.readers.caption_dataset import ImageRecord
    from keras_saat.experiment.epoch_batches import batching

    with pytest.raises(KerasSaatError, match="per_caption, per_image"):
        load_config(None, ["data.batching=per_batch"])
    with pytest.raises(KerasSaatError, match="mixed_precision"):
        load_config(None, ["train.mixed_precision=bf16"])
    records = [ImageRecord(i, None, "train", ["a b"] * (7 if i == 0 else 5)) for i in range(20)]
    config = load_config(None, ["data.batching=per_image", "train.batch_size=32"])
    images = ImageFiles(128)
    batches = batching(config, records, images, 1)
    # 6 images of 5 a batch; 21 groups (image 0 makes two) -> 3 steps: decoded images drop
    # the partial batch (a training backbone's batch statistics would see padding), so
    # `pad` counts it only on features (tests/data/pipeline/test_epoch_order.py).
    assert (batches.per_image, batches.units, batches.steps, batches.pad) == (5, 6, 3, False)
    assert batches.captions_per_batch == 30
    assert batches.text.endswith(", partial batches dropped")
    assert batches.plan(config.data, seed=0).drop_remainder
    with pytest.raises(KerasSaatError, match="pad, drop"):
        load_config(None, ["data.partial_batches=keep"])
    with pytest.raises(KerasSaatError, match="split evenly over 4 replicas"):
        batching(config, records, images, 4)
    bucketed = load_config(None, ["data.batching=per_image", "data.bucket_by_length=true"])
    with pytest.raises(KerasSaatError, match="bucket_by_length"):
        batching(bucketed, records, images, 1)
    per_caption = batching(load_config(None, ["train.batch_size=32"]), records, images, 1)
    assert per_caption.steps == 102 // 32
    with pytest.raises(KerasSaatError, match=r"only 102 training captions .*batch_size$"):
        batching(load_config(None, ["train.batch_size=128"]), records, images, 1)


def test_a_bfloat16_backbone_fills_its_own_cache(shapes_dir, tmp_path):
    """The cache keeps its float16 dtype; features of a bfloat16 backbone are close to the
    float32 ones, and the two never mix in one cache folder."""
    from keras_saat.data import read_karpathy
    from keras_saat.data.feature_cache.feature_extraction import extract_features
    from keras_saat.encoders import ImageEncoder

    dataset = read_karpathy(shapes_dir / "dataset_shapes.json")
    keras.utils.set_random_seed(0)
    encoder = ImageEncoder("shapes_cnn")
    with dtype_policy("bfloat16"):
        mixed = ImageEncoder("shapes_cnn")
    mixed.set_weights(encoder.get_weights())
    quiet = {"splits": ("val",), "log": lambda _: None}
    cache, _ = extract_features(encoder, dataset, tmp_path / "f32", **quiet)
    mixed_cache, _ = extract_features(mixed, dataset, tmp_path / "bf16", **quiet)
    assert mixed_cache.index["compute_dtype"] == "bfloat16"
    assert mixed_cache.index["dtype"] == "float16"
    reference, features = cache.load("val")[1], mixed_cache.load("val")[1]
    scale = np.abs(reference).max()
    assert np.abs(features - reference).max() < 0.05 * scale
    with pytest.raises(KerasSaatError, match="compute precision"):
        extract_features(mixed, dataset, tmp_path / "f32", **quiet)
