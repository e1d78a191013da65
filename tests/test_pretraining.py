"""Tests for pretraining.py's dynamic masking against the data tool's masking (pretraining_data.py).

The records are written by the data tool's own encoder (what create_pretraining_data.py writes) and
decoded by the training pipeline's decoder. Statistics are counted over thousands of draws and
compared with the rules of `pretraining_instances.create_masked_lm_predictions` (and with its own
draws) within binomial bounds of 5 standard deviations, so a correct masker fails about once in 10**6.
"""
import os
import random
import sys

import numpy as np
import pretraining_instances
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import pretraining  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top

SEQ_LENGTH = 64
MAX_PREDICTIONS = 8
DRAWS = 3000
# Long words (several pieces) and short ones, a "##" piece right after the first [SEP] when the
# second segment starts mid-word, and padding after the last [SEP].
TEXT_A = ("the unaffordable hippopotamus was reticulated by photosynthesizing bureaucrats in "
          "constantinople")
TEXT_B = "incomprehensible to everybody yesterday"


def binomial_bound(probability: float, trials: int) -> float:
  """Five standard deviations of a binomial fraction."""
  return 5 * np.sqrt(max(probability * (1 - probability), 1e-12) / trials)


def instance_ids(tokenizer, vocab, cut_second_segment=False):
  """`[CLS] A [SEP] B [SEP]` ids; with `cut_second_segment` B starts with a `##` piece."""
  ids_a = tokenizer.tokenize_to_ids(TEXT_A)
  ids_b = tokenizer.tokenize_to_ids(TEXT_B)
  if cut_second_segment:
    ids_b = ids_b[1:]
    assert vocab.continues_word[ids_b[0]], "the test text must start B with a ## piece"
  return [vocab.cls_id] + ids_a + [vocab.sep_id] + ids_b + [vocab.sep_id]


def stored_batch(ids, masking, copies, rng):
  """`copies` records of one instance masked by the data tool, written with its encoder and read
  back through the training pipeline's decoder."""
  options = pretraining_instances.InstanceOptions(max_seq_length=SEQ_LENGTH,
                                                  max_predictions_per_seq=MAX_PREDICTIONS,
                                                  do_whole_word_mask=masking.do_whole_word_mask)
  encoder = pretraining_instances.ExampleEncoder(SEQ_LENGTH, MAX_PREDICTIONS,
                                                 len(masking.vocab.continues_word))
  records = []
  for _ in range(copies):
    masked, positions, labels = pretraining_instances.create_masked_lm_predictions(
        ids, options, masking.vocab, rng)
    first_segment_length = ids.index(masking.vocab.sep_id) + 1
    records.append(encoder.encode(pretraining_instances.TrainingInstance(
        masked, first_segment_length, positions, labels, False)))
  return pretraining.decode_records(tf.constant(["test"] * copies), tf.constant(records),
                                    SEQ_LENGTH, MAX_PREDICTIONS)


def selected_positions(features):
  """[B, T] bool of the positions a batch predicts, checked to be sorted and zero-padded."""
  positions = features["masked_lm_positions"].numpy()
  weights = features["masked_lm_weights"].numpy()
  selected = np.zeros(features["input_ids"].shape, bool)
  for row, (row_positions, row_weights) in enumerate(zip(positions, weights)):
    real = row_positions[row_weights > 0]
    assert list(real) == sorted(set(real)), "positions must be distinct and ascending"
    assert (row_positions[row_weights == 0] == 0).all()
    assert set(row_weights) <= {0.0, 1.0} and (np.diff(row_weights) <= 0).all()
    selected[row, real] = True
  return selected


@pytest.fixture(name="tokenizer")
def fixture_tokenizer(uncased_vocab_file):
  return tokenization.FullTokenizer(uncased_vocab_file)


def make_masking(vocab_file, whole_word, masked_lm_prob=0.15):
  return pretraining.DynamicMasking.from_vocab_file(vocab_file, masked_lm_prob, MAX_PREDICTIONS,
                                                    whole_word)


