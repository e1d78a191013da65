"""Tests of create_pretraining_data.py / pretraining_data.py.

Most tests run the whole pipeline on generated corpora whose tokens say where they come from
(every sentence is four copies of a token `d<doc>s<sentence>`), read the TFRecords back with tf.data
and the original's feature spec, undo the masking with the masked_lm labels and check the instances
against the corpus: segment structure, the IsNext/NotNext labels, the masked fraction and the
80/10/10 split (within 4 standard deviations), whole-word masking, determinism, sharding and bad
input.
"""
import json
import logging
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT, shared_path
import pretraining_data
import pretraining_instances
import tfrecord_encoding
import tokenization

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)


def _feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
  """The original run_pretraining.py's name_to_features."""
  return {
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }


def _read(paths, max_seq_length=128, max_predictions_per_seq=20) -> dict:
  """All records of the files (in file order) parsed with the original's spec, as NumPy arrays."""
  spec = _feature_spec(max_seq_length, max_predictions_per_seq)
  dataset = tf.data.TFRecordDataset(list(paths)).map(
      lambda record: tf.io.parse_single_example(record, spec)).batch(100000)
  batches = list(dataset.as_numpy_iterator())
  return {name: np.concatenate([batch[name] for batch in batches]) for name in spec}


def _raw_records(path: str) -> list:
  return [record.numpy() for record in tf.data.TFRecordDataset(path)]


def _write(path, text: str) -> str:
  with open(path, "w", encoding="utf-8") as writer:
    writer.write(text)
  return str(path)


def _tagged_corpus(tmp_path, num_documents=40, sentences_per_document=(20, 60), seed=0):
  """A vocab and a corpus in which every sentence is four copies of its own token `d<i>s<j>`."""
  rng = random.Random(seed)
  lengths = [rng.randint(*sentences_per_document) for _ in range(num_documents)]
  tags = ["d%ds%d" % (doc, sentence) for doc, length in enumerate(lengths)
          for sentence in range(length)]
  vocab = _write(tmp_path / "vocab.txt", "\n".join(SPECIALS + tags) + "\n")
  documents = ["\n".join(" ".join(["d%ds%d" % (doc, sentence)] * 4) for sentence in range(length))
               for doc, length in enumerate(lengths)]
  corpus = _write(tmp_path / "corpus.txt", "\n\n".join(documents) + "\n")
  return vocab, corpus


def _config(vocab, corpus, output, **overrides) -> pretraining_data.RunConfig:
  options = {name: overrides.pop(name) for name in list(overrides)
             if name in pretraining_instances.InstanceOptions.__dataclass_fields__}
  return pretraining_data.RunConfig(input_file=corpus, output_file=output, vocab_file=vocab,
                                    options=pretraining_instances.InstanceOptions(**options),
                                    **overrides)


def _restore(features: dict) -> np.ndarray:
  """input_ids with the masked positions set back to their labels."""
  original = features["input_ids"].copy()
  rows, slots = np.nonzero(features["masked_lm_weights"])
  positions = features["masked_lm_positions"][rows, slots]
  original[rows, positions] = features["masked_lm_ids"][rows, slots]
  return original


@pytest.fixture(scope="module")
def tagged_run(tmp_path_factory):
  """A pipeline run on the tagged corpus: (features, summary, id -> (doc, sentence), vocab size)."""
  tmp_path = tmp_path_factory.mktemp("tagged")
  vocab, corpus = _tagged_corpus(tmp_path)
  outputs = ",".join(str(tmp_path / name) for name in ("a.tfrecord", "b.tfrecord", "c.tfrecord"))
  summary = pretraining_data.run(_config(vocab, corpus, outputs, dupe_factor=12,
                                         short_seq_prob=0.0, chunk_bytes=1 << 20))
  tags = {}
  for token_id, token in enumerate(open(vocab, encoding="utf-8").read().split()):
    if token.startswith("d"):
      doc, sentence = token[1:].split("s")
      tags[token_id] = (int(doc), int(sentence))
  return _read(summary["output_files"]), summary, tags, len(tags) + len(SPECIALS)


