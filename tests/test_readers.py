"""Readers check what they read: files whose header, metadata or sizes lie are refused, not used.

Each test crafts a damaged or lying file by hand, from the format's definition (a safetensors file
byte by byte, a checkpoint state file as text, records of other lengths), and expects an
`errors.InputError` whose message names the file and what is wrong in it. (Damaged feature-cache
notes, which are rebuilt rather than refused, are tested in test_feature_cache.py.)
"""
import json
import os
import re
import struct
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import checkpoints
from conftest import REPO_ROOT
import conversion
import errors
import model_conversion
import modeling
import pretraining
import tfrecord_files

# --------------------------------------------------------------------------------- checkpoints


def dense_model() -> keras.Model:
  """A model whose checkpoint names are `dense/kernel` [4, 3] and `dense/bias` [3] (float32)."""
  model = keras.Sequential([keras.layers.Dense(3, name="dense")], name="task")
  model.build((None, 4))
  return model


def write_dense_checkpoint(prefix, kernel=None) -> str:
  kernel = np.ones((4, 3), np.float32) if kernel is None else kernel
  return checkpoints.write_checkpoint(
      {"dense/kernel": kernel, "dense/bias": np.zeros(3, np.float32)}, str(prefix))


def test_missing_init_checkpoint_prefix_names_the_path(tmp_path):
  missing = str(tmp_path / "uncased" / "bert_model.ckpt")
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"^no checkpoint at %s \(%s\.index does not exist\)$" %
                     (missing, missing)):
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


def test_cut_short_missing_or_corrupt_data_is_named(tmp_path):
  """A cut-short or missing .data file is found from the index before any value is assigned; a
  value that fails its checksum when it is read."""
  model = dense_model()
  kernel = model.get_layer("dense").kernel
  initial = kernel.numpy().copy()
  prefix = write_dense_checkpoint(tmp_path / "ckpt", kernel=np.full((4, 3), 2.0, np.float32))
  data = prefix + ".data-00000-of-00001"
  content = open(data, "rb").read()
  assert len(content) == 4 * (4 * 3 + 3)  # float32 bias [3] and kernel [4, 3], nothing else.
  os.truncate(data, len(content) - 4)
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"^checkpoint %s is cut short: its index describes 60 bytes of tensors "
                     r"but its \.data files hold 56$" % prefix):
    checkpoints.init_from_checkpoint(model, prefix)
  np.testing.assert_array_equal(kernel.numpy(), initial)
  with open(data, "wb") as f:  # Right size, last value changed: its checksum fails.
    f.write(content[:-4] + struct.pack("<f", 3.0))
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"^checkpoint %s: variable dense/kernel cannot be read \(" % prefix):
    checkpoints.init_from_checkpoint(model, prefix)
  os.remove(data)
  with pytest.raises(checkpoints.UnreadableCheckpointError,
                     match=r"^checkpoint %s cannot be read: its \.data file is missing" % prefix):
    checkpoints.init_from_checkpoint(model, prefix)


# ---------------------------------------------------------- safetensors (convert_checkpoint)

# A Hugging Face BERT config.json small enough for crafted files (vocab 40, hidden 16).
TINY_HF_CONFIG = {
    "model_type": "bert", "vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 4, "intermediate_size": 24, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 12, "type_vocab_size": 2, "initializer_range": 0.02,
}


def safetensors_bytes(header, data: bytes, header_length=None) -> bytes:
  """A safetensors file as the format defines it: the header's length as an unsigned 64-bit
  little-endian integer, the header (JSON text, or bytes given as is), then the data."""
  text = header if isinstance(header, bytes) else json.dumps(header).encode("utf-8")
  return struct.pack("<Q", len(text) if header_length is None else header_length) + text + data


def f32_entry(shape, begin, end=None) -> dict:
  end = begin + 4 * int(np.prod(shape)) if end is None else end
  return {"dtype": "F32", "shape": list(shape), "data_offsets": [begin, end]}


def floats(*values) -> bytes:
  return struct.pack("<%df" % len(values), *values)


def write_bytes(path, content: bytes) -> str:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(content)
  return str(path)


