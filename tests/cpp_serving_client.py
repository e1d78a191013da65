"""Runs SavedModel signatures through TensorFlow's C++ loader, as TF Serving's model server does.

Run as a script in a fresh process (tests/test_serving.py does), never imported by the project:

    python cpp_serving_client.py requests.json results.json

It imports neither tensorflow_text nor the project. tensorflow-text's kernels come only from the
op libraries (`*.so`) shipped inside the installed tensorflow_text package, loaded with
`tf.load_op_library` (the model server links the same ops into its binary). Each SavedModel is
loaded with TF's C API `TF_LoadSessionFromSavedModel` (C++ `LoadSavedModel`, the loader behind
TF Serving's `SavedModelBundle`) from `libtensorflow_cc.so.2` in the TensorFlow wheel, called
through ctypes; signatures run with `TF_SessionRun` on the tensor names of the MetaGraphDef's
SignatureDefs. That path restores variables with the graph's own saver op, unlike
`tf.saved_model.load`, which re-creates Python objects and so hides restore bugs.

requests.json: a list of jobs `{"saved_model": dir, "requests": [{"signature": name,
"inputs": {name: {"dtype": "string"|"int32"|..., "value": nested list}}}]}`. results.json: per job
`{"signatures": {name: {"inputs": [...], "outputs": [...]}}, "non_core_ops": [op types core
TensorFlow does not register], "results": [{output: nested list}]}` (strings decoded as UTF-8),
plus `"modules"`: which of tensorflow_text and the project's modules the process imported (none,
if the check holds).
"""

import ctypes
import glob
import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import errors_impl
from tensorflow.python.framework import op_def_registry

PROJECT_MODULES = ("export", "classifier", "squad", "tagging", "modeling", "tokenization",
                   "in_graph_tokenization", "training", "extract_features", "tensorflow_text")
# TF_DataType values (tensorflow/c/tf_datatype.h) and their NumPy types.
DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 9: np.int64, 10: np.bool_, 7: object}
TSTRING_SIZE = 24  # sizeof(TF_TString).


class Output(ctypes.Structure):
  _fields_ = [("oper", ctypes.c_void_p), ("index", ctypes.c_int)]


class Buffer(ctypes.Structure):
  _fields_ = [("data", ctypes.c_void_p), ("length", ctypes.c_size_t),
              ("data_deallocator", ctypes.c_void_p)]


def c_api() -> ctypes.CDLL:
  """libtensorflow_cc from the wheel, with the prototypes used here."""
  lib = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2"))
  p, i, size, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int64
  prototypes = {
      "TF_NewStatus": (p, []), "TF_GetCode": (i, [p]), "TF_Message": (ctypes.c_char_p, [p]),
      "TF_NewSessionOptions": (p, []), "TF_NewGraph": (p, []),
      "TF_NewBuffer": (ctypes.POINTER(Buffer), []),
      "TF_LoadSessionFromSavedModel": (p, [p, p, ctypes.c_char_p,
                                           ctypes.POINTER(ctypes.c_char_p), i, p, p, p]),
      "TF_GraphOperationByName": (p, [p, ctypes.c_char_p]),
      "TF_SessionRun": (None, [p, p, ctypes.POINTER(Output), ctypes.POINTER(p), i,
                               ctypes.POINTER(Output), ctypes.POINTER(p), i, p, i, p, p]),
      "TF_AllocateTensor": (p, [i, ctypes.POINTER(i64), i, size]),
      "TF_TensorData": (p, [p]), "TF_NumDims": (i, [p]), "TF_Dim": (i64, [p, i]),
      "TF_TensorType": (i, [p]), "TF_TensorByteSize": (size, [p]), "TF_DeleteTensor": (None, [p]),
      "TF_StringInit": (None, [p]), "TF_StringCopy": (None, [p, ctypes.c_char_p, size]),
      "TF_StringGetDataPointer": (p, [p]), "TF_StringGetSize": (size, [p]),
  }
  for name, (restype, argtypes) in prototypes.items():
    function = getattr(lib, name)
    function.restype, function.argtypes = restype, argtypes
  return lib


def check(lib, status, what: str) -> None:
  """Raises RuntimeError "<TF error class>: <what>: <message>" if the status is not OK."""
  code = lib.TF_GetCode(status)
  if code != 0:
    raise RuntimeError("%s: %s: %s" % (errors_impl.exception_type_from_error_code(code).__name__,
                                       what, lib.TF_Message(status).decode()))


def load_text_ops() -> None:
  """Registers tensorflow-text's ops from the package's op libraries, without importing it."""
  spec = [path for path in sys.path if os.path.isdir(os.path.join(path, "tensorflow_text"))]
  libraries = glob.glob(os.path.join(spec[0], "tensorflow_text", "python", "ops", "*.so"))
  assert libraries, "no tensorflow_text op libraries found"
  for library in sorted(libraries):
    tf.load_op_library(library)


def to_tensor(lib, array: np.ndarray, dtype_enum: int):
  """A new TF_Tensor holding the NumPy array (strings as TF_TString)."""
  dims = (ctypes.c_int64 * array.ndim)(*array.shape)
  if dtype_enum == 7:
    tensor = lib.TF_AllocateTensor(7, dims, array.ndim, array.size * TSTRING_SIZE)
    base = lib.TF_TensorData(tensor)
    for k, value in enumerate(array.reshape(-1)):
      # surrogateescape: a request's raw bytes that are not UTF-8 travel in JSON as lone
      # surrogates (U+DC80..U+DCFF) and arrive as the bytes they stand for.
      data = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogateescape")
      lib.TF_StringInit(base + k * TSTRING_SIZE)
      lib.TF_StringCopy(base + k * TSTRING_SIZE, data, len(data))
    return tensor
  array = np.ascontiguousarray(array, DTYPES[dtype_enum])
  tensor = lib.TF_AllocateTensor(dtype_enum, dims, array.ndim, array.nbytes)
  ctypes.memmove(lib.TF_TensorData(tensor), array.ctypes.data, array.nbytes)
  return tensor


