"""What each `keras-saat` command does, once `keras_saat.cli` has parsed its arguments.

Each `cmd_*` takes the parsed arguments, imports what it needs when it runs (so
`keras-saat --help` and the server's client start without TensorFlow), calls the
library and prints the result.
"""

import sys
import time

DEMO_RECIPE = "shapes_soft"  # keras_saat/recipes/shapes_soft.yaml


def _log(message):
    print(message, flush=True)


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

    for name in args.part:
        PARTS.get(name)  # an unknown part names the nearest one
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
