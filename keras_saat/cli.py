"""The `keras-saat` command line: parse, load the config, call the library."""

import argparse
import os
import sys
import time

DEMO_RECIPE = "shapes_soft"  # keras_saat/recipes/shapes_soft.yaml


def _log(message):
    print(message, flush=True)


def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "2")


def cmd_make_shapes(args):
    from keras_saat.data.shapes import write_shapes_dataset

    start = time.perf_counter()
    path = write_shapes_dataset(args.out, args.train, args.val, args.test, args.seed, _log)
    _log(
        f"wrote {args.train + args.val + args.test} images and {path} in {time.perf_counter() - start:.1f}s"
    )


def cmd_train(args):
    from keras_saat.config import load_config
    from keras_saat.experiment import train

    config = _with_strict(load_config(args.config, args.set), args)
    result = train(config, args.workdir, _log)
    _print_result(result)


def cmd_extract_features(args):
    from keras_saat.config import load_config
    from keras_saat.experiment import extract_only

    config = _with_strict(load_config(args.config, args.set), args)
    cache = extract_only(config, args.workdir, _log)
    counts = ", ".join(f"{cache.count(s)} {s}" for s in cache.index["splits"])
    _log(
        f"feature cache {cache.directory}: {counts} images, grid {cache.grid_shape}, {cache.channels} channels"
    )


def _with_strict(config, args):
    import dataclasses

    if getattr(args, "strict", False):
        return dataclasses.replace(config, data=dataclasses.replace(config.data, strict=True))
    return config


def cmd_demo(args):
    from keras_saat.config import load_config
    from keras_saat.experiment import train

    config = _with_strict(load_config(DEMO_RECIPE, args.set), args)
    _log(f"keras-saat demo: Show, Attend and Tell on the Shapes world, workdir {args.workdir}")
    result = train(config, args.workdir, _log)
    _log("\ntest captions (generated | a reference):")
    for record, caption in list(zip(result["records"], result["captions"], strict=True))[
        : args.show
    ]:
        _log(f"  {record.path.name}: {caption}\n  {'':>10}  | {record.captions[1]}")
    _print_result(result)


METRIC_LABELS = (
    ("bleu_1", "BLEU-1"),
    ("bleu_2", "BLEU-2"),
    ("bleu_3", "BLEU-3"),
    ("bleu_4", "BLEU-4"),
    ("meteor", "METEOR"),
    ("rouge_l", "ROUGE-L"),
    ("cider", "CIDEr"),
)


def format_metrics(metrics):
    """'BLEU-1 94.6  ...  CIDEr 812.3' on the 0-100 scale (the metrics present)."""
    return "  ".join(
        f"{label} {100 * metrics[key]:.1f}" for key, label in METRIC_LABELS if key in metrics
    )


def _print_scores(result):
    _log(f"\n{result.get('split', 'test')} scores x100 ({result['method']}):")
    _log(f"  {format_metrics(result['metrics'])}")
    where = result.get("localisation")
    if where and where["hit_rate"] is not None:
        _log(
            f"  attention localisation: {100 * where['hit_rate']:.1f}% of {where['words']} colour/shape "
            f"words attend inside their object (chance {100 * where['chance']:.1f}%)"
        )


def _print_result(result):
    if not result.get("chief", True):
        _log("training done (this worker is not the chief; the chief writes the model and scores)")
        return
    _print_scores(result)
    _log(
        f"decoder training {result['train_seconds']:.0f}s, total {result['total_seconds']:.0f}s; "
        f"best epoch {result['best_epoch']}"
    )


def cmd_evaluate(args):
    from keras_saat.experiment import evaluate
    from keras_saat.workdir import METRICS_FILE, PREDICTIONS_FILE

    result = evaluate(_trained(args), args.split, args.beam_size, _log, args.set, out=args.out)
    _print_scores(result)
    _log(f"wrote {result['out'] / PREDICTIONS_FILE} and {METRICS_FILE}")


def _trained(args):
    """The trained model's folder: --workdir or --preset."""
    return args.workdir or args.preset


