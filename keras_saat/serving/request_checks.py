"""The development server's request limits, and its tensors and JSON values checked
before they reach the model."""

import base64

import numpy as np

from keras_saat.serving.answers import BadRequest
from keras_saat.serving.signatures import DEFAULT_SIGNATURE

MAX_BODY_BYTES = 256 * 1024 * 1024
MAX_BATCH = 64  # images in one request; TF Serving's batching config splits larger loads
MAX_ELEMENTS = 1 << 24  # elements a gRPC tensor may declare before its values are checked


def expected_shape(spec):
    """`spec`'s shape as a request error names it."""
    return f"{[d if d is not None else -1 for d in spec.shape.as_list()]} (-1 = any)"


def check_batch(count, max_batch):
    """BadRequest when a request holds more than `max_batch` instances."""
    if count > max_batch:
        raise BadRequest(
            f"{count} instances in one request, over this server's limit of "
            f"{max_batch} (serve --max-batch); send them in smaller requests"
        )


def _count(shape, name, over):
    """The elements of `shape`; BadRequest at a negative dimension or past MAX_ELEMENTS."""
    count = 1
    for size in shape:
        if size < 0:
            raise BadRequest(f"input {name}: a negative dimension {size} in its shape")
        count *= size
        if count > MAX_ELEMENTS:
            raise BadRequest(
                f"input {name}: its shape {shape} {over} {MAX_ELEMENTS} elements; "
                "send fewer or smaller images in each request"
            )
    return count


def check_shape(shape, spec, name, max_batch):
    """BadRequest unless `shape` (a list of ints) fits `spec` (a tf.TensorSpec): its rank,
    its fixed dimensions, at most `max_batch` rows and MAX_ELEMENTS elements."""
    dims = spec.shape.as_list()
    if len(shape) != len(dims) or any(
        d is not None and d != s for s, d in zip(shape, dims, strict=False)
    ):
        raise BadRequest(
            f"input {name} has shape {shape}; the signature expects {expected_shape(spec)}"
        )
    if shape:
        check_batch(shape[0], max_batch)
    _count(shape, name, "holds over")


def check_proto(proto, name, spec=None, max_batch=MAX_BATCH):
    """BadRequest unless a TensorProto's wire form (shape, dtype, values) fits, read from
    its fields before anything is materialised: `tf.make_ndarray` would repeat the last
    value to fill a declared shape. Without `spec`, only the element count and values."""
    import tensorflow as tf

    dims = [d.size for d in proto.tensor_shape.dim]
    if proto.tensor_shape.unknown_rank:
        raise BadRequest(f"input {name}: its tensor_shape has an unknown rank")
    count = _count(dims, name, "declares over")
    try:
        dtype = tf.dtypes.as_dtype(proto.dtype) if proto.dtype else None
    except TypeError:
        dtype = None
    if dtype is None or dtype == tf.resource or dtype == tf.variant:
        raise BadRequest(f"input {name}: unsupported dtype {proto.dtype}")
    if spec is not None and (dtype == tf.string) != (spec.dtype == tf.string):
        raise BadRequest(f"input {name}: dtype {dtype.name}; the signature takes {spec.dtype.name}")
    if dtype == tf.string:
        if proto.tensor_content:
            raise BadRequest(f"input {name}: a string tensor sends its values in string_val")
        sent = len(proto.string_val)
    elif proto.tensor_content:
        if len(proto.tensor_content) != count * dtype.size:
            raise BadRequest(
                f"input {name}: its shape {dims} holds {count * dtype.size} bytes of "
                f"{dtype.name} but tensor_content has {len(proto.tensor_content)}"
            )
        sent = count
    else:
        fields = [f for f, _ in proto.ListFields() if f.name.endswith("_val")]
        sent = sum(len(getattr(proto, f.name)) for f in fields)
        if dtype.is_complex:
            sent //= 2
    if sent != count:
        raise BadRequest(
            f"input {name}: its shape {dims} holds {count} values but the request sends {sent}"
        )
    if spec is not None:
        check_shape(dims, spec, name, max_batch)


def tensor_from_proto(proto, name, spec=None, max_batch=MAX_BATCH):
    """A TensorProto as a NumPy array, once `check_proto` passes it."""
    import tensorflow as tf

    check_proto(proto, name, spec, max_batch)
    try:
        return tf.make_ndarray(proto)
    except (TypeError, ValueError) as err:
        raise BadRequest(f"input {name}: {err}") from None


def strings(value, where):
    """JSON text or {"b64": ...} (possibly nested in lists) -> nested lists of bytes."""
    if isinstance(value, list):
        return [strings(item, where) for item in value]
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise BadRequest(f'{where}: a binary value is written {{"b64": "<base64 text>"}}')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError:
            raise BadRequest(f"{where}: the b64 value is not valid base64") from None
    if isinstance(value, str):
        return value.encode("utf-8")
    raise BadRequest(f'{where}: expected text or {{"b64": ...}}, got {type(value).__name__}')


MAX_JSON_VALUES = 1 << 22  # JSON values (lists, numbers, strings) in one REST body