def test_feature_dtypes_and_lengths_are_the_originals(tmp_path, uncased_vocab_file):
  corpus = shared_path("corpora", "sample_text.txt")
  output = str(tmp_path / "out.tfrecord")
  summary = pretraining_data.run(_config(uncased_vocab_file, corpus, output, dupe_factor=2,
                                         max_seq_length=64, max_predictions_per_seq=7))
  records = _raw_records(output)
  assert len(records) == summary["instances"] > 0
  example = tf.train.Example.FromString(records[0])
  features = example.features.feature
  assert sorted(features) == sorted(pretraining_instances.FEATURE_NAMES)
  lengths = {"input_ids": 64, "input_mask": 64, "segment_ids": 64, "masked_lm_positions": 7,
             "masked_lm_ids": 7, "masked_lm_weights": 7, "next_sentence_labels": 1}
  for name, length in lengths.items():
    kind = "float_list" if name == "masked_lm_weights" else "int64_list"
    assert features[name].WhichOneof("kind") == kind, name
    assert len(getattr(features[name], kind).value) == length, name
  parsed = _read([output], 64, 7)
  assert parsed["input_ids"].shape == (summary["instances"], 64)
  assert parsed["masked_lm_weights"].dtype == np.float32


def test_encoder_bytes_parse_to_the_expected_example():
  encoder = pretraining_instances.ExampleEncoder(max_seq_length=8, max_predictions_per_seq=3,
                                                 max_id=30000)
  instance = pretraining_instances.TrainingInstance(
      input_ids=[101, 29999, 103, 102, 7, 102], first_segment_length=4,
      masked_lm_positions=[1, 2], masked_lm_ids=[5, 300], is_random_next=True)
  parsed = tf.train.Example.FromString(encoder.encode(instance))

  def int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  expected = tf.train.Example(features=tf.train.Features(feature={
      "input_ids": int_feature([101, 29999, 103, 102, 7, 102, 0, 0]),
      "input_mask": int_feature([1, 1, 1, 1, 1, 1, 0, 0]),
      "segment_ids": int_feature([0, 0, 0, 0, 1, 1, 0, 0]),
      "masked_lm_positions": int_feature([1, 2, 0]),
      "masked_lm_ids": int_feature([5, 300, 0]),
      "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 1.0, 0.0])),
      "next_sentence_labels": int_feature([1]),
  }))
  assert parsed == expected


def test_crc32c_known_values_and_tfrecord_framing_match_tensorflow(tmp_path):
  # Published CRC-32C check values (RFC 3720 B.4 and the "123456789" check).
  assert [int(crc) for crc in tfrecord_encoding.crc32c(
      [b"123456789", bytes(32), b"\xff" * 32, bytes(range(32)), b""])] == [
          0xE3069283, 0x8A9136AA, 0x62A8AB43, 0x46DD794E, 0]
  rng = random.Random(3)
  records = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(50)]
  with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
    for record in records:
      writer.write(record)
  ours = b"".join(tfrecord_encoding.frame_tfrecords(records))
  assert ours == open(tmp_path / "tf.tfrecord", "rb").read()


def test_sequence_structure(tagged_run):
  features, summary, _, _ = tagged_run
  ids, mask, segments = features["input_ids"], features["input_mask"], features["segment_ids"]
  lengths = mask.sum(axis=1)
  original = _restore(features)
  assert len(ids) == summary["instances"] > 1000
  assert np.all(lengths <= 128)
  assert np.all(ids[:, 0] == CLS_ID)
  for row, length in enumerate(lengths):
    assert np.all(mask[row, :length] == 1) and np.all(mask[row, length:] == 0)
    assert np.all(ids[row, length:] == 0) and np.all(segments[row, length:] == 0)
    seps = np.flatnonzero(original[row] == SEP_ID)
    assert len(seps) == 2 and seps[1] == length - 1
    first_b = seps[0] + 1
    assert 2 <= first_b < length - 1  # A and B are not empty.
    assert np.all(segments[row, :first_b] == 0) and np.all(segments[row, first_b:length] == 1)


