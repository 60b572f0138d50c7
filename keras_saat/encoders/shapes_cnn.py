"""A small CNN for 128x128 Shapes scenes, and its attribute pre-training.

A randomly initialised backbone carries no colour or shape information about
Shapes scenes (shared/DESIGN.md), so the Shapes default pre-trains this CNN on
the training split's per-location scene attributes (shape, colour, size and
grid cell of the object under each feature location), then freezes it: the
same role ImageNet pre-training plays for VGG in the paper.
"""

import numpy as np

from keras_saat.data.camera import varied_view
from keras_saat.data.shapes import (
    COLOURS,
    GRID,
    IMAGE_SIZE,
    SHAPES,
    SIZES,
    object_mask,
    render,
    sample_objects,
)

# Keras and TensorFlow are imported by the functions that build and train, so the backbone
# registry can name these variants before TensorFlow is loaded (the command line checks a
# config that way).

FEATURE_LAYER = "features"
# The registered variants (keras_saat.encoders.registry): name -> `build_shapes_cnn`'s
# width (channels of the first convolution; the features have 4x as many) and
# standardize. The small ones need fewer multiply-adds and still tell shapes and colours
# apart on object locations; the `_norm` ones see each image at mean 0 and variance 1, so
# exposure and contrast do not reach the convolutions. `shapes_cnn_small_norm` is the
# demo's.
VARIANTS = {
    "shapes_cnn": {"width": 32, "standardize": False},
    "shapes_cnn_small": {"width": 24, "standardize": False},
    "shapes_cnn_norm": {"width": 32, "standardize": True},
    "shapes_cnn_small_norm": {"width": 24, "standardize": True},
}
# Heads of the pre-training task: number of classes, class 0 = no object.
ATTRIBUTE_HEADS = {
    "shape": 1 + len(SHAPES),
    "colour": 1 + len(COLOURS),
    "size": 1 + len(SIZES),
    "row": 1 + GRID,
    "col": 1 + GRID,
}


def build_shapes_cnn(input_shape=(128, 128, 3), width=32, refine_layers=2, standardize=False):
    """3x3 convolutions with batch norm: four of stride 2, then `refine_layers` at the 8x8
    grid, then the feature layer: (128, 128, 3) -> (8, 8, 4 * width).

    With two refining layers the receptive field (127 px) spans the scene, so a location
    at the edge of an object sees all of it: that is what tells a triangle from a
    diamond there. Batch norm lets the pre-training converge in a few epochs.

    Args:
        input_shape: tuple. Preprocessed input (pixels scaled to [0, 1]). Defaults to (128, 128, 3).
        width: int. Channels of the first convolution. Defaults to 32.
        refine_layers: int. Stride-1 convolutions at the 8x8 grid before the feature layer.
            Defaults to 2.
        standardize: bool. Each image to mean 0 and variance 1 over its pixels and
            channels first (Keras's `LayerNormalization` without scale or offset): a
            brighter exposure or a lower contrast, (a x + b) for a > 0, leaves the
            convolutions' input as it was, and a colour's channels keep their differences
            up to one scale for the whole image. Defaults to False.
    """
    import keras

    from keras_saat.encoders.add_coords import AddCoords

    inputs = keras.Input(input_shape, name="pixels")
    x = inputs
    if standardize:
        x = keras.layers.LayerNormalization(
            axis=(1, 2, 3), center=False, scale=False, epsilon=1e-3, name="standardize"
        )(x)
    x = AddCoords(name="add_coords")(x)
    layers = [(f"conv{i + 1}", width * mult, 2) for i, mult in enumerate((1, 2, 3, 4))]
    layers += [(f"refine{i + 1}", 4 * width, 1) for i in range(refine_layers)]
    for name, channels, stride in layers:
        x = keras.layers.Conv2D(
            channels, 3, strides=stride, padding="same", use_bias=False, name=name
        )(x)
        x = keras.layers.BatchNormalization(name=f"{name}_bn")(x)
        x = keras.layers.Activation("relu", name=f"{name}_relu")(x)
    x = keras.layers.Conv2D(4 * width, 3, padding="same", activation="relu", name=FEATURE_LAYER)(x)
    return keras.Model(inputs, x, name="shapes_cnn")