@pytest.mark.parametrize("whole_word", [False, True])
def test_remask_matches_the_data_tool_statistics(uncased_vocab_file, tokenizer, whole_word):
  masking = make_masking(uncased_vocab_file, whole_word)
  vocab = masking.vocab
  ids = instance_ids(tokenizer, vocab, cut_second_segment=whole_word)
  length = len(ids)
  padded = np.array(ids + [0] * (SEQ_LENGTH - length))
  stored = stored_batch(ids, masking, DRAWS, random.Random(0))
  # The stored masks are undone exactly.
  np.testing.assert_array_equal(pretraining.restore_original_ids(stored).numpy(),
                                np.tile(padded, (DRAWS, 1)))
  remasked = masking.remask(stored, tf.constant([7, 11], tf.int64))
  selected = selected_positions(remasked)
  new_ids = remasked["input_ids"].numpy()
  # Labels are the original tokens; other positions are untouched.
  np.testing.assert_array_equal(remasked["masked_lm_ids"].numpy()[remasked["masked_lm_weights"]
                                                                   .numpy() > 0],
                                np.tile(padded, (DRAWS, 1))[selected])
  np.testing.assert_array_equal(new_ids[~selected], np.tile(padded, (DRAWS, 1))[~selected])
  for name in ("input_mask", "segment_ids", "next_sentence_labels"):
    np.testing.assert_array_equal(remasked[name].numpy(), stored[name].numpy())
  # Never [CLS], [SEP] or padding.
  special = np.isin(padded, [vocab.cls_id, vocab.sep_id]) | (np.arange(SEQ_LENGTH) >= length)
  assert not selected[:, special].any()
  # How many: the data tool's rule, min(max_predictions, max(1, round(length * prob))).
  num_to_predict = min(MAX_PREDICTIONS, max(1, round(length * 0.15)))
  counts = selected.sum(axis=1)
  # The data tool's own draws on the same instance, for the distributions that depend on the scan.
  options = pretraining_instances.InstanceOptions(max_seq_length=SEQ_LENGTH,
                                                  max_predictions_per_seq=MAX_PREDICTIONS,
                                                  do_whole_word_mask=whole_word)
  tool_rng = random.Random(1)
  tool_frequency = np.zeros(SEQ_LENGTH)
  tool_counts = []
  for _ in range(DRAWS):
    _, positions, _ = pretraining_instances.create_masked_lm_predictions(ids, options, vocab,
                                                                         tool_rng)
    tool_frequency[positions] += 1
    tool_counts.append(len(positions))
  if not whole_word:
    assert (counts == num_to_predict).all()
  else:
    assert (counts <= num_to_predict).all()
    for count in set(tool_counts) | set(counts):
      tool_share = tool_counts.count(count) / DRAWS
      assert abs((counts == count).mean() - tool_share) < 2 * binomial_bound(tool_share, DRAWS)
    # Whole words: a "##" piece is selected exactly when the piece before it (skipping [SEP], as
    # the data tool's candidate list does) is.
    previous_candidate = None
    for position in range(1, length - 1):
      if special[position]:
        continue
      if previous_candidate is not None and vocab.continues_word[ids[position]]:
        np.testing.assert_array_equal(selected[:, position], selected[:, previous_candidate])
      previous_candidate = position
  # Every candidate is chosen as often as the data tool chooses it (uniform without whole words).
  frequency = selected.mean(axis=0)
  for position in np.flatnonzero(~special):
    expected = tool_frequency[position] / DRAWS
    assert abs(frequency[position] - expected) < 2 * binomial_bound(expected, DRAWS), position
  # 80% [MASK], 10% a random token (which may be the same token or [MASK]), 10% kept.
  chosen = selected.sum()
  replaced_by_mask = (new_ids[selected] == vocab.mask_id).mean()
  changed_otherwise = ((new_ids[selected] != vocab.mask_id)
                       & (new_ids[selected] != np.tile(padded, (DRAWS, 1))[selected])).mean()
  vocab_share = 1 / len(vocab.random_ids)
  assert abs(replaced_by_mask - (0.8 + 0.1 * vocab_share)) < binomial_bound(0.8, chosen)
  assert abs(changed_otherwise - 0.1 * (1 - 2 * vocab_share)) < binomial_bound(0.1, chosen)


def test_fraction_masked_over_many_lengths(uncased_vocab_file):
  """Random-length rows of random word ids: each row predicts exactly the data tool's number."""
  masking = make_masking(uncased_vocab_file, False, masked_lm_prob=0.2)
  rng = np.random.RandomState(0)
  vocab = masking.vocab
  rows, lengths = [], rng.randint(5, SEQ_LENGTH + 1, size=500)
  for length in lengths:
    body = rng.randint(1000, 2000, size=length - 3).tolist()
    split = rng.randint(1, length - 3)
    ids = [vocab.cls_id] + body[:split] + [vocab.sep_id] + body[split:] + [vocab.sep_id]
    rows.append(ids + [0] * (SEQ_LENGTH - length))
  ids = tf.constant(rows, tf.int32)
  features = {
      "input_ids": ids,
      "input_mask": tf.cast(ids > 0, tf.int32),
      "masked_lm_positions": tf.zeros([len(rows), MAX_PREDICTIONS], tf.int32),
      "masked_lm_ids": tf.zeros([len(rows), MAX_PREDICTIONS], tf.int32),
      "masked_lm_weights": tf.zeros([len(rows), MAX_PREDICTIONS], tf.float32),
  }
  counts = masking.remask(features, tf.constant([1, 2], tf.int64))["masked_lm_weights"].numpy()
  expected = [min(MAX_PREDICTIONS, max(1, round(length * 0.2))) for length in lengths]
  np.testing.assert_array_equal(counts.sum(axis=1), expected)


def test_pipeline_draws_new_masks_each_read_and_repeats_with_the_seed(uncased_vocab_file,
                                                                      tokenizer):
  masking = make_masking(uncased_vocab_file, True)
  ids = instance_ids(tokenizer, masking.vocab)
  stored = stored_batch(ids, masking, 4, random.Random(0))
  batches = tf.data.Dataset.from_tensors(stored).repeat(3)

  def positions(seed):
    return [batch["masked_lm_positions"].numpy() for batch in masking.apply(batches, seed)]

  first, again = positions(5), positions(5)
  np.testing.assert_array_equal(np.stack(first), np.stack(again))
  assert not all((first[0] == batch).all() for batch in first[1:])  # New masks on each read.


def test_vocab_without_mask_token_is_a_clear_error(tmp_path):
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  with pytest.raises(ValueError, match=r"vocab.txt has no \[MASK\]"):
    make_masking(str(vocab_file), False)
  with pytest.raises(ValueError, match="`masked_lm_prob`"):
    make_masking(str(vocab_file), False, masked_lm_prob=1.5)
  vocab_file.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
  make_masking(str(vocab_file), False).check_vocab_size(6)
  with pytest.raises(ValueError, match="ids up to 5 but the model's vocab_size is 5"):
    make_masking(str(vocab_file), False).check_vocab_size(5)