def test_crafted_safetensors_file_is_read_as_its_bytes_say(tmp_path):
  path = write_bytes(tmp_path / "ok.safetensors", safetensors_bytes(
      {"__metadata__": {"format": "pt"}, "b": f32_entry([2], 0), "a": f32_entry([1, 2], 8),
       "ids": {"dtype": "I64", "shape": [2], "data_offsets": [16, 32]}},
      floats(1.5, -2.0, 3.0, 4.25) + struct.pack("<2q", 7, -1)))
  tensors = conversion.read_safetensors([path])
  np.testing.assert_array_equal(tensors["b"], [1.5, -2.0])
  np.testing.assert_array_equal(tensors["a"], [[3.0, 4.25]])
  np.testing.assert_array_equal(tensors["ids"], [7, -1])


@pytest.mark.parametrize("content, expected", [
    (b"\x05\x00", r"2 bytes is too short for a safetensors file"),
    (safetensors_bytes({}, b"", header_length=10**6),
     r"its header length says 1000000 bytes but only 2 follow"),
    (safetensors_bytes({}, b"", header_length=2**64 - 1),
     r"its header length says 18446744073709551615 bytes, more than the format allows"),
    (safetensors_bytes(b"{not json", b""), r"its header is not valid JSON"),
    (safetensors_bytes(b"\xff\xfe{}", b""), r"its header is not valid JSON"),
    (safetensors_bytes(b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
                       b'"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}',
                       floats(1, 2)), r"key 'a' appears more than once"),
    (safetensors_bytes([1, 2], b""), r"its header is not a JSON object"),
    (safetensors_bytes({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}}, b"\0"),
     r"tensor a has dtype 'Q4', not one of BOOL, U8"),
    (safetensors_bytes({"a": {"dtype": "F32", "shape": [2]}}, floats(1, 2)),
     r"tensor a: its header entry lacks dtype, shape or data_offsets"),
    (safetensors_bytes({"a": f32_entry([2, -3], 0, 8)}, floats(1, 2)),
     r"tensor a has shape \[2, -3\], not a list of sizes"),
    (safetensors_bytes({"a": f32_entry([2, 3], 0, 20)}, floats(1, 2, 3, 4, 5)),
     r"tensor a: shape \[2, 3\] of F32 is 24 bytes, but its data_offsets \[0, 20\] hold 20"),
    (safetensors_bytes({"a": f32_entry([4], 0)}, floats(1, 2)),
     r"tensor a has data_offsets \[0, 16\], not a range within the file's 8 bytes of data"),
    (safetensors_bytes({"a": f32_entry([1], 8, 4)}, floats(1, 2, 3)),
     r"tensor a has data_offsets \[8, 4\], not a range"),
    (safetensors_bytes({"a": f32_entry([2], 0), "b": f32_entry([2], 4)}, floats(1, 2, 3)),
     r"tensors a \(data bytes 0-8\) and b \(data bytes 4-12\) overlap"),
    # Checks the format's library makes beyond ours (here: a gap) name the file too.
    (safetensors_bytes({"a": f32_entry([1], 4)}, floats(1, 2)),
     r"SafetensorError: .*invalid offset"),
])
def test_safetensors_file_whose_header_lies_is_refused(tmp_path, content, expected):
  path = write_bytes(tmp_path / "model.safetensors", content)
  with pytest.raises(conversion.ConversionError,
                     match="^%s: .*%s" % (re.escape(path), expected)) as error:
    conversion.read_safetensors([path])
  assert "\n" not in str(error.value)


