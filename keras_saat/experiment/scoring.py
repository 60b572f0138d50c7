"""Scoring a trained model: caption a split, compute the COCO metrics (and on the
Shapes world the attention localisation), write predictions.json and metrics.json."""

import time
from pathlib import Path

from keras_saat.config import load_config
from keras_saat.data.feature_cache.shard_checks import naming_damaged_shards
from keras_saat.data.pipeline.image_file_source import ImageFiles
from keras_saat.errors import KerasSaatError
from keras_saat.evaluation.coco_metrics import coco_scores
from keras_saat.evaluation.localisation import attention_localisation
from keras_saat.evaluation.robustness import SHIFTS, robustness_rows
from keras_saat.experiment.preparation import extract, load_dataset
from keras_saat.experiment.trained_models import trained_model
from keras_saat.io_utils import write_json_atomic
from keras_saat.models.batch_decoder import BatchDecoder
from keras_saat.models.preset import preset_metadata
from keras_saat.workdir import CONFIG_FILE, EVAL_DIR, METRICS_FILE, PREDICTIONS_FILE


def caption_split(
    model,
    source,
    split,
    records,
    config,
    batch_size=None,
    beam_size=1,
    details=False,
    positions=None,
):
    """Captions of a split's readable images (or only `positions`): {position: caption};
    with `details`, {position: (words, attention (T, grid_h, grid_w) or None for "words")}.
    """
    decoder = BatchDecoder(
        model,
        batch_size or config.decode.batch_size,
        config.decode.max_length,
        beam_size,
        config.decode.length_penalty,
    )
    batches = source.evaluation_batches(split, records, decoder.batch_size, positions)
    captions = {}
    with naming_damaged_shards(source.shard_files((split,))):
        for batch in batches:
            if "features" in batch:
                results = decoder(features=batch["features"])
            else:
                results = decoder(pixels=batch["images"])
            for position, caption in zip(batch["position"].numpy(), results, strict=True):
                if details == "words":
                    captions[int(position)] = (caption["words"], None)
                elif details:
                    captions[int(position)] = (caption["words"], caption["attention"])
                else:
                    captions[int(position)] = caption["caption"]
    return captions


def score_captions(records, captions, meteor=True):
    """The COCO metrics of one split's captions (pycocoevalcap), and how they were computed
    (`meteor`: score METEOR when Java is there, `decode.meteor`)."""
    metrics = coco_scores([r.captions for r in records], captions, meteor=meteor)
    if metrics["tokenizer"] != "ptb":
        return metrics, "pycocoevalcap without Java: no METEOR, keras-saat tokens"
    left_out = "" if meteor else ", METEOR left out (decode.meteor)"
    return metrics, f"pycocoevalcap with the PTB tokenizer (Java){left_out}"


# The data settings that say which images and captions a split holds.
WHICH_DATA = (
    "dataset", "path", "val_path", "tfds_data_dir", "shapes_train", "shapes_val",
    "shapes_test", "shapes_seed", "shapes_varied", "shapes_varied_copies",
)  # fmt: skip


def other_data(workdir, config):
    """The `data.KEY` settings of `config` that name other images or captions than the
    config the workdir was trained with (its config.yaml)."""
    saved = load_config(Path(workdir) / CONFIG_FILE).data
    return [f"data.{k}" for k in WHICH_DATA if getattr(saved, k) != getattr(config.data, k)]