def test_masked_count_positions_and_80_10_10(tagged_run):
  features, _, _, vocab_size = tagged_run
  weights = features["masked_lm_weights"]
  positions = features["masked_lm_positions"]
  lengths = features["input_mask"].sum(axis=1)
  num_masked = weights.sum(axis=1).astype(int)
  expected = np.minimum(20, np.maximum(1, np.round(lengths * 0.15))).astype(int)
  # Exact: these sequences always have more candidates than predictions.
  np.testing.assert_array_equal(num_masked, expected)
  original = _restore(features)
  masked_ids, kept, replaced = 0, 0, 0
  for row, count in enumerate(num_masked):
    row_positions = positions[row, :count]
    assert np.all(np.diff(row_positions) > 0)
    assert np.all(weights[row, count:] == 0) and np.all(positions[row, count:] == 0)
    assert not np.any(np.isin(original[row, row_positions], [CLS_ID, SEP_ID]))
    shown = features["input_ids"][row, row_positions]
    labels = features["masked_lm_ids"][row, :count]
    masked_ids += np.sum(shown == MASK_ID)
    kept += np.sum(shown == labels)
    replaced += np.sum((shown != MASK_ID) & (shown != labels))
  total = num_masked.sum()
  # A random replacement equals the label with probability 1/vocab_size.
  expectations = {"mask": (masked_ids, 0.8), "kept": (kept, 0.1 + 0.1 / vocab_size),
                  "random": (replaced, 0.1 * (1 - 1 / vocab_size))}
  for name, (count, probability) in expectations.items():
    tolerance = 4 * np.sqrt(probability * (1 - probability) / total)
    assert abs(count / total - probability) < tolerance, (name, count / total, probability)
  unmasked = features["input_mask"].astype(bool)
  unmasked[np.nonzero(weights)[0], positions[weights > 0]] = False
  np.testing.assert_array_equal(features["input_ids"][unmasked], original[unmasked])


def _segments(original_row: np.ndarray, tags: dict) -> tuple:
  """((doc, sentence) of each token of A, same of B) of one restored instance."""
  seps = np.flatnonzero(original_row == SEP_ID)
  return ([tags[token] for token in original_row[1:seps[0]]],
          [tags[token] for token in original_row[seps[0] + 1:seps[1]]])


def test_next_sentence_labels_are_right_and_balanced(tagged_run):
  features, summary, tags, _ = tagged_run
  original = _restore(features)
  labels = features["next_sentence_labels"][:, 0]
  assert summary["is_next"] == np.sum(labels == 0) and summary["not_next"] == np.sum(labels == 1)
  not_next_with_long_a = []
  for row, label in enumerate(labels):
    a_tokens, b_tokens = _segments(original[row], tags)
    assert len({doc for doc, _ in a_tokens}) == 1 and len({doc for doc, _ in b_tokens}) == 1
    a_sentences = sorted({sentence for _, sentence in a_tokens})
    b_sentences = sorted({sentence for _, sentence in b_tokens})
    assert a_sentences == list(range(a_sentences[0], a_sentences[-1] + 1))
    assert b_sentences == list(range(b_sentences[0], b_sentences[-1] + 1))
    if label == 0:  # IsNext: B continues A in the same document.
      assert b_tokens[0][0] == a_tokens[0][0] and b_sentences[0] == a_sentences[-1] + 1
    else:  # NotNext: B comes from another document of the chunk.
      assert b_tokens[0][0] != a_tokens[0][0]
    # Sentences have 4 tokens and truncation removes at most 3 here, so A's sentence count is the
    # split point; with 2 or more sentences in A the choice was a fair coin, not forced.
    if len(a_sentences) >= 2:
      not_next_with_long_a.append(label)
  share = np.mean(not_next_with_long_a)
  assert abs(share - 0.5) < 4 * np.sqrt(0.25 / len(not_next_with_long_a)), share
  assert summary["not_next"] > summary["is_next"]  # One-segment chunks are always NotNext.


def test_round_robin_over_output_files(tagged_run):
  _, summary, _, _ = tagged_run
  counts = [len(_raw_records(path)) for path in summary["output_files"]]
  assert sum(counts) == summary["instances"]
  assert counts == sorted(counts, reverse=True) and counts[0] - counts[-1] <= 1