def attribute_targets(objects_per_image, grid_shape, image_size=128, min_fraction=0.125):
    """Per-location class targets of the pre-training task.

    A feature location gets the attributes of the object that covers most of
    its pixel block, when that object covers at least `min_fraction` of it;
    otherwise class 0 (background) in every head. `image_size` is the side of the
    images the CNN reads; the objects' boxes are the world's (IMAGE_SIZE pixels a
    side) and are scaled to it.

    Returns:
        dict head -> (N, h, w) int32 array.
    """
    h, w = grid_shape
    out = {k: np.zeros((len(objects_per_image), h, w), np.int32) for k in ATTRIBUTE_HEADS}
    shapes, colours, sizes = list(SHAPES), list(COLOURS), list(SIZES)
    block_h, block_w = image_size // h, image_size // w
    scale = image_size / IMAGE_SIZE
    for n, objects in enumerate(objects_per_image):
        best = np.zeros((h, w))
        for obj in objects:
            # A scene read at another size (model.image_size) holds its objects scaled.
            seen = {**obj, "box": [c * scale for c in obj["box"]]} if scale != 1 else obj
            mask = object_mask(seen, image_size)[: h * block_h, : w * block_w]
            cover = mask.reshape(h, block_h, w, block_w).mean(axis=(1, 3))
            take = (cover >= min_fraction) & (cover > best)
            best = np.where(take, cover, best)
            out["shape"][n][take] = 1 + shapes.index(obj["shape"])
            out["colour"][n][take] = 1 + colours.index(obj["colour"])
            out["size"][n][take] = 1 + sizes.index(obj["size"])
            out["row"][n][take] = 1 + obj["cell"][0]
            out["col"][n][take] = 1 + obj["cell"][1]
    return out