def hf_model_dir(directory, files: dict) -> str:
  """A model directory: config.json and the given files (name -> bytes)."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
  for name, content in files.items():
    write_bytes(directory / name, content)
  return str(directory)


def test_tensor_that_does_not_fit_the_config_is_named(tmp_path):
  word_embeddings = {"bert.embeddings.word_embeddings.weight": f32_entry([41, 16], 0)}
  model = hf_model_dir(tmp_path / "shape", {"model.safetensors": safetensors_bytes(
      word_embeddings, floats(*[0.0] * 41 * 16))})
  with pytest.raises(conversion.ConversionError,
                     match=r"model\.safetensors: tensor bert\.embeddings\.word_embeddings\.weight "
                     r"\(bert/embeddings/word_embeddings\) has shape \[41, 16\] but the config "
                     r"needs \[40, 16\]"):
    model_conversion.convert_hf_to_google(model, str(tmp_path / "out"))
  pooler = {"bert.pooler.dense.bias": {"dtype": "I32", "shape": [16], "data_offsets": [0, 64]}}
  model = hf_model_dir(tmp_path / "dtype", {"model.safetensors": safetensors_bytes(
      pooler, struct.pack("<16i", *range(16)))})
  with pytest.raises(conversion.ConversionError,
                     match=r"tensor bert\.pooler\.dense\.bias has dtype int32, but BERT's weights "
                     r"are floating point"):
    model_conversion.convert_hf_to_google(model, str(tmp_path / "out"))
  assert not os.path.exists(tmp_path / "out")


def shard(*names) -> bytes:
  """A safetensors shard holding one float per name."""
  return safetensors_bytes({name: f32_entry([1], 4 * i) for i, name in enumerate(names)},
                           floats(*range(len(names))))


def sharded_model(directory, weight_map, shards) -> str:
  index = json.dumps({"metadata": {}, "weight_map": weight_map}).encode("utf-8")
  return hf_model_dir(directory, dict(shards, **{"model.safetensors.index.json": index}))


@pytest.mark.parametrize("shard_name, expected", [
    ("../outside.safetensors", r"shard '\.\./outside\.safetensors' is not a file name inside the "
     r"index's directory"),
    ("sub/../../outside.safetensors", r"is not a file name inside the index's directory"),
    ("/tmp/outside.safetensors", r"shard '/tmp/outside\.safetensors' is not a file name inside"),
    ("gs://bucket/outside.safetensors", r"is not a file name inside"),
    ("model-00002-of-00002.safetensors",
     r"names shard .*model-00002-of-00002\.safetensors, which does not exist"),
])
def test_index_naming_a_shard_outside_its_directory_or_missing_is_refused(
    tmp_path, shard_name, expected):
  write_bytes(tmp_path / "outside.safetensors", shard("cls.predictions.bias"))
  model = sharded_model(tmp_path / "model",
                        {"bert.pooler.dense.bias": "model-00001-of-00002.safetensors",
                         "cls.predictions.bias": shard_name},
                        {"model-00001-of-00002.safetensors": shard("bert.pooler.dense.bias")})
  with pytest.raises(conversion.ConversionError,
                     match=r"model\.safetensors\.index\.json.*%s" % expected):
    conversion.resolve_hf_files(model)


def test_index_that_misplaces_tensors_or_is_not_an_index_is_refused(tmp_path):
  first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
  shards = {first: shard("a"), second: shard("b")}
  with pytest.raises(conversion.ConversionError,
                     match=r"index\.json places tensor\(s\) b in .*%s, which does not hold them" %
                     first):
    conversion.resolve_hf_files(sharded_model(tmp_path / "m1", {"a": first, "b": first},
                                                      shards))
  with pytest.raises(conversion.ConversionError,
                     match=r"%s holds tensor\(s\) b that .*index\.json does not place there" %
                     first):
    conversion.resolve_hf_files(sharded_model(tmp_path / "m2", {"a": first},
                                                      {first: shard("a", "b")}))
  assert conversion.resolve_hf_files(
      sharded_model(tmp_path / "m3", {"a": first, "b": second}, shards))[0] == [
          str(tmp_path / "m3" / first), str(tmp_path / "m3" / second)]
  for content, expected in ((b"{", "is not valid JSON"), (b'{"weight_map": []}', "expected")):
    model = hf_model_dir(tmp_path / "m4", {"model.safetensors.index.json": content})
    with pytest.raises(conversion.ConversionError, match="index.json.*" + expected):
      conversion.resolve_hf_files(model)


def run_converter(*flags) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, os.path.join(REPO_ROOT, "convert_checkpoint.py")] +
                        list(flags), capture_output=True, text=True, timeout=300, check=False)


def test_converter_reports_bad_input_in_one_line(tmp_path):
  model = hf_model_dir(tmp_path / "hf", {"model.safetensors": safetensors_bytes(
      {"a": f32_entry([2, 3], 0, 20)}, floats(1, 2, 3, 4, 5))})
  result = run_converter("--hf_model_path=" + model, "--output_dir=%s" % (tmp_path / "out"))
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      "convert_checkpoint.py: error: %s/model.safetensors: tensor a: shape [2, 3] of F32 is 24 "
      "bytes, but its data_offsets [0, 20] hold 20" % model)
  assert "Traceback" not in result.stderr
  missing = str(tmp_path / "gone" / "model.ckpt-300")
  result = run_converter("--init_checkpoint=" + missing, "--output_dir=%s" % (tmp_path / "out"))
  last_line = result.stderr.strip().splitlines()[-1]
  assert result.returncode == 1 and last_line.startswith("convert_checkpoint.py: error: ")
  assert "no checkpoint at %s (%s.index does not exist)" % (missing, missing) in last_line


# -------------------------------------------------------------- pretraining records (glob)

SEQ, PREDICTIONS = 16, 4
TINY_BERT = modeling.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=16,
                                max_position_embeddings=32)


def pretraining_record(seq_length=SEQ, predictions=PREDICTIONS) -> bytes:
  """A serialized tf.train.Example with the features of create_pretraining_data.py's records."""
  def ints(count):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * count))

  return tf.train.Example(features=tf.train.Features(feature={
      "input_ids": ints(seq_length), "input_mask": ints(seq_length),
      "segment_ids": ints(seq_length), "masked_lm_positions": ints(predictions),
      "masked_lm_ids": ints(predictions), "next_sentence_labels": ints(1),
      "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
          value=[1.0] * predictions)),
  })).SerializeToString()