def _wordpiece_corpus(tmp_path):
  """A vocab of stems and ## suffixes, and text of words made of 1 to 3 pieces."""
  stems = ["stem%s" % letter for letter in "abcdefghijklmnopqrst"]
  suffixes = ["##" + letter * 2 for letter in "uvwxyz"]
  vocab = _write(tmp_path / "vocab.txt", "\n".join(SPECIALS + stems + suffixes) + "\n")
  rng = random.Random(5)
  documents = []
  for _ in range(30):
    sentences = []
    for _ in range(rng.randint(5, 30)):
      words = [rng.choice(stems) + "".join(rng.choice(suffixes)[2:]
                                           for _ in range(rng.randint(0, 2)))
               for _ in range(rng.randint(3, 12))]
      sentences.append(" ".join(words))
    documents.append("\n".join(sentences))
  corpus = _write(tmp_path / "corpus.txt", "\n\n".join(documents) + "\n")
  return vocab, corpus


def test_whole_word_masking_masks_every_piece_of_a_chosen_word(tmp_path):
  vocab, corpus = _wordpiece_corpus(tmp_path)
  summary = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "out"), dupe_factor=5,
                                         do_whole_word_mask=True, max_seq_length=64,
                                         max_predictions_per_seq=12))
  features = _read(summary["output_files"], 64, 12)
  tokens = open(vocab, encoding="utf-8").read().split()
  continues = np.array([token.startswith("##") for token in tokens])
  original = _restore(features)
  words_masked = multi_piece_words_masked = 0
  for row in range(len(original)):
    length = features["input_mask"][row].sum()
    masked = set(features["masked_lm_positions"][row][features["masked_lm_weights"][row] > 0])
    assert len(masked) <= min(12, max(1, round(length * 0.15)))
    starts = [p for p in range(1, length - 1)
              if original[row, p] != SEP_ID and not continues[original[row, p]]]
    for start in starts:
      end = start + 1
      while end < length and original[row, end] != SEP_ID and continues[original[row, end]]:
        end += 1
      pieces = set(range(start, end))
      assert pieces <= masked or not pieces & masked, (row, start, end, masked)
      words_masked += pieces <= masked
      multi_piece_words_masked += pieces <= masked and len(pieces) > 1
  assert words_masked > 500 and multi_piece_words_masked > 200


def test_same_output_for_any_num_workers_and_on_reruns(tmp_path):
  vocab, corpus = _tagged_corpus(tmp_path, num_documents=30)

  def output_bytes(name, num_workers):
    paths = ",".join(str(tmp_path / ("%s_%d" % (name, i))) for i in range(2))
    summary = pretraining_data.run(_config(vocab, corpus, paths, dupe_factor=2, chunk_bytes=4096,
                                           num_workers=num_workers, shuffle_buffer_size=50))
    return [open(path, "rb").read() for path in summary["output_files"]]

  one_worker = output_bytes("one", 1)
  assert one_worker == output_bytes("again", 1)
  assert one_worker == output_bytes("two", 2)
  other_seed = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "seed"), dupe_factor=2,
                                            chunk_bytes=4096, random_seed=7))
  assert open(other_seed["output_files"][0], "rb").read() != one_worker[0]


def test_shards_together_hold_exactly_the_unsharded_instances(tmp_path):
  vocab, corpus = _tagged_corpus(tmp_path, num_documents=30)
  whole = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "whole"), dupe_factor=2,
                                       chunk_bytes=4096))
  sharded, documents = [], 0
  for shard_index in range(3):
    summary = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "part"), dupe_factor=2,
                                           chunk_bytes=4096, num_shards=3,
                                           shard_index=shard_index))
    assert summary["output_files"] == [str(tmp_path / ("part-%05d-of-00003" % shard_index))]
    sharded.extend(_raw_records(summary["output_files"][0]))
    documents += summary["documents"]
  records = _raw_records(whole["output_files"][0])
  assert len(records) == whole["instances"] and sorted(sharded) == sorted(records)
  assert documents == whole["documents"]


