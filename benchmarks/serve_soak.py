"""The development server's resident memory under a long soak: does it plateau?

    python -m benchmarks.serve_soak --workdir runs/demo [--images DIR] [--clients 8]
        [--seconds 120] [--interval 2] [--out benchmarks/results/cpu-serve-soak-DATE.json]

Exports the workdir's model (float32, version 1), serves it with `keras-saat serve`, and
for SECONDS keeps CLIENTS threads sending REST requests one after another, in turn: one
test image, a batch of 4, a batch of 16, and bytes that are no image (an error row).
The server's resident set (VmRSS of its process, /proc) is sampled every INTERVAL
seconds. Reports the curve, its peak, the requests and 5xx answers, and whether it
plateaus: the growth over the last half of the run (a line fitted to those samples,
MB a minute) against the first half's.
"""

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import benchmark_report
from benchmarks.serve_rest import keras_saat, serving


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def server_pid(port):
    """The pid of the process listening on `port` (the serve command's)."""
    import psutil

    for connection in psutil.net_connections("tcp"):
        if connection.laddr and connection.laddr.port == port and connection.status == "LISTEN":
            return connection.pid
    raise RuntimeError(f"nothing listens on port {port}")


def slope(samples):
    """MB a minute of a line fitted to (seconds, MB) samples."""
    t, mb = np.array(samples).T
    return float(np.polyfit(t / 60, mb, 1)[0]) if len(t) > 1 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a trained workdir")
    parser.add_argument("--images", help="a folder of PNGs (default WORKDIR/data/images)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--interval", type=float, default=2)
    parser.add_argument("--out", help="also write the report as JSON here")
    args = parser.parse_args()
    from keras_saat.serving import RestClient

    folder = Path(args.images or Path(args.workdir) / "data" / "images")
    images = sorted(folder.glob("*.png"))[:32] or sys.exit(f"{folder} holds no PNG")
    data = [p.read_bytes() for p in images]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        keras_saat("export", "--workdir", args.workdir, "--out", base)
        with serving(base, 1) as url:
            pid = server_pid(int(url.rsplit(":", 1)[1]))
            counts = {"requests": 0, "5xx": 0, "failed": 0}
            lock, stop = threading.Lock(), threading.Event()

            def client(number):
                rest = RestClient(url, "captioner", timeout=120)
                turn = number
                while not stop.is_set():
                    kind = turn % 4
                    turn += 1
                    batch = [b"not an image"] if kind == 3 else [
                        data[(turn + i) % len(data)] for i in range((1, 4, 16)[kind])
                    ]  # fmt: skip
                    try:
                        rest.caption(batch)
                        outcome = None
                    except Exception as err:  # a refusal the client raises, or a 5xx
                        outcome = "5xx" if " 5" in f" {err}"[:12] or "500" in str(err) else "failed"
                    with lock:
                        counts["requests"] += 1
                        if outcome:
                            counts[outcome] += 1

            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            started = time.perf_counter()
            samples = [(0.0, round(rss_mb(pid), 1))]
            for thread in threads:
                thread.start()
            while (now := time.perf_counter() - started) < args.seconds:
                time.sleep(args.interval)
                samples.append((round(now, 1), round(rss_mb(pid), 1)))
            stop.set()
            for thread in threads:
                thread.join()
            time.sleep(5)
            after = rss_mb(pid)
    half = [s for s in samples if s[0] >= args.seconds / 2]
    first = [s for s in samples if s[0] <= args.seconds / 2]
    fields = {
        "clients": args.clients,
        "seconds": args.seconds,
        **counts,
        "rss_start_mb": samples[0][1],
        "rss_peak_mb": max(mb for _, mb in samples),
        "rss_end_mb": samples[-1][1],
        "rss_idle_after_mb": round(after, 1),
        "growth_first_half_mb_per_min": round(slope(first), 1),
        "growth_last_half_mb_per_min": round(slope(half), 1),
        "samples": samples,
    }
    benchmark_report("serve_soak.py", fields, args.out)


if __name__ == "__main__":
    main()