def cmd_caption(args):
    from keras_saat.data.image_files import find_images
    from keras_saat.errors import KerasSaatError
    from keras_saat.models.factories import load_captioner

    paths = find_images(args.images)
    out = None
    if args.out:
        from keras_saat.caption_files import CaptionFile

        out = CaptionFile(args.out, attention=args.attention)
        if out.done:
            _log(f"{args.out}: {len(out.done)} images already captioned, skipping them")
    elif args.attention:
        raise KerasSaatError("--attention writes the grids into --out FILE.jsonl; give --out")
    todo = [p for p in paths if out is None or str(p) not in out.done]
    model = load_captioner(_trained(args))
    progress = _Progress(len(todo)) if sys.stderr.isatty() else None
    failed = 0
    try:
        stream = model.generate_stream(
            todo, batch_size=args.batch_size, beam_size=args.beam_size, max_length=args.max_length
        )
        for result in stream:
            if out is not None:
                out.write(result)
            if result["error"]:
                failed += 1
                print(f"keras-saat: {result['image']}: {result['error']}", file=sys.stderr)
            elif out is None:
                _log(f"{result['image']}: {result['caption']}")
            if args.plot and not result["error"]:
                _plot(model, args.plot, result, len(todo))
            if progress is not None:
                progress.update(1)
    finally:
        if out is not None:
            out.close()
        if progress is not None:
            progress.close()
    if out is not None:
        _log(f"wrote {len(todo) - failed} captions to {args.out}")
    if failed:
        raise KerasSaatError(
            f"{failed} of {len(todo)} images could not be captioned"
            + (" (their rows carry the error; run again to retry them)" if out else "")
        )


def _plot(model, plot, result, count):
    from keras_saat.evaluation.plots import plot_attention

    path = _plot_path(plot, result["image"], count)
    pixels = model.preprocessor()(result["image"])[0]
    plot_attention(pixels, result["words"], result["attention"], path)
    _log(f"  attention plot: {path}")