def test_chunks_are_bounded_and_hold_whole_documents(tmp_path):
  documents = ["\n".join("doc %d line %d" % (doc, line) for line in range(doc % 7 + 1))
               for doc in range(200)]
  first = _write(tmp_path / "first.txt", "\n\n".join(documents[:120]) + "\n\n\n")
  second = _write(tmp_path / "second.txt", "\n\n".join(documents[120:]))  # No final newline.
  chunks = list(pretraining_data.iter_chunks([first, second], 300))
  assert len(chunks) > 10 and [chunk.index for chunk in chunks] == list(range(len(chunks)))
  texts = []
  for chunk in chunks:
    text = chunk.text.decode()
    assert len(text.replace("\n\n", "\n")) < 300 + 100
    texts.extend(document.strip() for document in text.split("\n\n") if document.strip())
  assert texts == documents
  assert not sum(chunk.counts["documents_split"] + chunk.counts["empty_files"] for chunk in chunks)


def test_bad_input_is_counted_not_fatal(tmp_path, caplog):
  vocab, _ = _tagged_corpus(tmp_path, num_documents=4)
  sentence = "d0s1 d0s1 d0s1 d0s1"
  files = {
      "empty.txt": b"",
      "blank.txt": b"\n\n  \n",
      "one_document.txt": ("\n".join(["d1s%d d1s%d" % (i, i) for i in range(10)]) + "\n").encode(),
      "one_sentence_documents.txt": ("\n\n".join([sentence] * 5) + "\n").encode(),
      "invalid_utf8.txt": b"d2s0 \xff\xfe d2s0\nd2s1 d2s1\n\nd2s2 \xc3\x28 d2s2\n",
      "long_line.txt": (" ".join(["d3s0"] * 400) + "\nd3s1\n").encode(),
  }
  (tmp_path / "inputs").mkdir()
  for name, content in files.items():
    (tmp_path / "inputs" / name).write_bytes(content)
  inputs = "%s,%s" % (tmp_path / "corpus.txt", tmp_path / "inputs" / "*.txt")
  summary = pretraining_data.run(_config(vocab, inputs, str(tmp_path / "out"), dupe_factor=3))
  skipped = summary["skipped_or_adjusted"]
  assert skipped["empty_files"] == 2
  assert skipped["lines_with_invalid_utf8"] == 2
  assert sum("invalid_utf8.txt:1: not UTF-8 text" in message for message in caplog.messages) == 1
  assert skipped["one_sentence_documents"] == 5 + 1  # + the second document of invalid_utf8.txt.
  assert skipped["sentences_over_max_num_tokens"] == 1
  assert summary["documents"] == 1 + 5 + 2 + 1 + 4  # Including the tagged corpus.txt.
  features = _read(summary["output_files"])
  assert len(features["input_ids"]) == summary["instances"] > 0
  assert np.all(features["input_mask"].sum(axis=1) <= 128)


def test_single_document_corpus_takes_not_next_from_itself(tmp_path):
  vocab, _ = _tagged_corpus(tmp_path, num_documents=2)
  corpus = _write(tmp_path / "single.txt", "\n".join(["d0s%d d0s%d" % (i, i) for i in range(8)]))
  summary = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "out"), dupe_factor=4))
  assert summary["documents"] == 1 and summary["not_next"] > 0
  assert summary["skipped_or_adjusted"]["not_next_from_same_document"] == summary["not_next"]


def test_oversized_lines_and_documents_are_cut(tmp_path):
  vocab, _ = _tagged_corpus(tmp_path, num_documents=2)
  corpus = _write(tmp_path / "big.txt", " ".join(["d0s0"] * 600) + "\n"
                  + "\n".join(["d0s1 d0s1 d0s1"] * 300) + "\n")
  summary = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "out"), dupe_factor=1,
                                         chunk_bytes=1000))
  skipped = summary["skipped_or_adjusted"]
  assert skipped["lines_split"] == 2 and skipped["documents_split"] >= 2
  assert len(_raw_records(summary["output_files"][0])) == summary["instances"] > 0


