"""Readers check what they read: files whose header, metadata or sizes lie are refused, not used.

Each test crafts a damaged or lying file by hand, from the format's definition (a safetensors file
byte by byte, a checkpoint state file as text, a TFRecord of other lengths, a cache note), and
expects an `errors.InputError` whose message names the file and what is wrong in it.
"""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import errors

# --------------------------------------------------------------------------------- checkpoints


def dense_model() -> keras.Model:
  """A model whose checkpoint names are `dense/kernel` [4, 3] and `dense/bias` [3] (float32)."""
  model = keras.Sequential([keras.layers.Dense(3, name="dense")], name="task")
  model.build((None, 4))
  return model


def write_dense_checkpoint(prefix, kernel=None) -> str:
  kernel = np.ones((4, 3), np.float32) if kernel is None else kernel
  return checkpoints.write_checkpoint({"dense/kernel": kernel, "dense/bias": np.zeros(3, np.float32)},
                                      str(prefix))


def test_missing_init_checkpoint_prefix_names_the_path(tmp_path):
  missing = str(tmp_path / "uncased" / "bert_model.ckpt")
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"^no checkpoint at %s \(%s\.index does not exist\)$" % (missing, missing)):
    checkpoints.init_from_checkpoint(dense_model(), missing)


def test_state_file_naming_a_step_whose_files_are_gone_is_not_replaced_by_another(tmp_path):
  write_dense_checkpoint(tmp_path / "model.ckpt-100")
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-200"\n'
                                       'all_model_checkpoint_paths: "model.ckpt-200"\n')
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"no checkpoint at .*model\.ckpt-200 .* %s names it as the latest" %
                     (tmp_path / "checkpoint")) as error:
    checkpoints.init_from_checkpoint(dense_model(), str(tmp_path))
  assert isinstance(error.value, errors.InputError) and "\n" not in str(error.value)


def test_state_file_naming_another_directory_is_refused(tmp_path):
  elsewhere = write_dense_checkpoint(tmp_path / "other_run" / "model.ckpt-5")
  run = tmp_path / "run"
  run.mkdir()
  (run / "checkpoint").write_text('model_checkpoint_path: "%s"\n' % elsewhere)
  with pytest.raises(checkpoints.CheckpointError, match=r"names %s, which is not in %s" %
                     (elsewhere, run)):
    checkpoints.resolve_checkpoint_path(str(run))
  with pytest.raises(checkpoints.CheckpointError, match="which is not in"):
    checkpoints.list_checkpoints(str(run))


def test_shape_mismatch_names_variable_both_shapes_and_file(tmp_path):
  prefix = write_dense_checkpoint(tmp_path / "ckpt", kernel=np.ones((4, 2), np.float32))
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"^checkpoint %s: variable dense/kernel has shape \[4, 2\] in the "
                     r"checkpoint but \[4, 3\] in the model$" % prefix):
    checkpoints.init_from_checkpoint(dense_model(), prefix)


def test_dtype_of_another_kind_is_refused_half_precision_is_widened(tmp_path):
  model = dense_model()
  kernel = model.get_layer("dense").kernel
  initial = kernel.numpy().copy()
  prefix = write_dense_checkpoint(tmp_path / "ints", kernel=np.full((4, 3), 7, np.int32))
  with pytest.raises(checkpoints.CheckpointError,
                     match=r"checkpoint %s: variable dense/kernel has dtype int32 in the "
                     r"checkpoint but float32 in the model" % prefix):
    checkpoints.init_from_checkpoint(model, prefix)
  with pytest.raises(checkpoints.CheckpointError, match=r"dense/kernel has dtype int32"):
    checkpoints.restore_variables(checkpoints.checkpoint_variables(model), prefix)
  np.testing.assert_array_equal(kernel.numpy(), initial)  # Nothing assigned.
  prefix = write_dense_checkpoint(tmp_path / "halves", kernel=np.full((4, 3), 0.5, np.float16))
  checkpoints.init_from_checkpoint(model, prefix)
  np.testing.assert_array_equal(kernel.numpy(), np.full((4, 3), 0.5))


def test_truncated_data_file_names_checkpoint_and_variable(tmp_path):
  prefix = write_dense_checkpoint(tmp_path / "ckpt")
  os.truncate(prefix + ".data-00000-of-00001", 4)
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"^checkpoint %s: variable dense/\w+ cannot be read \(" % prefix):
    checkpoints.init_from_checkpoint(dense_model(), prefix)
