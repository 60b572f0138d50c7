"""Runs an exported model as TF Serving does, in a process that never imports keras_saat.

python tf_serving_like.py run VERSION_DIR INPUTS.pkl OUTPUTS.pkl
    A TF1 Session loads the SavedModel (tag "serve") and runs each signature's
    tensors by name from its SignatureDef, as tensorflow_model_server does.
python tf_serving_like.py ops VERSION_DIR OUT.json
    Every op in the graph and its function library, and which of them core
    TensorFlow does not register (and which tensorflow_text registers).
"""

import json
import pickle
import sys

import tensorflow as tf


def run(version_dir, inputs_path, outputs_path):
    requests = pickle.loads(open(inputs_path, "rb").read())  # {signature: {input: array}}
    tf.compat.v1.disable_eager_execution()
    results = {}
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], version_dir)
        for signature, inputs in requests.items():
            definition = meta_graph.signature_def[signature]
            feeds = {definition.inputs[k].name: v for k, v in inputs.items()}
            fetches = {k: v.name for k, v in definition.outputs.items()}
            results[signature] = session.run(fetches, feeds)
    results["imported"] = sorted(m for m in sys.modules if m.split(".")[0] == "keras_saat")
    open(outputs_path, "wb").write(pickle.dumps(results))


def _registered_ops():
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    ops = op_def_pb2.OpList()
    ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
    return {op.name for op in ops.op}


def ops(version_dir, out_path):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(f"{version_dir}/saved_model.pb", "rb").read())
    graph = proto.meta_graphs[0].graph_def
    names = {node.op for node in graph.node}
    functions = {f.signature.name for f in graph.library.function}
    for function in graph.library.function:
        names |= {node.op for node in function.node_def}
    names -= functions  # calls of the library's own functions
    core = _registered_ops()
    unregistered = sorted(names - core)
    import tensorflow_text  # noqa: F401  (registers its ops)

    text_ops = _registered_ops() - core
    result = {
        "ops": sorted(names),
        "unregistered": unregistered,
        "tensorflow_text_ops": sorted(names & text_ops),
        "text_ops_known": len(text_ops),
        "imported": sorted(m for m in sys.modules if m.split(".")[0] == "keras_saat"),
    }
    open(out_path, "w").write(json.dumps(result))


if __name__ == "__main__":
    {"run": run, "ops": ops}[sys.argv[1]](*sys.argv[2:])
