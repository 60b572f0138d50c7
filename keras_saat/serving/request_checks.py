"""What a request to the development server may be: its limits, the errors that answer
it, and its tensors and JSON values checked before they reach the model."""

import base64

import numpy as np

MAX_BODY_BYTES = 256 * 1024 * 1024
MAX_BATCH = 64  # images in one request; TF Serving's batching config splits larger loads
MAX_ELEMENTS = 1 << 24  # elements a gRPC tensor may declare before its values are checked


class BadRequest(ValueError):
    """A request the model cannot answer; HTTP 400 (or gRPC INVALID_ARGUMENT)."""


class NotFound(LookupError):
    """An unknown model, version or path; HTTP 404 (or gRPC NOT_FOUND)."""


class Busy(RuntimeError):
    """Too many connections or bodies at once; HTTP 503 with Retry-After."""


class Forbidden(PermissionError):
    """A request from another site, or for a host name this server does not answer; HTTP 403."""


def tensor_from_proto(proto, name):
    """A TensorProto as a NumPy array, once its values are checked to fill its shape.

    `tf.make_ndarray` repeats the last value to fill a declared shape, so a few bytes
    could otherwise declare millions of elements.
    """
    import tensorflow as tf

    dims = [d.size for d in proto.tensor_shape.dim]
    count = 1
    for size in dims:
        if size < 0:
            raise BadRequest(f"input {name}: a negative dimension {size} in its shape")
        count *= size
        if count > MAX_ELEMENTS:
            raise BadRequest(
                f"input {name}: its shape {dims} declares over {MAX_ELEMENTS} elements"
            )
    dtype = tf.dtypes.as_dtype(proto.dtype) if proto.dtype else None
    if dtype is None or dtype == tf.resource or dtype == tf.variant:
        raise BadRequest(f"input {name}: unsupported dtype {proto.dtype}")
    if proto.tensor_content:
        sent = len(proto.tensor_content) // max(dtype.size, 1)
    elif dtype == tf.string:
        sent = len(proto.string_val)
    else:
        fields = [f for f, _ in proto.ListFields() if f.name.endswith("_val")]
        sent = sum(len(getattr(proto, f.name)) for f in fields)
        if dtype.is_complex:
            sent //= 2
    if sent != count:
        raise BadRequest(
            f"input {name}: its shape {dims} holds {count} values but the request sends {sent}"
        )
    try:
        return tf.make_ndarray(proto)
    except (TypeError, ValueError) as err:
        raise BadRequest(f"input {name}: {err}") from None


class Page(str):
    """An HTML page answer (the handler sends it as text/html, not JSON)."""


def json_value(array):
    """A NumPy array (or scalar) as JSON values; strings as UTF-8 text, else {"b64": ...}."""
    if isinstance(array, bytes):
        try:
            return array.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(array).decode("ascii")}
    array = np.asarray(array)
    if array.dtype == object or array.dtype.kind == "S":
        return [json_value(item) for item in array] if array.ndim else json_value(array.item())
    return array.tolist()


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