def from_tensor(lib, tensor) -> list:
  """A TF_Tensor as a nested list (strings decoded as UTF-8)."""
  shape = [lib.TF_Dim(tensor, d) for d in range(lib.TF_NumDims(tensor))]
  dtype_enum = lib.TF_TensorType(tensor)
  base = lib.TF_TensorData(tensor)
  if dtype_enum == 7:
    values = [ctypes.string_at(lib.TF_StringGetDataPointer(base + k * TSTRING_SIZE),
                               lib.TF_StringGetSize(base + k * TSTRING_SIZE)).decode("utf-8")
              for k in range(int(np.prod(shape)))]
    return np.array(values, dtype=object).reshape(shape).tolist()
  size = lib.TF_TensorByteSize(tensor)
  return np.frombuffer(ctypes.string_at(base, size), DTYPES[dtype_enum]).reshape(shape).tolist()


class CppSavedModel:
  """A SavedModel loaded with TF_LoadSessionFromSavedModel (tag "serve")."""

  def __init__(self, lib, export_dir: str):
    self.lib = lib
    self.status = lib.TF_NewStatus()
    self.graph = lib.TF_NewGraph()
    meta_graph_buffer = lib.TF_NewBuffer()
    tags = (ctypes.c_char_p * 1)(b"serve")
    self.session = lib.TF_LoadSessionFromSavedModel(
        lib.TF_NewSessionOptions(), None, export_dir.encode(), tags, 1, self.graph,
        meta_graph_buffer, self.status)
    check(lib, self.status, "loading " + export_dir)
    meta_graph = meta_graph_pb2.MetaGraphDef.FromString(
        ctypes.string_at(meta_graph_buffer.contents.data, meta_graph_buffer.contents.length))
    self.signatures = dict(meta_graph.signature_def)

  def output(self, tensor_name: str) -> Output:
    op_name, index = tensor_name.split(":")
    operation = self.lib.TF_GraphOperationByName(self.graph, op_name.encode())
    assert operation, tensor_name
    return Output(operation, int(index))

  def run(self, signature_name: str, inputs: dict) -> dict:
    """Feeds {input name: np.ndarray} to a signature; returns {output name: nested list}."""
    lib, signature = self.lib, self.signatures[signature_name]
    assert sorted(inputs) == sorted(signature.inputs), (sorted(inputs), sorted(signature.inputs))
    names = sorted(inputs)
    feeds = (Output * len(names))(*[self.output(signature.inputs[n].name) for n in names])
    values = (ctypes.c_void_p * len(names))(*[
        to_tensor(lib, inputs[n], signature.inputs[n].dtype) for n in names])
    output_names = sorted(signature.outputs)
    fetches = (Output * len(output_names))(*[
        self.output(signature.outputs[n].name) for n in output_names])
    results = (ctypes.c_void_p * len(output_names))()
    lib.TF_SessionRun(self.session, None, feeds, values, len(names), fetches, results,
                      len(output_names), None, 0, None, self.status)
    for value in values:
      lib.TF_DeleteTensor(value)
    check(lib, self.status, "running signature %r" % signature_name)
    outputs = {n: from_tensor(lib, results[k]) for k, n in enumerate(output_names)}
    for k in range(len(output_names)):
      lib.TF_DeleteTensor(results[k])
    return outputs


def non_core_ops(export_dir: str) -> list[str]:
  """Op types of the SavedModel's graphs that core TensorFlow does not register (call this before
  loading any op library)."""
  saved_model = saved_model_pb2.SavedModel()
  with open(os.path.join(export_dir, "saved_model.pb"), "rb") as reader:
    saved_model.ParseFromString(reader.read())
  ops, functions = set(), set()
  for meta_graph in saved_model.meta_graphs:
    library = meta_graph.graph_def.library.function
    functions.update(function.signature.name for function in library)
    ops.update(node.op for node in meta_graph.graph_def.node)
    ops.update(node.op for function in library for node in function.node_def)
  return sorted(op for op in ops - functions if op_def_registry.get(op) is None)


def main(requests_file: str, results_file: str) -> None:
  with open(requests_file, encoding="utf-8") as reader:
    jobs = json.load(reader)
  ops = [non_core_ops(job["saved_model"]) for job in jobs]
  load_text_ops()
  lib = c_api()
  results = []
  for job, job_ops in zip(jobs, ops):
    model = CppSavedModel(lib, job["saved_model"])
    outcome = {"signatures": {name: {"inputs": sorted(s.inputs), "outputs": sorted(s.outputs)}
                              for name, s in model.signatures.items()},
               "non_core_ops": job_ops, "results": []}
    for request in job["requests"]:
      inputs = {name: np.array(spec["value"], dtype=object if spec["dtype"] == "string"
                               else spec["dtype"]) for name, spec in request["inputs"].items()}
      try:
        outcome["results"].append(model.run(request["signature"], inputs))
      except RuntimeError as error:
        outcome["results"].append({"error": str(error)})
    results.append(outcome)
  with open(results_file, "w", encoding="utf-8") as writer:
    json.dump({"jobs": results, "modules": sorted(m for m in sys.modules if m in PROJECT_MODULES)},
              writer)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