class _Progress:
    """'captioned N/M images, X images/s' on one terminal line (stderr)."""

    def __init__(self, total):
        self.total, self.count, self.start, self.shown = total, 0, time.perf_counter(), 0.0

    def update(self, n):
        self.count += n
        now = time.perf_counter()
        if now - self.shown < 0.5 and self.count < self.total:
            return
        self.shown = now
        rate = self.count / max(now - self.start, 1e-9)
        print(
            f"\rcaptioned {self.count}/{self.total} images, {rate:.1f} images/s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def close(self):
        if self.count:
            print(file=sys.stderr)


def cmd_export(args):
    import json

    from keras_saat.experiment import export_workdir
    from keras_saat.serving.saved_model import METADATA_FILE

    # Each flag is a config override: the workdir's config.yaml is the one source.
    flags = (
        ("decode.beam_size", args.beam_size),
        ("decode.max_length", args.max_length),
        ("export.max_pixels", args.max_pixels),
        ("export.model_name", args.name),
        ("export.format", args.format),
        ("export.precision", args.precision),
        ("export.quantize", args.quantize),
    )
    overrides = [*args.set, *(f"{key}={value}" for key, value in flags if value is not None)]
    path = export_workdir(_trained(args), args.out, args.version, overrides, log=_log)
    metadata = path / "assets.extra" / METADATA_FILE
    if metadata.is_file():  # a SavedModel version folder
        name = json.loads(metadata.read_text())["model_name"]
        _log(
            f"serve it with TF Serving (see export/README.md), or for development:\n"
            f"  keras-saat serve --model-base {path.parent} --name {name}"
        )


def cmd_serve(args):
    import signal
    import tempfile
    import threading

    from keras_saat.serving.dev_server import DevServer

    # SIGTERM (docker stop, systemd, kill) unwinds like Ctrl-C: the scratch export goes.
    signal.signal(signal.SIGTERM, _interrupt)
    model_base, scratch = args.model_base, None
    if model_base is None:  # a workdir or preset: export it into a scratch model base first
        from keras_saat.experiment import export_workdir

        scratch = tempfile.TemporaryDirectory(prefix="keras-saat-serve-")
        model_base = f"{scratch.name}/{args.name}"
        overrides = [f"export.model_name={args.name}", "export.format=savedmodel"]
        export_workdir(_trained(args), model_base, 1, overrides, log=_log)
    try:
        server = DevServer(
            model_base,
            args.name,
            host=args.host,
            port=args.port,
            grpc_port=args.grpc_port,
            version=args.version,
            log=_log,
            max_batch=args.max_batch,
            max_connections=args.max_connections,
            read_timeout=args.read_timeout,
        ).start()
        _log(
            f"serving {server.name} version {server.version} from {server.path}\n"
            f"  REST {server.url}/v1/models/{server.name}"
            + (f"\n  gRPC {server.host}:{server.grpc_port}" if server.grpc_port is not None else "")
            + "\nthis is a development server; production uses TF Serving (export/README.md). Ctrl-C stops it."
        )
        try:
            threading.Event().wait()
        finally:
            server.stop()
    finally:
        if scratch is not None:
            scratch.cleanup()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_bench(args):
    import json

    from keras_saat.bench import PARTS, run_all, write_report

    unknown = sorted(set(args.part) - set(PARTS))
    if unknown:
        from keras_saat.errors import KerasSaatError

        raise KerasSaatError(f"unknown bench part {unknown[0]!r}; parts: {', '.join(PARTS)}")
    log = (lambda _: None) if args.json else _log
    report = run_all(args.part or None, log=log)
    if args.out:
        write_report(report, args.out)
    if args.json:
        print(json.dumps(report))


def _plot_path(plot, image, count):
    """OUT.png for one image; OUT_<image name>.png for several."""
    from pathlib import Path

    plot = Path(plot)
    if count == 1:
        return plot
    return plot.with_name(f"{plot.stem}_{Path(image).stem}{plot.suffix or '.png'}")


def _trained_model_arguments(parser, required=True):
    """--workdir or --preset: where a trained model is."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--workdir", help="a trained workdir (its best model and config)")
    group.add_argument(
        "--preset",
        metavar="DIR",
        help="a preset folder (Captioner.save_to_preset, or export --format preset)",
    )


def _experiment_arguments(parser, workdir_help, config=True):
    if config:
        parser.add_argument(
            "--config",
            required=True,
            help="YAML experiment config (see configs/), or a packaged recipe: "
            "shapes_soft, shapes_hard, shapes_soft_gpu, shapes_lite0",
        )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set train.epochs=5 (repeatable)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="stop at the first unreadable image or bad caption"
    )
    if workdir_help:
        parser.add_argument("--workdir", required=True, help=workdir_help)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-saat",
        description="Show, Attend and Tell (Xu et al., 2015) with Keras 3 / TensorFlow.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("make-shapes", help="render a Shapes world dataset (Karpathy split format)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--train", type=int, default=2000, help="training images (default 2000)")
    p.add_argument("--val", type=int, default=200, help="validation images (default 200)")
    p.add_argument("--test", type=int, default=200, help="test images (default 200)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.set_defaults(func=cmd_make_shapes)

    p = sub.add_parser("extract-features", help="run the frozen backbone once over every image")
    _experiment_arguments(p, "the cache goes to WORKDIR/features")
    p.set_defaults(func=cmd_extract_features)

    p = sub.add_parser("train", help="train a captioner from a YAML config")
    _experiment_arguments(p, "folder for the config, vocabulary, cache, model and scores")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "evaluate", help="caption a split and score it (BLEU, METEOR, ROUGE-L, CIDEr)"
    )
    _trained_model_arguments(p)
    p.add_argument("--split", default="test", choices=["train", "val", "test"], help="default test")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for predictions.json and metrics.json (default: WORKDIR/eval/SPLIT, "
        "or PRESET-eval/SPLIT here)",
    )
    p.add_argument(
        "--beam-size", type=int, default=None, help="beam width (default: decode.beam_size, 3)"
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "caption", help="caption images, folders or globs; --out writes JSON lines or CSV"
    )
    _trained_model_arguments(p)
    p.add_argument(
        "images",
        nargs="+",
        metavar="PATH",
        help="image files (JPEG, PNG, GIF, BMP), folders (searched recursively) or globs",
    )
    p.add_argument(
        "--out",
        metavar="FILE.jsonl|FILE.csv",
        help="write one row per image (image, caption, log_prob, error); a second run "
        "skips the images already captioned there",
    )
    p.add_argument("--batch-size", type=int, default=32, help="images per batch (default 32)")
    p.add_argument(
        "--beam-size", type=int, default=None, help="beam width (default: the model's; 1 = greedy)"
    )
    p.add_argument("--max-length", type=int, default=None, help="maximum words")
    p.add_argument(
        "--attention",
        action="store_true",
        help="add each word's attention grid to the rows (JSON lines only)",
    )
    p.add_argument(
        "--plot", metavar="OUT.png", help="write the paper's Figure 2 layout (one file per image)"
    )
    p.set_defaults(func=cmd_caption)

    p = sub.add_parser(
        "export", help="write the best model as a SavedModel for TF Serving, or a preset folder"
    )
    _trained_model_arguments(p)
    p.add_argument(
        "--out",
        required=True,
        metavar="BASE",
        help="TF Serving model base folder (--format preset: the preset folder; litert: "
        "the folder for NAME.tflite and vocab.txt)",
    )
    p.add_argument(
        "--version", type=int, default=None, help="version folder (default: the next free one)"
    )
    p.add_argument(
        "--beam-size", type=int, default=None, help="beam width (default: decode.beam_size, 3)"
    )
    p.add_argument(
        "--max-length", type=int, default=None, help="maximum words (default: decode.max_length)"
    )
    p.add_argument(
        "--max-pixels",
        type=int,
        default=None,
        help="largest width x height an image may declare (default: export.max_pixels, 25000000)",
    )
    p.add_argument("--name", default=None, help="model name (default: export.model_name)")
    p.add_argument(
        "--format",
        default=None,
        help="export format: savedmodel, preset or litert (default: export.format, savedmodel)",
    )
    p.add_argument(
        "--precision",
        default=None,
        choices=("float32", "bfloat16", "auto"),
        help="the serving graph's compute precision (default: export.precision, float32); "
        "bfloat16 pays on CPUs with AVX512_BF16 or AMX and on GPUs of compute capability 8+",
    )
    p.add_argument(
        "--quantize",
        default=None,
        choices=("none", "float16", "int8"),
        help="--format litert: float16 or dynamic-range int8 weights (default: export.quantize, none)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="section.key=value",
        help="override the saved config's decode or export settings (repeatable)",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "serve", help="development server with TF Serving's REST API (production: TF Serving)"
    )
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--model-base", metavar="BASE", help="TF Serving model base")
    group.add_argument("--workdir", help="a trained workdir: export it, then serve it")
    group.add_argument("--preset", metavar="DIR", help="a preset folder: export it, then serve it")
    p.add_argument("--name", default="keras_saat", help="model name in URLs (default keras_saat)")
    p.add_argument("--port", type=int, default=8501, help="REST port (default 8501)")
    p.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--version", type=int, default=None, help="version (default: the highest)")
    p.add_argument(
        "--max-batch", type=int, default=64, help="images in one request, at most (default 64)"
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=32,
        help="connections served at once; one more is answered 503 (default 32)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=30.0,
        help="seconds a request has to arrive whole (default 30)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("bench", help="measure speed and memory against this machine's limit")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--part",
        action="append",
        default=[],
        help="matmul, train, extract, decode, serving or malloc (repeatable; default all)",
    )
    p.add_argument("--out", metavar="FILE.json", help="also write the report here")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser(
        "demo", help="generate Shapes, train a soft-attention captioner, show captions"
    )
    _experiment_arguments(p, None, config=False)
    p.add_argument("--workdir", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--show", type=int, default=6, help="test captions to print (default 6)")
    p.set_defaults(func=cmd_demo)
    return parser


# The training commands keep freed memory for the next step (keras_saat/runtime/memory.py); a
# server or a one-off command gives it back to the system instead.
MALLOC_TUNED_COMMANDS = (cmd_train, cmd_demo, cmd_extract_features)


def main(argv=None):
    args = build_parser().parse_args(argv)
    _quiet_tensorflow()
    if args.func in MALLOC_TUNED_COMMANDS:
        from keras_saat.runtime.memory import tune_malloc

        tune_malloc()  # before TensorFlow starts its threads (keras_saat/runtime/memory.py)
    if args.func in (cmd_train, cmd_demo):
        from keras_saat.runtime.cpu_kernels import prefer_onednn

        prefer_onednn()  # before TensorFlow reads it (keras_saat/runtime/cpu_kernels.py)
    from keras_saat.errors import KerasSaatError

    try:
        args.func(args)
    except KerasSaatError as err:
        print(f"keras-saat: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("keras-saat: interrupted", file=sys.stderr)
        return 130
    return 0


def run():
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