def pretrain_shapes_cnn(
    images,
    objects,
    val_images=None,
    val_objects=None,
    epochs=4,
    batch_size=32,
    seed=0,
    extra_scenes=0,
    width=32,
    augment=True,
    log=print,
    standardize=False,
    jit_compile="auto",
    trainer_file=None,
):
    """Trains the Shapes CNN on per-location attributes; returns (model, val accuracy per head).

    Args:
        images: (N, 128, 128, 3) pixels in [0, 255]. Training scenes.
        objects: list of N lists of object dicts (the dataset's `objects` field).
        val_images: array or None. Held-out scenes for the reported accuracy. Defaults to None.
        val_objects: list or None. Their objects. Defaults to None.
        epochs: int. Passes over the scenes, the learning rate decaying on a cosine.
            Defaults to 4.
        batch_size: int. Defaults to 32.
        seed: int. Initialisation, shuffling and extra-scene seed. Defaults to 0.
        extra_scenes: int. More scenes rendered for the pre-training only (from the same
            world, with their own seed), as ImageNet is a larger set than the captioning
            data. Defaults to 0.
        width: int. The CNN's width (`build_shapes_cnn`; `VARIANTS` has the registered
            ones). Defaults to 32.
        augment: bool. Vary the views: the extra scenes on dark to light pages under
            uneven light, drawn by hand or photographed
            (`keras_saat.data.camera.varied_view`), every batch through
            `keras_saat.images.photometry.PhotometricViews` in the train step
            (`attribute_trainer`).
            Defaults to True.
        log: callable. Receives progress lines. Defaults to print.
        standardize: bool. `build_shapes_cnn`'s. Defaults to False.
        jit_compile: bool or "auto". The train step's, as `keras.Model.compile` takes it.
            Defaults to "auto".
        trainer_file: path or None. Where to save the pre-training model's weights, the
            CNN's and its attribute heads' (`attribute_trainer`), as the packaged
            pre-trained CNNs are kept (`keras_saat.encoders.packaged_shapes_cnn`).
            Defaults to None.

    Returns:
        (backbone keras.Model, dict head -> accuracy on object locations of the val set).
    """
    import keras

    keras.utils.set_random_seed(seed)
    backbone = build_shapes_cnn(images.shape[1:], width=width, standardize=standardize)
    grid = tuple(backbone.output.shape[1:3])
    trainer = attribute_trainer(backbone, augment, seed)
    images = _as_uint8(images)  # a quarter of float32's memory
    if extra_scenes:
        rng = np.random.default_rng([seed, 1])  # not the dataset generator's stream
        extra = [sample_objects(rng) for _ in range(extra_scenes)]
        draw = (lambda o: varied_view(o, rng)) if augment else (lambda o: (render(o, rng), o))
        rendered, extra = zip(*[draw(o) for o in extra], strict=True)
        rendered = np.stack(rendered)  # (E, 128, 128, 3); scenes are square
        if rendered.shape[1:3] != images.shape[1:3]:
            rendered = _resized_uint8(rendered, images.shape[1])
        images = np.concatenate([images, rendered])
        objects = list(objects) + list(extra)
    steps = epochs * -(-len(images) // batch_size)
    trainer.compile(
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(2e-3, steps, 0.05)),
        loss={
            k: keras.losses.SparseCategoricalCrossentropy(from_logits=True) for k in ATTRIBUTE_HEADS
        },
        jit_compile=jit_compile,
    )
    targets = attribute_targets(objects, grid, images.shape[1])

    class _Progress(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            log(f"  backbone pre-training epoch {epoch + 1}/{epochs}: loss {logs['loss']:.4f}")

    trainer.fit(
        _scene_batches(images, targets, batch_size, seed),
        epochs=epochs,
        shuffle=False,  # the batches are shuffled already
        verbose=0,
        callbacks=[_Progress()],
    )
    if trainer_file is not None:  # the layers' weights: an uncompiled view leaves Adam's out
        keras.Model(trainer.inputs, trainer.outputs).save_weights(str(trainer_file))
    accuracy = {}
    if val_images is not None:
        accuracy = attribute_accuracy(trainer, val_images, val_objects)
    return backbone, accuracy


def attribute_accuracy(trainer, images, objects):
    """Accuracy of each attribute head of `trainer` (`attribute_trainer`) on the feature
    locations of `images` (pixels in [0, 255]) that lie on an object.

    Returns:
        dict head -> float.
    """
    predictions = trainer.predict(np.asarray(images, np.float32) * np.float32(1 / 255), verbose=0)
    targets = attribute_targets(objects, predictions["shape"].shape[1:3], images.shape[1])
    on_object = targets["shape"] > 0
    return {
        name: float((predictions[name].argmax(-1) == targets[name])[on_object].mean())
        for name in ATTRIBUTE_HEADS
    }


def attribute_trainer(backbone, augment=True, seed=0):
    """The Keras model that pre-trains `backbone`: pixels in [0, 1] in, one 1x1-conv head of
    logits per attribute (`ATTRIBUTE_HEADS`) out.

    With `augment`, its first layer ("augmentation") is
    `keras_saat.images.photometry.PhotometricViews`: `photometric_augmentation` and a
    clip to [0, 1], in the train step, on the step's device, compiled by XLA on a CPU too.
    Inference passes through it, so `predict` sees the pixels as they are.
    """
    import keras

    from keras_saat.images.photometry import PhotometricViews

    pixels = keras.Input(backbone.input.shape[1:], name="scenes")
    seen = PhotometricViews(seed, name="augmentation")(pixels) if augment else pixels
    features = backbone(seen)
    heads = {
        name: keras.layers.Conv2D(classes, 1, name=name)(features)
        for name, classes in ATTRIBUTE_HEADS.items()
    }
    return keras.Model(pixels, heads, name="attribute_trainer")


def _as_uint8(images, chunk=1024):
    """`images` (pixels in [0, 255]) as uint8, rounded as a PNG of them would be: scenes at
    their rendered size keep their values exactly, and resized ones (`model.image_size`
    other than the world's) are held at a quarter of float32's memory. Converted `chunk`
    images at a time, so no second float array of them all is made."""
    images = np.asarray(images)
    if images.dtype == np.uint8:
        return images
    out = np.empty(images.shape, np.uint8)
    for start in range(0, len(images), chunk):
        out[start : start + chunk] = np.clip(np.rint(images[start : start + chunk]), 0, 255)
    return out


def _resized_uint8(scenes, side, chunk=1024):
    """uint8 `scenes` resized to `side` (`resize_image`), `chunk` at a time: the float32
    result of all of them at once would be 4 times the uint8 it ends as."""
    from keras_saat.images.decoding import resize_image

    out = np.empty((len(scenes), side, side, scenes.shape[-1]), np.uint8)
    for start in range(0, len(scenes), chunk):
        out[start : start + chunk] = _as_uint8(resize_image(scenes[start : start + chunk], side))
    return out


def _scene_batches(images, targets, batch_size, seed):
    """Shuffled (pixels in [0, 1], targets) batches; a new order every epoch.

    The scenes stay uint8 in memory (a quarter of float32's), and each batch is gathered
    and scaled as it is needed. tf.data's autotuner is off: with it, and in `fit()`'s own
    pipeline for NumPy arrays, the step after an epoch's end can wait with the CPU idle.
    The photometric augmentation is the trainer's (`attribute_trainer`).
    """
    import tensorflow as tf

    from keras_saat.runtime.pipeline_options import without_autotune

    pixels = tf.constant(_as_uint8(images))
    labels = {k: tf.constant(v) for k, v in targets.items()}
    scale = tf.constant(1 / 255, tf.float32)

    def gather(positions):
        batch = tf.cast(tf.gather(pixels, positions), tf.float32) * scale
        return batch, {k: tf.gather(v, positions) for k, v in labels.items()}

    batches = (
        tf.data.Dataset.range(len(images))
        .shuffle(len(images), seed=seed, reshuffle_each_iteration=True)
        .batch(batch_size)
        .map(gather, num_parallel_calls=1)
        .prefetch(2)
    )
    return without_autotune(batches)