def test_a_line_far_longer_than_max_seq_length_is_named_in_a_warning(tmp_path, caplog):
  """A corpus without sentence lines (here line 4, 3,000 bytes at max_seq_length 128, past 20
  bytes a token) loses all but an instance's worth of each line: the warning names the line."""
  vocab, _ = _tagged_corpus(tmp_path, num_documents=2)
  corpus = _write(tmp_path / "long.txt", "d0s0 d0s0\nd0s1\n\n" + " ".join(["d1s0"] * 600) +
                  "\n" + " ".join(["d1s1"] * 600) + "\n")
  with caplog.at_level(logging.WARNING):
    pretraining_data.run(_config(vocab, corpus, str(tmp_path / "out"), dupe_factor=1))
  warnings = [r.getMessage() for r in caplog.records if "far more than" in r.getMessage()]
  assert warnings == ["%s:4: a line longer than 2560 bytes, far more than max_seq_length=128 "
                      "tokens hold: each line is one sentence, and what does not fit in an "
                      "instance is dropped (put one sentence per line; only the first such line "
                      "is named)" % corpus]


def test_errors_before_any_work(tmp_path):
  vocab, corpus = _tagged_corpus(tmp_path, num_documents=2)
  output = str(tmp_path / "out.tfrecord")
  with pytest.raises(ValueError, match="nothing_here"):
    pretraining_data.run(_config(vocab, corpus + "," + str(tmp_path / "nothing_here*"), output))
  with pytest.raises(ValueError, match="no_such_dir"):
    pretraining_data.run(_config(vocab, corpus, str(tmp_path / "no_such_dir" / "out")))
  with pytest.raises(ValueError, match="overwrite input"):
    pretraining_data.run(_config(vocab, corpus, corpus))
  no_mask = _write(tmp_path / "no_mask.txt", "\n".join(SPECIALS[:4] + ["d0s0"]))
  with pytest.raises(ValueError, match=r"no_mask.txt has no \[MASK\]"):
    pretraining_data.run(_config(no_mask, corpus, output))
  with pytest.raises(ValueError, match="max_seq_length"):
    pretraining_data.run(_config(vocab, corpus, output, max_seq_length=4))
  assert not os.path.exists(output)


def test_truncate_pair_at_random_ends_matches_the_originals_lengths():
  rng = random.Random(0)
  front_removed, removed = [], 0
  for length_a, length_b, limit in [(10, 3, 8), (3, 10, 8), (6, 6, 7), (50, 49, 9), (2, 2, 9)]:
    a, b = list(range(length_a)), list(range(100, 100 + length_b))
    expected_a, expected_b = list(a), list(b)  # The original, one token at a time from the back.
    while len(expected_a) + len(expected_b) > limit:
      (expected_a if len(expected_a) > len(expected_b) else expected_b).pop()
    for _ in range(200):
      new_a, new_b = pretraining_instances.truncate_pair_at_random_ends(a, b, limit, rng)
      assert (len(new_a), len(new_b)) == (len(expected_a), len(expected_b))
      # What is left is a contiguous run of each (the ids count up from 0 and from 100).
      assert new_a == list(range(new_a[0], new_a[0] + len(new_a)))
      assert new_b == list(range(new_b[0], new_b[0] + len(new_b)))
      if length_a == 50:
        front_removed.append(new_a[0])
        removed = 50 - len(expected_a)
  assert removed == 45
  assert abs(np.mean(front_removed) - removed / 2) < 4 * np.sqrt(removed / 4 / 200)


