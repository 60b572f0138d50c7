"""`python -m benchmarks --part scale`: the synthetic datasets have COCO's and CC3M's shape,
and every phase is reported."""

import pytest

from benchmarks.harness.parts import PARTS
from benchmarks.harness.scale import measure_scale


@pytest.mark.slow
def test_a_small_coco_shaped_run_reports_each_phase():
    row = measure_scale("coco", 40)
    assert row["captions"] == 200 and row["images"] == 40
    assert list(row["phases"]) == [
        "start",
        "read",
        "vocabulary",
        "fingerprint",
        "cache_open",
        "model",
        "resident",
        "token_table",
        "first_step",
        "epoch",
        "resume",
        "validation",
        "evaluate",
    ]
    assert row["resume_step"] > 0
    peaks = [p["peak_rss_mb"] for p in row["phases"].values()]
    assert peaks == sorted(peaks) and all(p["seconds"] >= 0 for p in row["phases"].values())
    # 36 train images fit any budget: resident, so per-caption batches (auto)
    assert row["resident"].startswith("features resident on CPU: 36 images x 196x512")
    assert row["batching"] == "batch 64" and row["validation_images"] == 2
    phases = row["phases"]
    assert row["startup_seconds"] == pytest.approx(
        sum(phases[p]["seconds"] for p in list(phases)[1:9])
    )
    assert row["fixed_epoch_seconds"] == pytest.approx(
        phases["epoch"]["seconds"] + phases["validation"]["seconds"]
    )


def test_the_plan_takes_the_images_option():
    part = PARTS.get("scale")
    assert part.options == ("images",)
    assert part.plan({}, ["float32"], images=500) == [("coco", 500), ("cc3m", 500)]
    assert part.plan({}, ["float32"]) == [("coco", 10_000), ("cc3m", 10_000)]