def record_file(path, *records) -> str:
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)
  return str(path)


def test_glob_whose_files_were_written_with_other_lengths_names_file_and_both_lengths(tmp_path):
  fits = record_file(tmp_path / "a.tfrecord", pretraining_record())
  empty = record_file(tmp_path / "b.tfrecord")
  longer = record_file(tmp_path / "c.tfrecord", pretraining_record(seq_length=20))
  more = record_file(tmp_path / "d.tfrecord", pretraining_record(predictions=6))
  with pytest.raises(pretraining.RecordLengthError,
                     match=r"^a record in %s has 20 values for feature input_ids but "
                     r"`max_seq_length`=16 expects 16: .* \(%s, also in `input_file`, has 16\)$" %
                     (longer, fits)):
    pretraining.check_input_records(TINY_BERT, [fits, empty, longer], SEQ, PREDICTIONS)
  with pytest.raises(pretraining.RecordLengthError,
                     match=r"a record in %s has 6 values for feature masked_lm_positions but "
                     r"`max_predictions_per_seq`=4 expects 4" % more):
    pretraining.check_input_records(TINY_BERT, [fits, more], SEQ, PREDICTIONS)
  pretraining.check_input_records(TINY_BERT, [empty, fits, fits], SEQ, PREDICTIONS)
  with pytest.raises(pretraining.RecordLengthError, match=r"none of its 2 files holds a complete"):
    pretraining.check_input_records(TINY_BERT, [empty, empty], SEQ, PREDICTIONS)
  floats_as_ids = tf.train.Example.FromString(pretraining_record())
  floats_as_ids.features.feature["input_ids"].float_list.value[:] = [1.0] * SEQ
  wrong_kind = record_file(tmp_path / "f.tfrecord", floats_as_ids.SerializeToString())
  with pytest.raises(pretraining.RecordLengthError,
                     match=r"^a record in %s stores feature input_ids as a float_list, not an? "
                     r"int64_list" % wrong_kind):
    pretraining.check_input_records(TINY_BERT, [fits, wrong_kind], SEQ, PREDICTIONS)
  not_example = record_file(tmp_path / "e.tfrecord", b"\xff\xff not a protocol buffer")
  with pytest.raises(pretraining.RecordLengthError,
                     match=r"^%s: its first record is not a tf\.train\.Example" % not_example):
    pretraining.check_input_records(TINY_BERT, [fits, not_example], SEQ, PREDICTIONS)


