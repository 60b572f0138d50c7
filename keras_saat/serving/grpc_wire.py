"""What a gRPC PredictRequest's bytes may hold, its fields counted before protobuf
parses them, since parsing can grow a small message many times over."""

import math

from keras_saat.serving.answers import BadRequest
from keras_saat.serving.request_checks import MAX_ELEMENTS, check_names
from keras_saat.serving.signatures import DEFAULT_SIGNATURE

MAX_FIELDS = 256  # fields of a request, an input entry or a tensor, other than its values
MAX_DIMS = 32
MIN_STRINGS = 4096  # string_val entries always walked, so that a few over the batch limit
# are answered by the request checks, with the count they name
TENSOR_CONTENT = 4
STRING_VAL = 8
# A TensorProto's value fields, and the one each dtype (types.proto's number) fills.
VALUE_FIELDS = frozenset({4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18})
FIELD_OF_DTYPE = {
    1: 5, 2: 6, 3: 7, 4: 7, 5: 7, 6: 7, 7: 8, 8: 9, 9: 10, 10: 11, 14: 13, 17: 7,
    18: 12, 19: 13, 22: 16, 23: 17,
}  # fmt: skip


def _varint(data, pos, end):
    value = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise BadRequest("the request is not a valid PredictRequest (a truncated varint)")


def _fields(data, start, end):
    """Yields (field number, wire type, start, end) of each field in data[start:end]; for
    a varint, start is its value. Values are skipped over, never copied."""
    pos = start
    while pos < end:
        tag, pos = _varint(data, pos, end)
        number, kind = tag >> 3, tag & 7
        if kind == 0:
            value, pos = _varint(data, pos, end)
            yield number, kind, value, pos
            continue
        if kind == 2:
            size, pos = _varint(data, pos, end)
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
        else:
            raise BadRequest(f"the request is not a valid PredictRequest (wire type {kind})")
        if pos + size > end:
            raise BadRequest("the request is not a valid PredictRequest (a truncated field)")
        yield number, kind, pos, pos + size
        pos += size


def _counted(fields, limit, what):
    for count, field in enumerate(fields):
        if count >= limit:
            raise BadRequest(f"{what} has over {limit} fields; a request needs a few")
        yield field


def check_field_count(data, what):
    """BadRequest when a message's top level has over MAX_FIELDS fields (or is malformed)."""
    for _ in _counted(_fields(data, 0, len(data)), MAX_FIELDS, what):
        pass


def model_spec(data):
    """The ModelSpec of a serialized PredictRequest, read without parsing its inputs."""
    from tensorflow_serving.apis import model_pb2

    spec = model_pb2.ModelSpec()
    for number, kind, start, end in _counted(
        _fields(data, 0, len(data)), MAX_FIELDS, "the request"
    ):
        if number == 1 and kind == 2:
            spec.MergeFromString(data[start:end])  # no repeated fields: it cannot grow
    return spec


def _string_limit(spec, max_batch):
    """The most elements `spec` admits in a request of `max_batch` rows."""
    dims = spec.shape.as_list()[1:]
    if any(d is None for d in dims):
        return MAX_ELEMENTS
    return min(max_batch * math.prod(dims), MAX_ELEMENTS)


def _check_tensor(data, ranges, name, spec, max_batch):
    """Checks the fields of one input's tensor, its occurrences (protobuf merges them)
    counted together."""
    value_field = FIELD_OF_DTYPE.get(spec.dtype.as_datatype_enum)
    most = _string_limit(spec, max_batch)
    limit, strings, dims, others = max(most, MIN_STRINGS), 0, 0, 0
    fields = (field for start, end in ranges for field in _fields(data, start, end))
    for number, kind, a, b in fields:
        if number == STRING_VAL and value_field == STRING_VAL:
            strings += 1
            if strings > limit:
                raise BadRequest(
                    f"input {name}: over {limit} string values; the signature takes "
                    f"at most {most} in one request"
                )
            continue
        others += 1
        if others > MAX_FIELDS:
            raise BadRequest(f"input {name}: over {MAX_FIELDS} fields in its tensor")
        if number == 2 and kind == 2:  # tensor_shape: count its dims
            for field in _fields(data, a, b):
                dims += field[0] == 2
                if dims > MAX_DIMS:
                    raise BadRequest(f"input {name}: over {MAX_DIMS} dimensions in its shape")
        elif number in VALUE_FIELDS and number not in (TENSOR_CONTENT, value_field):
            raise BadRequest(
                f"input {name}: the signature takes {spec.dtype.name}; its values "
                f"belong in field {value_field} of the TensorProto, not field {number}"
            )


def check_predict_wire(data, input_specs, max_batch):
    """BadRequest unless a serialized PredictRequest (`data`, as received) can be parsed
    within its own size: a bounded number of fields, each input's tensor bounded by its
    signature's spec (`input_specs(name)` -> {input: tf.TensorSpec}) and `max_batch`."""
    signature = model_spec(data).signature_name or DEFAULT_SIGNATURE
    specs = input_specs(signature)
    tensors = {}  # input name -> the (start, end) of each of its tensors' occurrences
    fields = _counted(_fields(data, 0, len(data)), MAX_FIELDS, "the request")
    for number, kind, start, end in fields:
        if number != 2 or kind != 2:
            continue
        key, ranges = "", []
        for inner, inner_kind, a, b in _counted(_fields(data, start, end), 8, "an input"):
            if inner == 1 and inner_kind == 2:
                key = bytes(data[a:b]).decode("utf-8", "replace")
            elif inner == 2 and inner_kind == 2:
                ranges.append((a, b))
        check_names(signature, specs, set(specs) | {key})
        tensors.setdefault(key, []).extend(ranges)
    for key, ranges in tensors.items():
        _check_tensor(data, ranges, key, specs[key], max_batch)
