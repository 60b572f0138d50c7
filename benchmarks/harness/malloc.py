"""The malloc part: the soft train step with glibc's malloc tuned and with its defaults
(keras_saat/runtime/memory.py), in alternating fresh processes."""

from benchmarks.harness.runner import median, run_in_subprocess
from benchmarks.harness.sizes import SIZES

# Fresh processes per size and malloc setting, alternating.
MALLOC_ROUNDS = 3


def measure_malloc(log=print, rounds=MALLOC_ROUNDS):
    """The soft train step with malloc tuned and with glibc's defaults, in alternating
    fresh processes; per size, the medians of each setting and their ratio."""
    from keras_saat.runtime.memory import OPT_OUT

    settings = {"tuned": {}, "system": {OPT_OUT: "system"}}
    rows, summary = [], []
    for size in SIZES:
        runs = {name: [] for name in settings}
        for _ in range(rounds):
            for name, env in settings.items():
                row = run_in_subprocess("train", size, "soft", False, env=env)
                row["malloc"] = name
                runs[name].append(row)
                rows.append(row)
        medians = {
            name: {
                key: median([r[key] for r in runs[name]])
                for key in ("step_ms", "page_faults_per_step", "peak_rss_mb", "fraction_of_limit")
            }
            for name in settings
        }
        summary.append(
            {
                "size": size,
                **{f"{name}_{k}": v for name, values in medians.items() for k, v in values.items()},
                "step_ratio_system_to_tuned": medians["system"]["step_ms"]
                / medians["tuned"]["step_ms"],
            }
        )
        log(
            f"malloc {size:8s}: tuned {medians['tuned']['step_ms']:.0f} ms a step, "
            f"{medians['tuned']['page_faults_per_step']:.0f} faults, "
            f"{medians['tuned']['peak_rss_mb']:.0f} MB peak; system "
            f"{medians['system']['step_ms']:.0f} ms, "
            f"{medians['system']['page_faults_per_step']:.0f} faults, "
            f"{medians['system']['peak_rss_mb']:.0f} MB (medians of {rounds} processes each)"
        )
    return {"rounds": rounds, "summary": summary, "runs": rows}