def evaluate(
    workdir,
    split="test",
    beam_size=None,
    log=print,
    config_overrides=(),
    prepared=None,
    out=None,
    robustness=0,
):
    """Captions a split with a trained model and scores it (`keras-saat evaluate`), writing
    predictions.json (COCO results format) and metrics.json.

    Args:
        workdir: path. A trained workdir, or a preset folder whose metadata carries its
            training config (images are then encoded as they are read).
        split: str. "train", "val" or "test". Defaults to "test".
        beam_size: int or None. Beam width; None = the config's decode.beam_size.
        log: callable. Defaults to print.
        config_overrides: iterable of "section.key=value" applied to the saved config.
        prepared: (dataset, source) or None. What `train` has read already. Defaults to None.
        out: path or None. The folder of the two files. Defaults to <workdir>/eval/<split>,
            or ./<preset name>-eval/<split>; required when `config_overrides` name other
            images or captions (`other_data`).
        robustness: int. On the Shapes world, also caption this many fresh scenes under
            each of `keras_saat.evaluation.robustness.SHIFTS`. Defaults to 0.

    Returns:
        dict: metrics (0-1), method, localisation (or None), beam_size, images, seconds,
        robustness (the shifts' rows, or None).
    """
    workdir = Path(workdir)
    if split not in ("train", "val", "test"):
        raise KerasSaatError(f"unknown split {split!r}: train, val or test")
    model, config, preset = trained_model(workdir, config_overrides)
    if robustness and config.data.dataset != "shapes":
        raise KerasSaatError(
            f"the robustness rows render Shapes scenes, and this model was trained on "
            f"{config.data.dataset!r}; leave out --robustness"
        )
    if preset and prepared is None:
        told = any(str(o).startswith("data.") for o in config_overrides)
        if not preset_metadata(workdir).get("config") and not told:
            raise KerasSaatError(
                f"the preset {workdir} carries no training config, so its dataset is unknown; "
                "name it with --set data.dataset=... --set data.path=..."
            )
    other = [] if preset or prepared is not None else other_data(workdir, config)
    if other and out is None:
        raise KerasSaatError(
            f"--set {', '.join(other)} scores the model on other data than it was trained "
            f"on: name a folder for those scores with --out DIR ({workdir / EVAL_DIR} "
            "holds the scores of its own)"
        )
    if out is None:
        out = (Path(f"{workdir.name}-eval") if preset else workdir / EVAL_DIR) / split
    out = Path(out)
    beam_size = int(beam_size or config.decode.beam_size)
    if prepared is not None:
        dataset, source = prepared
    elif preset:
        dataset = load_dataset(config, out.parent, log)
        source = ImageFiles(model.image_size, config.data.resize)
    else:
        dataset = load_dataset(config, workdir, log)
        if model.encoder.trainable_layers or other:  # other data: the cache stays its own
            source = ImageFiles(model.image_size, config.data.resize)
        else:
            source = extract(config, model.encoder, dataset, workdir, log)
    records = dataset.split(split)
    # Attention maps (T x grid floats an image) are kept only where localisation scores them.
    localised = config.data.dataset in ("shapes", "karpathy") and all(
        r.objects is not None for r in records
    )
    start = time.perf_counter()
    results = caption_split(
        model,
        source,
        split,
        records,
        config,
        config.decode.batch_size,
        beam_size,
        details=True if localised else "words",
    )
    positions = sorted(results)
    scored = [records[p] for p in positions]
    captions = [" ".join(results[p][0]) for p in positions]
    seconds = time.perf_counter() - start
    decoding = "greedy" if beam_size == 1 else f"beam {beam_size}"
    log(f"captioned {len(captions)} {split} images ({decoding}) in {seconds:.1f}s")
    metrics, method = score_captions(scored, captions, meteor=config.decode.meteor)
    localisation, extra = None, {"beam_size": beam_size}
    if localised:
        localisation = attention_localisation(
            [results[p][0] for p in positions],
            [results[p][1] for p in positions],
            [r.objects for r in scored],
        )
        extra["attention_localisation"] = localisation
    shifted = None
    if robustness:
        log(f"captioning {robustness} fresh scenes under each of {len(SHIFTS)} shifts (greedy)")
        shifted = robustness_rows(
            model, robustness, batch_size=config.decode.batch_size,
            max_length=config.decode.max_length, resize=config.data.resize, log=log,
        )  # fmt: skip
        extra["robustness"] = {
            "scenes": robustness, "seed": 0, "method": "greedy, nltk corpus BLEU-4",
            "rows": shifted,
        }  # fmt: skip
    method = f"{decoding}, {method}"
    write_evaluation(out, scored, captions, {**metrics, **extra}, method)
    return {
        "metrics": metrics,
        "method": method,
        "localisation": localisation,
        "beam_size": beam_size,
        "images": len(captions),
        "seconds": seconds,
        "split": split,
        "out": out,
        "captions": captions,
        "records": scored,
        "robustness": shifted,
    }


def write_evaluation(out_dir, records, captions, metrics, method):
    """predictions.json (COCO results format) and metrics.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions = [
        {"image_id": r.imgid, "caption": c} for r, c in zip(records, captions, strict=True)
    ]
    write_json_atomic(out_dir / PREDICTIONS_FILE, predictions)
    payload = {"scale": "0-1", "method": method, "images": len(records), **metrics}
    write_json_atomic(out_dir / METRICS_FILE, payload)