def test_cli_prints_summary_logs_examples_and_rejects_bad_flags(tmp_path):
  vocab, corpus = _tagged_corpus(tmp_path, num_documents=6)
  command = [sys.executable, os.path.join(REPO_ROOT, "create_pretraining_data.py"),
             "--input_file=" + corpus, "--vocab_file=" + vocab, "--dupe_factor=2",
             "--num_workers=2"]
  # The directory of an output file is created (README: /data/records/ of a new machine).
  # --num_shards without --shard_index writes shard 0, and says so.
  done = subprocess.run(command + ["--output_file=%s,%s" % (tmp_path / "x",
                                                            tmp_path / "new" / "y"),
                                   "--num_shards=2"],
                        capture_output=True, text=True, timeout=120, check=True)
  summary = json.loads(done.stdout)
  assert summary["instances"] == summary["is_next"] + summary["not_next"] > 0
  assert summary["output_files"] == [str(tmp_path / "x-00000-of-00002"),
                                     str(tmp_path / "new" / "y-00000-of-00002")]
  assert ("--num_shards=2 without --shard_index: this run writes shard 0 only (a 1/2 share of "
          "the corpus); run the command with --shard_index=1 for the rest") in done.stderr
  assert "*** Example ***" in done.stderr and "tokens: [CLS] d" in done.stderr
  assert "next_sentence_labels: " in done.stderr and "MB/s" in done.stderr
  failed = subprocess.run(command + ["--output_file=" + str(tmp_path / "z"),
                                     "--input_file=" + str(tmp_path / "missing*.txt")],
                          capture_output=True, text=True, timeout=120)
  assert failed.returncode != 0 and "missing*.txt" in failed.stderr
  assert "Traceback" not in failed.stderr and not os.path.exists(tmp_path / "z")
  # An uncased vocab read without lower casing splits capitalised words: said before the work.
  cased = subprocess.run(command + ["--output_file=" + str(tmp_path / "w"), "--do_lower_case=false"],
                         capture_output=True, text=True, timeout=120)
  assert cased.returncode == 0, cased.stderr[-2000:]
  assert "--do_lower_case=False, but the vocab is uncased (0 of its " in cased.stderr
  assert ("hold an upper-case one): every capitalised word is split into letters or [UNK]; pass "
          "--do_lower_case=True (--vocab_file=%s)" % vocab) in cased.stderr


def test_real_vocab_segments_are_whole_sentences_and_document_suffixes(uncased_vocab_file,
                                                                        tmp_path):
  """With room for everything, A is one sentence and B all sentences of a document from a start."""
  corpus = _write(tmp_path / "text.txt", "Hello, unaffable world!\nIt rains.\n\nA second doc.\n")
  summary = pretraining_data.run(_config(uncased_vocab_file, corpus, str(tmp_path / "out"),
                                         dupe_factor=3, short_seq_prob=0.0))
  hello = [7592, 1010, 14477, 20961, 3468, 2088, 999]  # From the original tokenizer.
  tokenizer = tokenization.FullTokenizer(uncased_vocab_file, do_lower_case=True)
  documents = [[hello, tokenizer.tokenize_to_ids("It rains.")],
               [tokenizer.tokenize_to_ids("A second doc.")]]
  sentences = [sentence for document in documents for sentence in document]
  suffixes = [sum(document[start:], []) for document in documents for start in range(len(document))]
  features = _read(summary["output_files"])
  # Per pass: 1 instance of the second document, 1 or 2 of the first (NotNext puts a sentence back).
  assert len(features["input_ids"]) == summary["instances"] and 6 <= summary["instances"] <= 9
  for row in _restore(features):
    seps = np.flatnonzero(row == 102)
    assert row[0] == 101 and len(seps) == 2
    assert row[1:seps[0]].tolist() in sentences
    assert row[seps[0] + 1:seps[1]].tolist() in suffixes


def test_filesystem_paths_go_through_tf_gfile(tmp_path):
  """`scheme://` paths (gs:// for TPU users) are read and written with tf.io.gfile; ram:// here."""
  vocab, corpus = _tagged_corpus(tmp_path, num_documents=8)
  tf.io.gfile.makedirs("ram://cpd_test")
  tf.io.gfile.copy(corpus, "ram://cpd_test/corpus.txt", overwrite=True)
  summary = pretraining_data.run(_config(vocab, "ram://cpd_test/*.txt", "ram://cpd_test/out",
                                         dupe_factor=2, chunk_bytes=2000))
  local = pretraining_data.run(_config(vocab, corpus, str(tmp_path / "out"), dupe_factor=2,
                                       chunk_bytes=2000))
  with tf.io.gfile.GFile("ram://cpd_test/out", "rb") as reader:
    assert reader.read() == open(tmp_path / "out", "rb").read()
  assert summary["instances"] == local["instances"] > 0


