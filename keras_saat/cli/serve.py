"""`keras-saat serve`: the development server with TF Serving's REST API (and gRPC)."""

from pathlib import Path

from keras_saat.cli.checks import check_trained
from keras_saat.cli.flags import (
    command,
    log,
    model_version_argument,
    trained,
    trained_model_arguments,
)
from keras_saat.errors import KerasSaatError


def add_parser(sub):
    p = command(
        sub,
        "serve",
        "development server with TF Serving's REST API and a page at / (production: TF Serving)",
        (
            "keras-saat serve --workdir runs/shapes_soft",
            "keras-saat serve --workdir checkpoints/best.keras --port 8080",
            "keras-saat serve --model-base models/keras_saat --name keras_saat --port 8501",
        ),
    )
    trained_model_arguments(p, model_base=True)
    p.add_argument("--name", default="keras_saat", help="model name in URLs (default keras_saat)")
    p.add_argument("--port", type=int, default=8501, help="REST port (default 8501)")
    p.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    model_version_argument(p, "version (default: the highest)")
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
    return p


def check(args):
    """A model base folder, or a trained model to export (a workdir, a `.keras` file or a
    preset folder)."""
    if args.model_base is None:
        check_trained(args)
    elif not Path(args.model_base).is_dir():
        raise KerasSaatError(
            f"--model-base {args.model_base}: no such folder; write one with `keras-saat export`"
        )


def run(args):
    import tempfile
    import threading

    from keras_saat.serving.dev_server import DevServer

    # SIGTERM (docker stop, systemd, kill) unwinds like Ctrl-C (`stop_on_signals`, set by
    # `main`): the `finally`s below stop the server and remove the scratch export.
    model_base, scratch = args.model_base, None
    try:
        if model_base is None:  # a trained model: export it into a scratch model base first
            from keras_saat.experiment import export_workdir

            scratch = tempfile.TemporaryDirectory(prefix="keras-saat-serve-")
            model_base = f"{scratch.name}/{args.name}"
            overrides = [f"export.model_name={args.name}", "export.format=savedmodel"]
            # Inside the try: a signal during the export removes the folder here, not by
            # the TemporaryDirectory's finaliser at interpreter exit.
            export_workdir(trained(args), model_base, 1, overrides, log=log)
        server = DevServer(
            model_base,
            args.name,
            host=args.host,
            port=args.port,
            grpc_port=args.grpc_port,
            version=args.version,
            log=log,
            max_batch=args.max_batch,
            max_connections=args.max_connections,
            read_timeout=args.read_timeout,
        ).start()
        log(banner(server))
        try:
            threading.Event().wait()
        finally:
            server.stop()
    finally:
        if scratch is not None:
            scratch.cleanup()


def banner(server):
    """What `serve` prints once the server listens: the model, the page, REST and gRPC."""
    lines = [
        f"serving {server.name} version {server.version} from {server.path}",
        f"  page {server.url}/",
        f"  REST {server.url}/v1/models/{server.name}",
    ]
    if server.grpc_port is not None:
        lines.append(f"  gRPC {server.host}:{server.grpc_port}")
    lines.append(
        "this is a development server; production uses TF Serving (export/README.md). "
        "Ctrl-C stops it."
    )
    return "\n".join(lines)