def check_json_size(body, max_batch):
    """BadRequest when a JSON body (bytes) holds more values or objects than a request of
    `max_batch` instances needs, counted on its `[`, `,`, `:` and `{` before parsing."""
    values = 1 + sum(body.count(mark) for mark in (b"[", b",", b":"))
    if values > MAX_JSON_VALUES:
        raise BadRequest(
            f"the request body holds over {MAX_JSON_VALUES} JSON values; send fewer or "
            "smaller images in each request (or pixels over gRPC, as tensor_content)"
        )
    objects, most = body.count(b"{"), 4 * max_batch + 64
    if objects > most:
        raise BadRequest(
            f"the request body holds {objects} JSON objects; a request of at most {max_batch} "
            f'instances needs at most {most} (one {{"b64": ...}} per image)'
        )


def _json_leaf(spec, name):
    """The check of one element of `spec`'s dtype in JSON: text or {"b64": ...}, or a number."""
    if spec.dtype.name == "string":

        def leaf(value):
            if isinstance(value, str):
                return
            if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
                return
            raise BadRequest(
                f'input {name}: expected text or {{"b64": ...}}, got {type(value).__name__}'
            )
    else:

        def leaf(value):
            if type(value) not in (int, float, bool):
                raise BadRequest(f"input {name}: expected a number, got {type(value).__name__}")

    return leaf


def json_shape(value, spec, name, max_batch):
    """The shape of a parsed JSON input (read down its first elements), once every element
    at every depth is checked against `spec`, before any array is made of it."""
    rank = len(spec.shape)
    shape, item = [], value
    while isinstance(item, list) and len(shape) <= rank:  # one past the rank shows deeper nesting
        shape.append(len(item))
        if not item:
            break
        item = item[0]
    if 0 in shape[:rank] and len(shape) < rank:
        shape += [0] * (rank - len(shape))  # an empty list: no elements below it to read
        if len(spec.shape) and spec.shape[-1] is not None:
            raise BadRequest(
                f"input {name} is empty below dimension 0; the signature expects "
                f"{expected_shape(spec)}"
            )
    check_shape(shape, spec, name, max_batch)
    leaf = _json_leaf(spec, name)

    def rows(item, depth):
        if depth == rank:
            leaf(item)
        elif not isinstance(item, list) or len(item) != shape[depth]:
            held = f"a list of {len(item)}" if isinstance(item, list) else type(item).__name__
            raise BadRequest(
                f"input {name}: {held} at depth {depth} where the shape {shape} "
                f"needs a list of {shape[depth]}; every row holds as many values"
            )
        elif depth + 1 == rank:
            for element in item:
                leaf(element)
        else:
            for element in item:
                rows(element, depth + 1)

    rows(value, 0)  # recursion as deep as the signature's rank, not the request's nesting
    return shape


def _named(value):
    """A JSON object of named inputs (not a {"b64": ...} value)."""
    return isinstance(value, dict) and set(value) != {"b64"}


def rest_arrays(body, input_specs, max_batch):
    """A parsed `:predict` body, row ("instances") or columnar ("inputs") format, as
    (signature name, {input: object array of bytes or checked JSON list}); `input_specs`
    maps a signature name to its {input: tf.TensorSpec}, or raises BadRequest."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    signature = body.get("signature_name") or DEFAULT_SIGNATURE
    if not isinstance(signature, str):
        raise BadRequest('"signature_name" must be a string')
    specs = input_specs(signature)
    names = sorted(specs)
    if ("instances" in body) == ("inputs" in body):
        raise BadRequest(
            'the request needs exactly one of "instances" (row format) or "inputs" (columnar format)'
        )
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list):
            raise BadRequest('"instances" must be a list, one entry per example')
        check_batch(len(instances), max_batch)  # before the rows are converted
        columns = {name: [] for name in names}
        for i, instance in enumerate(instances):
            named = _named(instance)
            if (len(names) > 1 or named) and (not named or set(instance) != set(names)):
                raise BadRequest(f"instance {i} must be an object with keys {', '.join(names)}")
            for name in names:
                columns[name].append(instance[name] if named else instance)
    else:
        inputs = body["inputs"]
        named = _named(inputs)
        if len(names) > 1 and not named:
            raise BadRequest(f'"inputs" must be an object with keys {", ".join(names)}')
        columns = inputs if named else {names[0]: inputs}
    arrays = dict(columns)  # an unknown input goes on as it is, for run() to name
    for name, value in columns.items():
        spec = specs.get(name)
        if spec is not None and "instances" in body and not instances:
            # An empty batch keeps the signature's rank.
            shape = [0, *[d or 0 for d in spec.shape.as_list()[1:]]]
            dtype = object if spec.dtype.name == "string" else spec.dtype.as_numpy_dtype
            arrays[name] = np.empty(shape, dtype)
        elif spec is not None:
            json_shape(value, spec, name, max_batch)
            if spec.dtype.name == "string":
                arrays[name] = np.array(strings(value, f"input {name}"), dtype=object)
    return signature, arrays


def check_names(signature, specs, names):
    """`specs` (a signature's {input: tf.TensorSpec}), once `names` are exactly its inputs."""
    missing = sorted(set(specs) - set(names))
    extra = sorted(set(names) - set(specs))
    if missing or extra:
        raise BadRequest(
            f"signature {signature} takes inputs {', '.join(sorted(specs))}; "
            + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(extra)}")
        )
    return specs


def proto_arrays(signature, protos, input_specs, max_batch):
    """A PredictRequest's inputs (`protos`) as NumPy arrays, all checked first."""
    specs = check_names(signature, input_specs(signature), protos)
    for key, proto in protos.items():
        check_proto(proto, key, specs[key], max_batch)
    return {key: tensor_from_proto(proto, key) for key, proto in protos.items()}
