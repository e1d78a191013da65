"""Tests of feature_cache.py: one staleness rule (content digests) for the classifier and SQuAD."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import tensorflow as tf

import feature_cache
import squad
import squad_data
import tokenization

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "who", "sold", "bread", "bob", "ann", "?", "."]


def squad_file(path, seller):
  """A one-question SQuAD v1.1 file whose answer is `seller` (same length for "bob"/"ann")."""
  context = "%s sold bread." % seller
  path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{
      "context": context, "qas": [{"id": "q", "question": "who sold bread?",
                                   "answers": [{"text": seller, "answer_start": 0}]}]}]}]}))
  return str(path)


def identity(path):
  """What says whether a file was rewritten (every write renames a new file into place)."""
  stat = os.stat(path)
  return stat.st_ino, stat.st_mtime_ns


def squad_setup(tmp_path):
  """(tokenizer, window options, an empty output_dir) for the tiny SQuAD files above."""
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(VOCAB) + "\n")
  tokenizer = tokenization.FullTokenizer(str(vocab_file), do_lower_case=True)
  options = squad_data.SquadOptions(max_seq_length=16, doc_stride=4, max_query_length=8)
  output_dir = str(tmp_path / "out")
  os.makedirs(output_dir)
  return tokenizer, options, output_dir


def replace_answer_keeping_size_and_time(path, seller):
  """Rewrites a squad_file with another seller of the same length and the old file times."""
  stat = os.stat(path)
  squad_file(pathlib.Path(path), seller)
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert os.stat(path).st_size == stat.st_size


def test_squad_cache_follows_content_not_size_and_time(tmp_path):
  tokenizer, options, output_dir = squad_setup(tmp_path)
  train_file = squad_file(tmp_path / "train.json", "bob")
  cached = lambda: squad_data.cached_train_features(train_file, output_dir, tokenizer, options)
  path, num_examples, num_features = cached()
  assert (num_examples, num_features) == (1, 1)
  first = identity(path)
  assert cached() == (path, 1, 1) and identity(path) == first  # Unchanged input: reused.

  # Same size, same modification time, other content: rebuilt, with the new answer's ids.
  replace_answer_keeping_size_and_time(train_file, "ann")
  assert cached() == (path, 1, 1) and identity(path) != first
  record = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy())
  input_ids = record.features.feature["input_ids"].int64_list.value
  assert VOCAB.index("ann") in input_ids and VOCAB.index("bob") not in input_ids
  with open(path + ".json") as f:
    note = json.load(f)
  assert note["settings"]["train_file_sha256"] == feature_cache.file_sha256(train_file)
  assert note["contents"] == {"num_examples": 1, "num_features": 1}


def test_squad_predict_features_follow_the_same_rule(tmp_path):
  """run_squad's eval.tf_record is reused by a later run on the same predict file and rebuilt when
  its content changes, though its size and time do not."""
  tokenizer, options, output_dir = squad_setup(tmp_path)
  predict_file = squad_file(tmp_path / "dev.json", "bob")

  def features_file():  # A new task each time: what a later run reads.
    task = squad.SquadTask(None, tokenizer, options, output_dir, predict_file=predict_file)
    return task._predict_inputs()[3]  # pylint: disable=protected-access

  path = features_file()
  first = identity(path)
  assert features_file() == path and identity(path) == first
  replace_answer_keeping_size_and_time(predict_file, "ann")
  assert features_file() == path and identity(path) != first
  record = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy())
  assert VOCAB.index("ann") in record.features.feature["input_ids"].int64_list.value
  with open(path + ".json") as f:
    assert json.load(f)["settings"]["predict_file_sha256"] == feature_cache.file_sha256(
        predict_file)


def write_records(path, count=3):
  """Writes `count` TFRecord records; returns the contents a features writer would report."""
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(count):
      writer.write(b"record %d" % i)
  return {"num_examples": count}


def test_reuse_or_write_rule(tmp_path):
  output_file = str(tmp_path / "features")
  writes = []

  def write(path):
    writes.append(path)
    return write_records(path)

  assert feature_cache.reuse_or_write(output_file, {"a": 1}, write) == ({"num_examples": 3}, False)
  assert feature_cache.reuse_or_write(output_file, {"a": 1}, write) == ({"num_examples": 3}, True)
  assert len(writes) == 1 and writes[0] != output_file  # Written under a temporary name.
  with open(output_file + ".json") as f:  # Each record: 16 bytes of framing and 8 of data.
    assert json.load(f)["file"] == {"bytes": 3 * (16 + 8), "records": 3}
  assert feature_cache.reuse_or_write(output_file, {"a": 2}, write)[1] is False
  os.remove(output_file + ".json")  # A file without its note (an interrupted run): rebuilt.
  assert feature_cache.reuse_or_write(output_file, {"a": 2}, write)[1] is False
  assert len(writes) == 3
  assert sorted(os.listdir(tmp_path)) == ["features", "features.json"]


def edit_note(path, change):
  with open(path) as f:
    note = json.load(f)
  change(note)
  with open(path, "w") as f:
    json.dump(note, f)


def flip_last_byte(path):
  with open(path, "r+b") as f:
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([last[0] ^ 1]))


@pytest.mark.parametrize("damage, expected", [
    (lambda note, _: pathlib.Path(note).write_text('{"settings": '),
     r"its note .*\.json is not JSON"),
    (lambda note, _: pathlib.Path(note).write_bytes(b"\xff\xfe"), r"its note .*\.json is not JSON"),
    (lambda note, _: edit_note(note, lambda n: n.update(contents={"num_examples": "3"})),
     r"its note .*\.json is not an object of settings, contents counts and file counts"),
    (lambda note, _: edit_note(note, lambda n: n.update(contents={"num_examples": True})),
     r"is not an object of settings"),
    (lambda note, _: edit_note(note, lambda n: n.update(settings=[["a", 1]])),
     r"is not an object of settings"),
    (lambda note, _: edit_note(note, lambda n: n.pop("file")), r"is not an object of settings"),
    (lambda note, _: pathlib.Path(note).write_text("[]"), r"is not an object of settings"),
    (lambda note, _: edit_note(note, lambda n: n["file"].update(bytes=71)),
     r"its note .*\.json says 71 bytes but the file has 72"),
    (lambda note, _: edit_note(note, lambda n: n["file"].update(records=4)),
     r"its note .*\.json says 4 records but the file holds 3"),
    (lambda _, features: flip_last_byte(features),
     r"features: record 2 \(at byte offset 48 of 72\) is corrupt"),
])
def test_damaged_or_lying_note_is_not_believed_the_file_is_rebuilt(tmp_path, caplog, damage,
                                                                    expected):
  output_file = str(tmp_path / "features")
  writes = []

  def write(path):
    writes.append(path)
    return write_records(path)

  feature_cache.reuse_or_write(output_file, {"a": 1}, write)
  damage(output_file + ".json", output_file)
  with caplog.at_level("WARNING", logger="absl"):
    assert feature_cache.reuse_or_write(output_file, {"a": 1}, write) == (
        {"num_examples": 3}, False)
  assert len(writes) == 2
  assert re.search(r"Rewriting .*features: .*" + expected, caplog.text), caplog.text
  assert feature_cache.reuse_or_write(output_file, {"a": 1}, write)[1] is True  # Noted afresh.


def test_input_file_that_cannot_be_hashed_is_named(tmp_path):
  for path in (tmp_path / "missing.json", tmp_path):
    with pytest.raises(feature_cache.UnreadableInputError, match="^%s: " % re.escape(str(path))):
      feature_cache.file_sha256(str(path))


def test_records_of_the_same_rows_are_the_same_bytes_in_every_process(tmp_path):
  """A run records its training features' digest, and a resume that rebuilt the cache (deleted,
  or rewritten by a refused run on an edited file) compares it: before, each process wrote a
  record's features in its own order (protobuf map order), so the same rows gave other bytes
  and a resume on unchanged data was refused as "the training data changed"."""
  script = (
      "import sys, tfrecord_files\n"
      "features = tfrecord_files.id_features(4) + [tfrecord_files.RecordFeature('label_ids'),"
      " tfrecord_files.RecordFeature('is_real_example')]\n"
      "rows = [dict(input_ids=[2, 5, 3, 0], input_mask=[1, 1, 1, 0], segment_ids=[0] * 4,"
      " label_ids=i, is_real_example=1) for i in range(3)]\n"
      "tfrecord_files.write_records(sys.argv[1], features, rows)\n")
  written = []
  for seed in ("1", "2", "3"):
    path = tmp_path / ("train-%s.tf_record" % seed)
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120,
                   cwd=pathlib.Path(feature_cache.__file__).parent,
                   env=dict(os.environ, PYTHONHASHSEED=seed, TF_CPP_MIN_LOG_LEVEL="3"))
    written.append(path.read_bytes())
  assert written[0] == written[1] == written[2]
