"""Faults in data and outputs: SIGKILL mid-run, a full disk, corrupt and malformed inputs.

Every output must appear under its final name only when complete (atomic_files), and every bad
input must fail with one line naming the file and line (or record) or the flag at fault.
"""
import dataclasses
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT, shared_path, small_tmpfs, write_model_files
import atomic_files
import checkpoints
import classifier
import classifier_data
import conversion_hf
import create_vocab
import feature_extraction
import model_conversion
import modeling
import pretraining
import pretraining_data
import pretraining_instances
import squad
import squad_data
import tagging
import task_files
import text_pairs
import tfrecord_files
import tokenization
import training_loop
from test_run_pretraining import CONFIG, MAX_PREDICTIONS, SEQ_LENGTH, write_records

pytestmark = pytest.mark.slow

_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a",
          "dog", "."]
_TINY_BERT = modeling.BertConfig(vocab_size=len(_VOCAB), hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32,
                                 max_position_embeddings=64)


def _temporaries(directory):
  return sorted(glob.glob(os.path.join(str(directory), ".*.tmp-*")))


def _count_records(path):
  return sum(1 for _ in tf.data.TFRecordDataset(str(path)))


def _wait_for_output_bytes(process, directory, min_bytes, timeout=120):
  """Waits until the process has written `min_bytes` to a file in `directory` (mid-run)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert process.poll() is None, "finished before it could be killed"
    paths = [os.path.join(directory, name) for name in os.listdir(directory)]
    if max([os.path.getsize(p) for p in paths if os.path.isfile(p)], default=0) >= min_bytes:
      return
    time.sleep(0.05)
  raise AssertionError("no output appeared in %s" % directory)


def _kill_group(process):
  os.killpg(process.pid, signal.SIGKILL)  # The CLI and any workers it started.
  process.wait()


# ---------------------------------------------------------------------------------------------
# SIGKILL of real CLI processes.


def test_create_pretraining_data_killed_leaves_nothing_and_rerun_completes(tmp_path,
                                                                          uncased_vocab_file):
  corpus = shared_path("corpora", "wikitext2_valid.bert.txt")
  output = tmp_path / "out" / "wiki.tfrecord"
  output.parent.mkdir()
  command = [sys.executable, os.path.join(REPO_ROOT, "create_pretraining_data.py"),
             "--input_file=" + corpus, "--output_file=%s" % output,
             "--vocab_file=" + uncased_vocab_file, "--do_lower_case=true", "--dupe_factor=1",
             "--num_workers=2", "--shuffle_buffer_size=100", "--chunk_size_kb=64"]
  process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
  _wait_for_output_bytes(process, str(output.parent), 100_000)
  _kill_group(process)
  assert not output.exists()  # The old code left whole records here: a shorter data set.
  assert len(_temporaries(output.parent)) == 1

  done = subprocess.run(command, capture_output=True, text=True, check=True)
  summary = json.loads(done.stdout[done.stdout.index("{"):])
  assert summary["instances"] > 1000
  assert _count_records(output) == summary["instances"]
  assert _temporaries(output.parent) == []


def test_extract_features_killed_leaves_nothing_and_rerun_completes(tmp_path):
  config_file, vocab_file = write_model_files(str(tmp_path), _TINY_BERT, _VOCAB)
  bert = modeling.BertModel(_TINY_BERT, name="bert")
  bert.build()
  checkpoint = checkpoints.save_checkpoint(bert, str(tmp_path / "bert_model.ckpt"))
  lines = ["the cat sat on the mat . ||| a dog"] * 800
  (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
  output = tmp_path / "out" / "features.jsonl"
  command = [sys.executable, os.path.join(REPO_ROOT, "extract_features.py"),
             "--input_file=%s" % (tmp_path / "input.txt"), "--output_file=%s" % output,
             "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
             "--init_checkpoint=" + checkpoint, "--layers=-1", "--max_seq_length=16",
             "--batch_size=8"]
  output.parent.mkdir()
  process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
  _wait_for_output_bytes(process, str(output.parent), 20_000)
  _kill_group(process)
  assert not output.exists()  # The old code left a half-written last line here.

  subprocess.run(command, capture_output=True, check=True)
  with open(output) as reader:
    rows = [json.loads(line) for line in reader]
  assert [row["linex_index"] for row in rows] == list(range(len(lines)))
  assert _temporaries(output.parent) == []


# ---------------------------------------------------------------------------------------------
# The shared helper, and every writer failing half-way.


def test_atomic_output_renames_files_prefixes_and_directories(tmp_path):
  final = tmp_path / "results.txt"
  with pytest.raises(RuntimeError):
    with atomic_files.atomic_output(str(final)) as temporary:
      with open(temporary, "w") as writer:
        writer.write("half")
      raise RuntimeError("killed")
  assert os.listdir(tmp_path) == []

  prefix = tmp_path / "model.ckpt"
  with atomic_files.atomic_output(str(prefix)) as temporary:
    checkpoints.write_checkpoint({"w": np.arange(3.0)}, temporary)
  assert sorted(os.listdir(tmp_path)) == ["model.ckpt.data-00000-of-00001", "model.ckpt.index"]
  assert tf.train.load_checkpoint(str(prefix)).get_tensor("w").tolist() == [0.0, 1.0, 2.0]

  directory = tmp_path / "npz"
  for content in ("old", "new"):
    with atomic_files.atomic_output(str(directory)) as temporary:
      os.makedirs(temporary)
      (tmp_path / temporary / content).write_text(content)
  assert os.listdir(directory) == ["new"]
  assert _temporaries(tmp_path) == []


def test_rerun_deletes_only_temporaries_of_dead_processes(tmp_path):
  finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                            capture_output=True, text=True, check=True)
  host = socket.gethostname()
  dead = tmp_path / (".out.txt.tmp-%s-%s" % (host, finished.stdout.strip()))
  dead_prefix_file = tmp_path / (".out.txt.tmp-%s-%s.index" % (host, finished.stdout.strip()))
  live = tmp_path / (".out.txt.tmp-%s-%d" % (host, os.getppid()))
  other_host = tmp_path / (".out.txt.tmp-elsewhere-%s" % finished.stdout.strip())
  other_output = tmp_path / (".out.txt2.tmp-%s-%s" % (host, finished.stdout.strip()))
  for path in (dead, dead_prefix_file, live, other_host, other_output):
    path.write_text("x")
  atomic_files.write_text(str(tmp_path / "out.txt"), "done\n")
  assert sorted(os.listdir(tmp_path)) == sorted(
      [live.name, other_host.name, other_output.name, "out.txt"])


class _Interrupted(Exception):
  pass


def _failing(items, after):
  """Yields `items`, then fails: a run interrupted half-way through writing."""
  for index, item in enumerate(items):
    if index == after:
      raise _Interrupted()
    yield item


def test_writers_leave_no_partial_file(tmp_path):
  """Each writer, interrupted half-way, leaves nothing under its name (the old code left the part
  written so far)."""
  writes = {
      "vocab.txt": lambda p: create_vocab.write_vocab(_failing(_VOCAB, 5), p),
      "test_results.tsv": lambda p: text_pairs.write_test_results(
          p, _failing(np.full((10, 2), 0.5), 5)),
      "test_predictions.txt": lambda p: tagging.write_conll_predictions(
          p, [tagging.TaggedSentence(["a"], ["O"], "s")] * 10, _failing([["O"]] * 10, 5)),
      "eval_results.txt": lambda p: training_loop.write_eval_results(
          p, {"a": 1, "b": _Unprintable()}),
  }
  for name, write in writes.items():
    with pytest.raises(_Interrupted):
      write(str(tmp_path / name))
    assert os.listdir(tmp_path) == [], name
  with pytest.raises(TypeError):  # A value json cannot write: the old code left an empty file.
    squad.write_predictions(str(tmp_path), {"q1": object()}, {"q1": []})
  assert os.listdir(tmp_path) == []


class _Unprintable:
  def __str__(self):
    raise _Interrupted()


def test_converted_checkpoint_appears_only_when_complete(tmp_path, monkeypatch):
  bert = modeling.BertModel(_TINY_BERT, name="bert")
  bert.build()
  source = tmp_path / "google"
  source.mkdir()
  write_model_files(str(source), _TINY_BERT, _VOCAB)
  checkpoints.save_checkpoint(bert, str(source / "bert_model.ckpt"))
  real_save = conversion_hf.safetensors.numpy.save_file

  def save_half_then_fail(tensors, path, metadata=None):
    real_save(tensors, path, metadata=metadata)
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)
    raise _Interrupted()

  monkeypatch.setattr(conversion_hf.safetensors.numpy, "save_file", save_half_then_fail)
  with pytest.raises(_Interrupted):
    model_conversion.convert_google_to_hf(str(source / "bert_model.ckpt"), str(tmp_path / "hf"))
  assert os.listdir(tmp_path) == ["google"]  # Neither the directory nor its staging copy.
  monkeypatch.setattr(conversion_hf.safetensors.numpy, "save_file", real_save)
  model_conversion.convert_google_to_hf(str(source / "bert_model.ckpt"), str(tmp_path / "hf"))
  prefix = model_conversion.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "back"))
  assert sorted(os.listdir(tmp_path / "back")) == [
      ".convert_checkpoint.json", "bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index",
      "vocab.txt"]
  word_embeddings = tf.train.load_checkpoint(prefix).get_tensor("bert/embeddings/word_embeddings")
  np.testing.assert_array_equal(word_embeddings, bert.get_embedding_table().numpy())


def test_npz_directory_appears_only_when_complete(tmp_path):
  tokenizer = tokenization.FullTokenizer(write_model_files(str(tmp_path), _TINY_BERT, _VOCAB)[1])
  bert = modeling.BertModel(_TINY_BERT, name="bert")
  bert.build()
  extractor = feature_extraction.FeatureExtractor(bert, [-1])
  batches = list(feature_extraction.read_batches(["the cat", "a dog"] * 4, tokenizer, 8, 2))
  output = str(tmp_path / "features")
  with pytest.raises(_Interrupted):
    feature_extraction.extract(extractor, _failing(batches, 2), output, "npz")
  assert not os.path.exists(output)  # The old code left the first two batches' files.
  assert feature_extraction.extract(extractor, batches, output, "npz") == 8
  assert len(os.listdir(output)) == 4


# ---------------------------------------------------------------------------------------------
# create_pretraining_data: a full disk, an empty corpus.


@pytest.fixture
def small_disk(tmp_path):
  """A 1 MB tmpfs (root only), unmounted afterwards."""
  with small_tmpfs(tmp_path / "small_disk", "1m") as mount_point:
    yield mount_point


def _pretraining_config(input_file, output_file, vocab_file):
  return pretraining_data.RunConfig(
      input_file=input_file, output_file=output_file, vocab_file=vocab_file,
      options=pretraining_instances.InstanceOptions(max_seq_length=64, dupe_factor=2),
      shuffle_buffer_size=100)


def test_full_disk_names_the_output_and_leaves_nothing(small_disk, uncased_vocab_file):
  corpus = shared_path("corpora", "wikitext2_valid.bert.txt")
  output = str(small_disk / "wiki.tfrecord")
  with pytest.raises(OSError, match="No space left on device while writing %s$" % output):
    pretraining_data.run(_pretraining_config(corpus, output, uncased_vocab_file))
  assert os.listdir(small_disk) == []  # The old code left a truncated last record here.


def test_a_full_disk_under_tensorflow_s_writer_is_an_oserror_naming_the_output(small_disk):
  # extract_features writes through tf.io.gfile, whose full disk is a ResourceExhaustedError
  # that the scripts' one-line path does not know: before, a traceback.
  output = str(small_disk / "features.jsonl")
  with pytest.raises(OSError, match="No space left on device while writing %s$" % output):
    with atomic_files.atomic_output(output) as temporary:
      with tf.io.gfile.GFile(temporary, "w") as writer:
        for _ in range(64):
          writer.write("x" * 65536)
  assert os.listdir(small_disk) == []


def test_empty_corpus_is_an_error_naming_it(tmp_path, uncased_vocab_file):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n\n")
  output = tmp_path / "out.tfrecord"
  with pytest.raises(ValueError, match="no instances were created from `input_file` %s" % corpus):
    pretraining_data.run(_pretraining_config(str(corpus), str(output), uncased_vocab_file))
  assert os.listdir(tmp_path) == ["corpus.txt"]  # The old code wrote a 0-byte file, exit 0.
  # A small corpus is one chunk, which shard 0 reads: shard 1 of 2 gets no document, and says why.
  corpus.write_text("A first sentence here.\nAnd a second one.\n\nAnother document.\nIts end.\n")
  config = dataclasses.replace(_pretraining_config(str(corpus), str(output), uncased_vocab_file),
                               num_shards=2, shard_index=1)
  with pytest.raises(ValueError, match=r"\(0 documents, 0 empty files; this is shard 1 of 2, "
                     r"which reads one chunk of `chunk_size_kb` in 2, from chunk 1: a small "
                     r"corpus has fewer chunks than shards"):
    pretraining_data.run(config)


# ---------------------------------------------------------------------------------------------
# Repeated ids and tokens.


def test_repeated_squad_ids_are_an_error_naming_them():
  def paragraph(*ids):
    return {"context": "The cat sat.", "qas": [
        {"id": qid, "question": "Who sat?", "answers": [{"text": "cat", "answer_start": 4}]}
        for qid in ids]}

  data = [{"title": "a", "paragraphs": [paragraph("q1", "q2")]},
          {"title": "b", "paragraphs": [paragraph("q3"), paragraph("q1")]}]
  with pytest.raises(squad_data.SquadFormatError,
                     match=r"dev.json: 1 repeated question ids, e.g. 'q1' \(dev.json: article 0, "
                           r"paragraph 0 and dev.json: article 1, paragraph 1\)"):
    squad_data.examples_from_data(data, False, source="dev.json")


def test_repeated_vocab_token_is_an_error_naming_both_lines(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\ncat\n\ndog\ncat\n")
  with pytest.raises(ValueError, match=r"vocab.txt: token 'cat' on line 6 repeats line 3"):
    tokenization.load_vocab(str(path))


# ---------------------------------------------------------------------------------------------
# Malformed text inputs.


def _write_mrpc(data_dir, rows):
  data_dir.mkdir(exist_ok=True)
  header = b"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  (data_dir / "train.tsv").write_bytes(header + b"".join(rows))


def test_tsv_with_invalid_utf8_names_the_line_and_skip_bad_rows_skips_it(tmp_path):
  rows = [b"1\t1\t2\tThe cat.\tA cat.\n", b"0\t3\t4\tcaf\xe9 noir\tA dog.\n",
          b"1\t5\t6\tThe dog.\tA dog.\n"]
  _write_mrpc(tmp_path / "mrpc", rows)
  with pytest.raises(task_files.BadInputError,
                     match=r"train.tsv:3: invalid UTF-8 byte 0xe9 in column 3"):
    classifier_data.get_processor("mrpc").get_train_examples(str(tmp_path / "mrpc"))
  processor = classifier_data.get_processor("mrpc", skip_bad_rows=True)
  examples = processor.get_train_examples(str(tmp_path / "mrpc"))
  assert [e.text_a for e in examples] == ["The cat.", "The dog."]
  assert processor.skipped_rows[str(tmp_path / "mrpc" / "train.tsv")] == 1


def test_tsv_field_over_128_kb_is_read(tmp_path):
  long_text = ("word " * 40_000).encode()  # 200 KB: over csv's default field limit.
  _write_mrpc(tmp_path / "mrpc", [b"1\t1\t2\t" + long_text + b"\tA cat.\n"])
  examples = classifier_data.get_processor("mrpc").get_train_examples(str(tmp_path / "mrpc"))
  assert examples[0].text_a == long_text.decode()


def test_empty_train_tsv_is_an_error_naming_it(tmp_path):
  _write_mrpc(tmp_path / "mrpc", [])
  with pytest.raises(task_files.BadInputError, match=r"mrpc/train.tsv: no examples"):
    classifier_data.get_processor("mrpc").get_train_examples(str(tmp_path / "mrpc"))


def test_pair_task_needs_room_for_both_texts():
  with pytest.raises(ValueError, match=r"`max_seq_length`=3 is too short for a sentence-pair "
                                       r"task: at least 5"):
    text_pairs.check_max_seq_length(3, is_pair=True)
  with pytest.raises(ValueError, match=r"`max_seq_length`=2 is too short for a single-sentence"):
    text_pairs.check_max_seq_length(2, is_pair=False)
  text_pairs.check_max_seq_length(5, is_pair=True)
  text_pairs.check_max_seq_length(3, is_pair=False)


def test_squad_json_with_invalid_utf8_names_line_and_column(tmp_path):
  path = tmp_path / "train.json"
  path.write_bytes(b'{"data": [\n  {"title": "caf\xe9"}]}\n')
  with pytest.raises(squad_data.SquadFormatError,
                     match=r"train.json: line 2, column 17: invalid UTF-8 byte 0xe9"):
    squad_data.load_squad_json(str(path))


def test_conll_with_invalid_utf8_or_empty_names_the_file(tmp_path):
  path = tmp_path / "train.txt"
  path.write_bytes(b"EU B-ORG\nrejects O\n\nGerman\xff B-MISC\n")
  with pytest.raises(ValueError, match=r"train.txt:4: invalid UTF-8 byte 0xff at column 7"):
    tagging.read_conll(str(path))
  path.write_bytes(b"-DOCSTART- -X- O O\n\n")
  with pytest.raises(ValueError, match=r"train.txt: no sentences"):
    tagging.read_conll(str(path))


def test_extract_features_empty_input_and_unwritable_output(tmp_path):
  config_file, vocab_file = write_model_files(str(tmp_path), _TINY_BERT, _VOCAB)
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "input.txt").write_text("the cat\n")
  (tmp_path / "a_file").write_text("")
  bert = modeling.BertModel(_TINY_BERT, name="bert")
  bert.build()
  init_checkpoint = checkpoints.save_checkpoint(bert, str(tmp_path / "bert_model.ckpt"))
  command = [sys.executable, os.path.join(REPO_ROOT, "extract_features.py"),
             "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
             "--init_checkpoint=" + init_checkpoint, "--layers=-1", "--max_seq_length=16"]
  empty = subprocess.run(command + ["--input_file=%s" % (tmp_path / "empty.txt"),
                                    "--output_file=%s" % (tmp_path / "out.jsonl")],
                         capture_output=True, text=True)
  assert empty.returncode != 0
  assert "--input_file=%s is empty" % (tmp_path / "empty.txt") in empty.stderr
  assert "Traceback" not in empty.stderr
  unwritable = tmp_path / "a_file" / "out.jsonl"  # Root can write anywhere else.
  denied = subprocess.run(command + ["--input_file=%s" % (tmp_path / "input.txt"),
                                     "--output_file=%s" % unwritable],
                          capture_output=True, text=True)
  assert denied.returncode != 0
  assert "--output_file=%s: %s is a file, not a directory" % (unwritable, tmp_path / "a_file") \
      in denied.stderr
  assert "Traceback" not in denied.stderr


# ---------------------------------------------------------------------------------------------
# Corrupt TFRecords.


def _corrupt_copy(source, target, record_index):
  """Copies a TFRecord file with one payload byte of record `record_index` flipped; returns that
  record's byte offset, computed from the records' lengths (12 bytes of header, 4 of footer)."""
  lengths = [len(r.numpy()) for r in tf.data.TFRecordDataset(source)]
  offset = sum(length + 16 for length in lengths[:record_index])
  data = bytearray(open(source, "rb").read())
  data[offset + 12 + 5] ^= 0xFF
  open(target, "wb").write(bytes(data))
  return offset, len(data)


def test_corrupt_record_names_the_file_and_can_be_skipped(tmp_path):
  intact = write_records(tmp_path / "intact.tfrecord", 64, seed=1)
  corrupt = str(tmp_path / "corrupt.tfrecord")
  offset, size = _corrupt_copy(write_records(tmp_path / "source.tfrecord", 64, seed=2), corrupt, 40)
  scan = tfrecord_files.scan_file(corrupt)
  assert (scan.readable_records, scan.corrupt_offset, scan.file_size) == (40, offset, size)
  assert tfrecord_files.scan_file(intact).corrupt_offset is None

  bert_config = modeling.BertConfig.from_dict(CONFIG)
  strategy = tf.distribute.get_strategy()
  config = training_loop.TrainConfig(output_dir=str(tmp_path / "out"), num_train_steps=2,
                                num_warmup_steps=1, train_batch_size=8, save_checkpoints_steps=2,
                                iterations_per_loop=2)
  result = pretraining.run_training(strategy, bert_config, [intact, corrupt], config, SEQ_LENGTH,
                                    MAX_PREDICTIONS, skip_corrupt_records=True)
  assert result.global_step == 2
  # The old code failed with "corrupted record at <offset>", naming no file.
  with pytest.raises(tfrecord_files.CorruptRecordError,
                     match=r"corrupt.tfrecord: record 40 \(at byte offset %d of %d\) is corrupt.*"
                           r"`skip_corrupt_records`" % (offset, size)):
    pretraining.run_evaluation(strategy, bert_config, [intact, corrupt], str(tmp_path / "out"),
                               None, 8, 100, SEQ_LENGTH, MAX_PREDICTIONS, model=result.model,
                               global_step=2)
  # Skipping reads the files in order up to the corrupt record: 64 + 40 records.
  records = pretraining.eval_dataset([intact, corrupt], SEQ_LENGTH, MAX_PREDICTIONS,
                                     record_limits=[-1, 40])
  assert sum(1 for _ in records) == 104
  # A file that is no TFRecord at all (a README a glob matched) is refused before training;
  # before, training ran until it reached the file, or ended first and never said.
  readme = tmp_path / "README.txt"
  readme.write_text("These records were made with create_pretraining_data.py.\n")
  other = dataclasses.replace(config, output_dir=str(tmp_path / "other"))
  with pytest.raises(tfrecord_files.CorruptRecordError,
                     match=r"README.txt: its first record is corrupt, or it is not a TFRecord "
                           r"file .*`skip_corrupt_records`"):
    pretraining.run_training(strategy, bert_config, [intact, str(readme)], other, SEQ_LENGTH,
                             MAX_PREDICTIONS)
  assert not (tmp_path / "other").exists()
  assert pretraining.run_training(strategy, bert_config, [intact, str(readme)], other,
                                  SEQ_LENGTH, MAX_PREDICTIONS,
                                  skip_corrupt_records=True).global_step == 2


def test_run_scripts_report_bad_input_files_in_one_line(tmp_path):
  """The consumer is a shell user: the script's stderr ends with one line naming the file, exit 1,
  and no traceback (the old scripts printed a ValueError traceback)."""
  config_file, vocab_file = write_model_files(str(tmp_path), _TINY_BERT, _VOCAB)
  (tmp_path / "data").mkdir()
  (tmp_path / "data" / "train.txt").write_text("")
  done = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "run_ner.py"), "--do_train",
       "--data_dir=%s" % (tmp_path / "data"), "--vocab_file=%s" % vocab_file,
       "--bert_config_file=%s" % config_file, "--max_seq_length=32",
       "--output_dir=%s" % (tmp_path / "out")],
      capture_output=True, text=True, timeout=300)
  assert done.returncode == 1
  assert "Traceback" not in done.stderr
  last_line = done.stderr.strip().splitlines()[-1]
  assert last_line == "run_ner.py: error: %s: no sentences (the file is empty)" % (
      tmp_path / "data" / "train.txt")


def test_full_disk_in_create_pretraining_data_is_one_line_naming_the_output(small_disk, tmp_path):
  """Through the command line: exit 1 with the line naming the output, nothing left on the disk
  (the OSError of a full disk names no file, and the script used to print its traceback)."""
  vocab_file = write_model_files(str(tmp_path), _TINY_BERT, _VOCAB)[1]
  rng = np.random.default_rng(0)
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n\n".join("\n".join(" ".join(rng.choice(_VOCAB[5:], 12)) for _ in range(8))
                                for _ in range(200)) + "\n")
  output = str(small_disk / "out.tfrecord")
  run = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "create_pretraining_data.py"),
                        "--input_file=%s" % corpus, "--output_file=" + output,
                        "--vocab_file=" + vocab_file, "--max_seq_length=64", "--num_workers=1"],
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
  assert run.stderr.strip().splitlines()[-1] == (
      "create_pretraining_data.py: error: [Errno 28] No space left on device while writing "
      + output)
  assert os.listdir(small_disk) == []


def test_full_disk_during_export_names_the_export_dir_and_leaves_no_version(tmp_path):
  """A SavedModel that does not fit: the OSError a script prints in one line, no version and no
  staging directory left."""
  with small_tmpfs(tmp_path / "small_export", "200k") as mount_point:
    tokenizer = tokenization.FullTokenizer(write_model_files(str(tmp_path), _TINY_BERT,
                                                             _VOCAB)[1])
    task = classifier.ClassifierTask(_TINY_BERT, classifier_data.get_processor("mrpc"), tokenizer,
                                     None, str(tmp_path / "out"), 16)
    export_dir = str(mount_point / "models")
    with pytest.raises(OSError, match="^\\[Errno 28\\] No space left on device while writing "
                       "%s$" % export_dir):
      task.export(task.build_model(), export_dir)
    assert os.listdir(export_dir) == []
