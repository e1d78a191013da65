"""The shared training pipeline of every task (`fine_tuning.training_dataset_fn`): its shuffle
policy, checked on ids that name each row."""
import numpy as np
import pytest
import tensorflow as tf

import fine_tuning

NUM_ROWS, SEQ_LENGTH = 12, 8


def rows() -> tf.data.Dataset:
  """Row i: input_ids all i, the first i % 8 + 1 positions real (so rows differ in length)."""
  lengths = np.arange(NUM_ROWS) % SEQ_LENGTH + 1
  return tf.data.Dataset.from_tensor_slices({
      "input_ids": np.repeat(np.arange(NUM_ROWS, dtype=np.int32)[:, None], SEQ_LENGTH, axis=1),
      "input_mask": (np.arange(SEQ_LENGTH)[None, :] < lengths[:, None]).astype(np.int32),
      "label_ids": np.zeros(NUM_ROWS, np.float32)})


def epochs_of(dataset_fn, seed: int, num_epochs: int = 3, batch_size: int = 4) -> list:
  """The row ids of each epoch's batches (NUM_ROWS is a multiple of the batch size)."""
  batches = dataset_fn(batch_size, seed).take(num_epochs * NUM_ROWS // batch_size)
  ids = [row_ids for batch in batches for row_ids in batch["input_ids"][:, 0].numpy().tolist()]
  return [ids[start:start + NUM_ROWS] for start in range(0, len(ids), NUM_ROWS)]


@pytest.mark.parametrize("bucket_by_length", [False, True])
def test_every_epoch_is_a_new_permutation_of_all_rows_drawn_from_the_seed(bucket_by_length):
  dataset_fn = fine_tuning.training_dataset_fn(rows(), NUM_ROWS, bucket_by_length, False)
  epochs = epochs_of(dataset_fn, seed=3)
  for epoch in epochs:
    assert sorted(epoch) == list(range(NUM_ROWS))  # Every row once per epoch.
  assert len({tuple(epoch) for epoch in epochs}) == 3  # A new order each epoch ...
  assert epochs[0] != list(range(NUM_ROWS))  # ... and not the file's.
  assert epochs_of(dataset_fn, seed=3) == epochs  # The same seed, the same batches (resume).
  assert epochs_of(dataset_fn, seed=4) != epochs


def test_the_shuffle_buffer_is_bounded_in_bytes(monkeypatch):
  # A row holds 8 + 8 int32 and one float32: 68 bytes. A 136-byte budget holds 2 rows, so a
  # row can move at most one place ahead of its turn: row k comes out among the first k + 2.
  monkeypatch.setattr(fine_tuning, "TRAINING_SHUFFLE_BUFFER_BYTES", 136)
  assert fine_tuning.row_bytes(rows().element_spec) == 68
  (epoch,) = epochs_of(fine_tuning.training_dataset_fn(rows(), NUM_ROWS, False, False), seed=3,
                       num_epochs=1)
  for position, row in enumerate(epoch):
    assert row <= position + 1
