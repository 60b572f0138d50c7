"""Where the train split's features live: resident in device memory, or streamed from the
cache (`data.resident_features`: true, false, or auto within `data.resident_budget`)."""

import time

from keras_saat.data.feature_cache.resident_features import (
    ResidentFeatures,
    resident_bytes,
    resident_dtype,
)
from keras_saat.errors import KerasSaatError
from keras_saat.runtime.memory import device_memory


def resident_features(data, source, compute_dtype, strategy, log=print):
    """The train split's features in the device's memory (`ResidentFeatures`), or None
    to stream them from the cache.

    Args:
        data: DataConfig. Its resident_features (True, False or "auto") and
            resident_budget (a share of the free device memory, in (0, 1]).
        source: FeatureSource. The run's source; one with no cache (image files) is
            never resident.
        compute_dtype: str. The model's compute dtype (`resident_dtype`).
        strategy: tf.distribute.Strategy whose replicas each hold a copy.
        log: callable. Defaults to print.
    """
    setting, budget_share = data.resident_features, data.resident_budget
    if not 0 < budget_share <= 1:
        raise KerasSaatError(f"data.resident_budget {budget_share}: expected a share in (0, 1]")
    if setting is False:
        return None
    cache = source.cache
    if cache is None:
        if setting is True:
            raise KerasSaatError(
                "data.resident_features true needs the feature cache, and the backbone trains "
                "(model.trainable_backbone_layers), so batches are decoded images: set "
                "data.resident_features auto or false"
            )
        return None
    dtype = resident_dtype(cache.dtype, compute_dtype)
    need = resident_bytes(cache, "train", dtype)
    device, total, free = device_memory()
    budget = budget_share * free
    sizes = (
        f"{need / 2**30:.2f} GiB of the {budget / 2**30:.1f} GiB budget "
        f"({budget_share} of the {free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB "
        f"on {device})"
    )
    if need > budget:
        if setting is True:
            raise KerasSaatError(
                f"data.resident_features true: the train split's features need {sizes}; "
                "raise data.resident_budget, or set data.resident_features auto or false "
                "(stream them from the cache)"
            )
        log(f"features streamed from the cache: the train split would take {sizes}")
        return None
    started = time.perf_counter()
    resident = ResidentFeatures(cache, "train", dtype, strategy)
    log(
        f"features resident on {device}: {resident.count} images x {cache.num_locations}x"
        f"{cache.channels} {dtype.name}, {sizes}; loaded in {time.perf_counter() - started:.1f}s"
    )
    return resident