def test_sentencepiece_model_with_whole_word_masking(tmp_path):
  """With spm_model_file, ids are the model's; a whole word is a ▁ piece and the pieces after it."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  rng = random.Random(2)
  syllables = ["ka", "lo", "mi", "ne", "su", "tar", "vin", "zo"]
  words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(300)]
  documents = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 15)))
                         for _ in range(rng.randint(3, 20))) for _ in range(40)]
  corpus = _write(tmp_path / "corpus.txt", "\n\n".join(documents) + "\n")
  prefix = str(tmp_path / "spm")
  spm.SentencePieceTrainer.train(
      input=corpus, model_prefix=prefix, vocab_size=60, model_type="unigram", pad_id=0, unk_id=1,
      bos_id=-1, eos_id=-1, user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
  processor = spm.SentencePieceProcessor(model_file=prefix + ".model")
  summary = pretraining_data.run(_config(prefix + ".vocab", corpus, str(tmp_path / "out"),
                                         spm_model_file=prefix + ".model", dupe_factor=2,
                                         do_whole_word_mask=True, max_seq_length=64,
                                         max_predictions_per_seq=10))
  features = _read(summary["output_files"], 64, 10)
  cls_id, sep_id = processor.piece_to_id("[CLS]"), processor.piece_to_id("[SEP]")
  assert np.all(features["input_ids"][:, 0] == cls_id)
  assert features["input_ids"].max() < processor.get_piece_size()
  original = _restore(features)
  starts_word = np.array([processor.id_to_piece(i).startswith("\u2581")
                          for i in range(processor.get_piece_size())])
  for row in range(len(original)):
    length = features["input_mask"][row].sum()
    masked = set(features["masked_lm_positions"][row][features["masked_lm_weights"][row] > 0])
    assert len(masked) >= 1
    for position in masked:
      token = original[row, position]
      assert token not in (cls_id, sep_id)
      # Every piece after a masked word's first piece, up to the next word start, is masked too.
      follower = position + 1
      while (follower < length and original[row, follower] not in (cls_id, sep_id)
             and not starts_word[original[row, follower]]):
        assert follower in masked, (row, position, follower)
        follower += 1
  # The command line needs no --vocab_file with --spm_model_file (the model's pieces are the
  # vocab), and writes the same records.
  command = [sys.executable, os.path.join(REPO_ROOT, "create_pretraining_data.py"),
             "--input_file=" + corpus, "--output_file=%s" % (tmp_path / "cli"),
             "--spm_model_file=%s.model" % prefix, "--dupe_factor=2", "--do_whole_word_mask",
             "--max_seq_length=64", "--max_predictions_per_seq=10"]
  done = subprocess.run(command, capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
  with open(summary["output_files"][0], "rb") as library, open(tmp_path / "cli", "rb") as cli:
    assert cli.read() == library.read()
  refused = subprocess.run(command[:4], capture_output=True, text=True, timeout=120)
  assert refused.stderr.strip().splitlines()[-1] == (
      "create_pretraining_data.py: error: --vocab_file is required (or --spm_model_file)")


def test_beam_runner_without_apache_beam_says_what_to_install(tmp_path):
  """`--runner=beam` where apache_beam cannot be imported (blocked here, so it runs everywhere)."""
  vocab, corpus = _tagged_corpus(tmp_path, num_documents=2)
  script = ("import runpy, sys; sys.modules['apache_beam'] = None; sys.argv[0] = %r; "
            "runpy.run_path(%r, run_name='__main__')" % ((os.path.join(REPO_ROOT,
                                                           "create_pretraining_data.py"),) * 2))
  failed = subprocess.run([sys.executable, "-c", script, "--runner=beam", "--input_file=" + corpus,
                           "--vocab_file=" + vocab, "--output_file=" + str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
  assert failed.returncode != 0 and "requirements-beam.txt" in failed.stderr
  assert "Traceback" not in failed.stderr and not list(tmp_path.glob("out*"))
