"""What the development server answers: its errors (each an HTTP status and a gRPC code),
an HTML page, and model outputs as JSON values."""

import base64

import numpy as np


class BadRequest(ValueError):
    """A request the model cannot answer; HTTP 400 (or gRPC INVALID_ARGUMENT)."""


class NotFound(LookupError):
    """An unknown model, version or path; HTTP 404 (or gRPC NOT_FOUND)."""


class Busy(RuntimeError):
    """Too many connections or bodies at once; HTTP 503 with Retry-After."""


class Forbidden(PermissionError):
    """A request from another site, or for a host name this server does not answer; HTTP 403."""


class Page(str):
    """An HTML page answer (the handler sends it as text/html, not JSON)."""


def json_value(array):
    """A NumPy array (or scalar) as JSON values; strings as UTF-8 text, else {"b64": ...};
    NaN and infinities as null (JSON has none: a browser's JSON.parse refuses them)."""
    if isinstance(array, bytes):
        try:
            return array.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(array).decode("ascii")}
    array = np.asarray(array)
    if array.dtype == object or array.dtype.kind == "S":
        return [json_value(item) for item in array] if array.ndim else json_value(array.item())
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        values = array.astype(object)
        values[~np.isfinite(array)] = None  # a model never calibrated: novelty NaN
        return values.tolist()
    return array.tolist()
