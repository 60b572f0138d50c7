"""Image files or encoded bytes -> batches of model-input pixels, decoded by one graph.

`decoded_batches` is the one way a stream of images becomes pixels outside a tf.data
input pipeline: `Captioner.generate` over files (`ImagePreprocessor.batches`) and the
feature cache's extraction (`keras_saat.data.feature_cache.feature_extraction`) both
read here, so they read the same bytes and decode them with the same graph.
"""

import atexit
import queue
import threading
import weakref

import numpy as np

from keras_saat.images.decoding import batch_decoder
from keras_saat.images.image_files import batches_by_bytes, encoded_images


def decoded_batches(images, image_size, resize, max_pixels, batch_size):
    """Batches of input pixels for a stream of image files or encoded bytes.

    Files are read one at a time and decoded a batch at a time, with the exported graph's
    decoder (`decode_images`, traced once a process: `batch_decoder`), one batch read and
    decoded ahead on a worker thread while the caller uses the last; so memory holds a
    few batches whatever the number of images, and a file that cannot be read or decoded
    marks its own row invalid instead of failing the batch. A batch holds at most
    MAX_BATCH_BYTES of encoded images (a larger file alone), so a folder of large files
    costs a batch's bytes, not `batch_size` times the largest file. No tf.data pipeline
    is built for a call: each would optimise and instantiate the decoder's graph again.

    Args:
        images: iterable of paths or encoded image bytes (a generator is fine).
        image_size: int. The output side.
        resize: str. "crop", "pad" or "stretch" (`keras_saat.images.decoding.resize_image`).
        max_pixels: int. Largest width x height an image header may declare.
        batch_size: int. The most images a batch.

    Yields:
        dicts: image (list of str: the path, or "#<index>" for bytes), pixels
        (B, S, S, 3) float32 tensor, valid (B,) bool array, error (list of str).
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
    """Lets each worker finish the result in hand before the interpreter ends: a daemon
    thread still inside a TensorFlow op when it is torn down aborts the process."""
    for thread in list(_WORKERS):
        thread.join(timeout=60)


def one_ahead(produce, name):
    """Yields `produce()`'s results until it returns None, each next one made on a daemon
    thread while the caller uses the last: at most two results held. An exception in
    `produce` is raised to the caller; closing the generator (or dropping it) returns at
    once, and the thread ends when the result in hand is made.

    A plain thread, not a ThreadPoolExecutor: that one refuses work once the main thread
    has returned, where a script's worker thread or an atexit handler may still caption.
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
    """An (name, bytes, error) item's encoded bytes."""
    return len(item[1])