def test_records_with_ids_outside_the_models_vocab_are_refused_before_training(tmp_path):
  """Records made with a larger vocab than the config's: the first record fits, the second
  holds a masked-LM id one past the vocab (the record number and the id are named)."""
  outside = tf.train.Example.FromString(pretraining_record())
  outside.features.feature["masked_lm_ids"].int64_list.value[2] = TINY_BERT.vocab_size
  records = record_file(tmp_path / "a.tfrecord", pretraining_record(),
                        outside.SerializeToString())
  with pytest.raises(pretraining.RecordVocabError,
                     match=r"^%s: record 2 holds masked_lm_ids id %d, outside the model's "
                     r"vocab_size %d " % (records, TINY_BERT.vocab_size, TINY_BERT.vocab_size)):
    pretraining.check_input_records(TINY_BERT, [records], SEQ, PREDICTIONS)
  # Sentence pairs (segment id 1) for a config of one segment (probe 22 case 54: before, the first
  # training step failed in an embedding lookup that named neither).
  pair = tf.train.Example.FromString(pretraining_record())
  pair.features.feature["segment_ids"].int64_list.value[4] = 1
  one_segment = modeling.BertConfig.from_dict(dict(TINY_BERT.to_dict(), type_vocab_size=1))
  pairs = record_file(tmp_path / "p.tfrecord", pair.SerializeToString())
  with pytest.raises(pretraining.RecordVocabError,
                     match=r"^%s: record 1 holds segment_ids id 1, outside the model's "
                     r"type_vocab_size 1 " % pairs):
    pretraining.check_input_records(one_segment, [pairs], SEQ, PREDICTIONS)
  pretraining.check_input_records(TINY_BERT, [pairs], SEQ, PREDICTIONS)
  negative = tf.train.Example.FromString(pretraining_record())
  negative.features.feature["input_ids"].int64_list.value[5] = -3
  with pytest.raises(pretraining.RecordVocabError, match=r"record 1 holds input_ids id -3"):
    pretraining.check_input_records(
        TINY_BERT, [record_file(tmp_path / "b.tfrecord", negative.SerializeToString())], SEQ,
        PREDICTIONS)


def test_later_record_of_other_length_is_named_not_a_tensorflow_traceback(tmp_path):
  mixed = record_file(tmp_path / "mixed.tfrecord", pretraining_record(),
                      pretraining_record(seq_length=20))
  pretraining.check_input_records(TINY_BERT, [mixed], SEQ, PREDICTIONS)  # Its first record fits.
  model = pretraining.build_model(TINY_BERT)
  with pytest.raises(pretraining.RecordLengthError,
                     match=r"^a record in %s has 20 values for feature input_ids but "
                     r"`max_seq_length`=16 expects 16" % mixed):
    pretraining.run_evaluation(tf.distribute.get_strategy(), TINY_BERT, [mixed], str(tmp_path),
                               None, eval_batch_size=1, max_eval_steps=2, max_seq_length=SEQ,
                               max_predictions_per_seq=PREDICTIONS, model=model, global_step=0)
  assert not os.path.exists(tmp_path / "eval_results.txt")


def test_record_file_that_cannot_be_opened_is_named(tmp_path):
  for path, expected in ((tmp_path / "gone.tfrecord", r"NotFoundError"),
                         (tmp_path, r"is a directory, not a TFRecord file")):
    with pytest.raises(tfrecord_files.UnreadableRecordFileError,
                       match=r"^%s:? .*%s" % (re.escape(str(path)), expected)):
      tfrecord_files.scan_file(str(path))


def test_global_step_that_is_not_a_step_is_refused(tmp_path):
  for value in (np.array([3, 4], np.int64), np.float32(2.5), np.int64(-1)):
    prefix = checkpoints.write_checkpoint({"global_step": value}, str(tmp_path / "model.ckpt-3"))
    with pytest.raises(checkpoints.CheckpointError,
                       match=r"^checkpoint %s: global_step is \w+ of shape \[2?\], not a step" %
                       prefix):
      checkpoints.checkpoint_step(prefix)
  prefix = checkpoints.write_checkpoint({"global_step": np.int64(7)}, str(tmp_path / "ckpt"))
  assert checkpoints.checkpoint_step(prefix) == 7


def test_input_file_that_cannot_be_opened_is_named(tmp_path):
  fits = record_file(tmp_path / "a.tfrecord", pretraining_record())
  with pytest.raises(tfrecord_files.UnreadableRecordFileError, match="^%s: " % tmp_path):
    pretraining.check_input_records(TINY_BERT, [fits, str(tmp_path)], SEQ, PREDICTIONS)
