"""Image files or encoded bytes -> batches of model-input pixels, decoded by one graph:
`Captioner.generate` over files and the feature cache's extraction both read here."""

import atexit
import queue
import threading
import weakref

import numpy as np

from keras_saat.images.decoding import batch_decoder
from keras_saat.images.image_files import batches_by_bytes, encoded_images


def decoded_batches(images, image_size, resize, max_pixels, batch_size):
    """Batches of input pixels for an iterable of image files or encoded bytes: dicts of
    image (the paths, or "#<index>" for bytes), pixels (B, S, S, 3) float32, valid (B,) bool
    and error (str each).

    Files are read one at a time and decoded a batch at a time (at most `batch_size` images
    and MAX_BATCH_BYTES) by the exported graph's decoder, one batch ahead on a worker
    thread, so memory holds a few batches and a bad file marks only its own row invalid. No
    tf.data pipeline is built per call, which would instantiate the graph again.
    """
    decoder = batch_decoder(image_size, resize, max_pixels)
    groups = batches_by_bytes(encoded_images(images), int(batch_size), size=_bytes)

    def next_batch():
        group = next(groups, None)
        if group is None:
            return None
        names, data, read_errors = (list(column) for column in zip(*group, strict=True))
        pixels, decoded, errors = decoder(np.array(data, dtype=object))
        errors = [e.decode("utf-8", "replace") for e in errors.numpy()]
        return {
            "image": names,
            "pixels": pixels,
            "valid": decoded.numpy() & np.array([not e for e in read_errors]),
            "error": [unread or error for unread, error in zip(read_errors, errors, strict=True)],
        }

    return one_ahead(next_batch, name="keras-saat-read")


_WORKERS = weakref.WeakSet()


@atexit.register
def _finish_workers():
    """Lets each worker finish its result before the interpreter ends: a daemon thread torn
    down inside a TensorFlow op aborts the process."""
    for thread in list(_WORKERS):
        thread.join(timeout=60)


def one_ahead(produce, name):
    """Yields `produce()`'s results until None, each next one made on a daemon thread while
    the caller uses the last; exceptions reach the caller, and closing returns at once.

    A plain thread: a ThreadPoolExecutor refuses work once the main thread has returned.
    """
    requests, results = queue.SimpleQueue(), queue.SimpleQueue()

    def work():
        while requests.get():  # True: make the next one; False: stop
            try:
                result = produce()
            except BaseException as err:  # raised to the caller
                results.put(err)
                return
            results.put(result)
            if result is None:
                return

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    _WORKERS.add(thread)
    requests.put(True)
    try:
        while (result := results.get()) is not None:
            if isinstance(result, BaseException):
                raise result
            requests.put(True)  # the next one, while the caller uses this one
            yield result
    finally:
        requests.put(False)  # the thread ends once the result in hand is made; no wait here


def _bytes(item):
    """The size of a (name, bytes, error) item's encoded bytes."""
    return len(item[1])
