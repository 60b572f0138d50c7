"""What `train`, `demo` and `evaluate` print when they are done: the scores and times."""

from keras_saat.cli.flags import log


def print_scores(result):
    from keras_saat.evaluation.coco_metrics import format_metrics

    log(f"\n{result.get('split', 'test')} scores ({result['method']}):")
    log(f"  {format_metrics(result['metrics'])}")
    where = result.get("localisation")
    if where and where["hit_rate"] is not None:
        log(
            f"  attention localisation: {100 * where['hit_rate']:.1f}% of {where['words']} colour/shape "
            f"words attend inside their object (chance {100 * where['chance']:.1f}%)"
        )


def print_result(result):
    if not result.get("chief", True):
        log("training done (this worker is not the chief; the chief writes the model and scores)")
        return
    print_scores(result)
    log(
        f"decoder training {result['train_seconds']:.0f}s, total {result['total_seconds']:.0f}s; "
        f"best epoch {result['best_epoch']}"
    )
