# coding=utf-8
"""Length bucketing: batches of examples of similar length, padded only to a few lengths.

The original padded every example to `max_seq_length`; real task text is much shorter, so most of
what every layer computed was padding. Feature files keep that fixed-length layout (old caches stay
valid); the input pipeline trims each example here to the smallest *bucket length* that holds its
tokens (`padded_length_buckets`: 4, 8, ..., 32, 40, ..., 64, 96, 128, ... capped at max_seq_length, the
lengths the exports' dynamic padding uses). A graph (or an XLA compilation) then exists for at
most a handful of shapes.

Two ways to batch (`batch`):
- grouped by length (`group_by_length`): examples go to a batch of their own bucket, so a batch
  costs what its tokens cost. Evaluation and prediction always batch this way (their results do
  not depend on the batches); training does only when asked (`--group_by_length`), because then
  the length of a text decides which texts share its batch, and fine-tuning measured over seeds
  learned worse and less reliably that way (SQuAD runs fell to 34.7 F1 where the original's
  batches gave 46-54).
- as they come (the training default): the batches of the original (the same examples in the same
  order), each cut to the bucket of its longest example. Training then learns what the original's
  padded batches learn, up to float rounding, with part of the saving.

Values at the real positions do not depend on padding (attention is masked), and positions below
the bucket length are computed exactly as with full padding, so results equal the padded path's
to float rounding. A feature is per position when its shape is `input_mask`'s: [max_seq_length]
(`input_ids`, `segment_ids`, NER `label_ids`, ...), or [num_choices, max_seq_length] for multiple
choice, whose example is trimmed to the bucket of its longest choice; other features (labels,
ids, the choice mask) pass unchanged.
"""

import tensorflow as tf

# The feature whose last non-zero position gives an example's length.
MASK_KEY = "input_mask"


def padded_length_buckets(max_seq_length: int) -> list[int]:
  """The lengths examples are padded to: multiples of 4 up to 32, of 8 up to 64, then of 32, then
  max_seq_length (4, 8, ..., 32, 40, ..., 64, 96, 128 for 128).

  Fine steps where task text is: SST-2 sentences average 13 tokens, CoNLL's 19, and a training
  step of all-MiniLM-L6-v2 at batch 32 costs about 60 ms plus 14 ms per position, so steps of 4
  below 32 save a tenth of SST-2's training against steps of 8. Steps of 32 above 64: long text
  (SQuAD windows of 130 to 380 tokens) pads by under a quarter of its length, and the shapes stay
  few (14 for 128, 22 for 384).
  """
  return sorted({length for length in range(4, 33, 4) if length < max_seq_length} |
                {length for length in range(40, 65, 8) if length < max_seq_length} |
                {length for length in range(96, max_seq_length, 32)} | {max_seq_length})


@tf.autograph.experimental.do_not_convert
def trim_to_bucket(features: dict) -> dict:
  """Cuts the per-position features of one example, or of a batch, to the bucket length of its
  longest row (the last dimension; for multiple choice, the bucket of the longest choice)."""
  mask = features[MASK_KEY]
  if mask.shape[-1] is None:
    raise ValueError("length bucketing needs %s of a fixed length" % MASK_KEY)
  max_seq_length = mask.shape[-1]
  # One past the last real position in any row (a mask that is not a prefix of ones still keeps
  # every token).
  length = tf.reduce_max(tf.where(mask != 0, tf.range(1, max_seq_length + 1), 0))
  buckets = tf.constant(padded_length_buckets(max_seq_length), tf.int32)
  bucket_length = buckets[tf.searchsorted(buckets, [length], side="left")[0]]
  return {name: value[..., :bucket_length] if value.shape == mask.shape else value
          for name, value in features.items()}


def batch_by_length(dataset: tf.data.Dataset, batch_size: int,
                    drop_remainder: bool) -> tf.data.Dataset:
  """Batches an unbatched dataset of feature dicts, each batch from one length bucket.

  Examples go, in the order they come, to their bucket's open batch; a batch is emitted when it
  has `batch_size` examples. At the end of a finite dataset the open partial batches follow
  (unless `drop_remainder`). A shuffled stream therefore stays shuffled:
  this only groups neighbours of similar length. Per-position features of a batch are
  [batch, bucket length]; the dataset's element spec leaves that dimension unknown.
  """

  def bucket_key(features):
    return tf.cast(tf.shape(features[MASK_KEY])[-1], tf.int64)

  return dataset.map(trim_to_bucket, num_parallel_calls=tf.data.AUTOTUNE).group_by_window(
      key_func=bucket_key,
      reduce_func=lambda _, window: window.batch(batch_size, drop_remainder=drop_remainder),
      window_size=batch_size)


def batch(dataset: tf.data.Dataset, batch_size: int, drop_remainder: bool,
          bucket_by_length: bool, group_by_length: bool = True) -> tf.data.Dataset:
  """Batches an unbatched dataset of feature dicts. Without `bucket_by_length`, the original's
  fixed-length batches; with it, `batch_by_length` when `group_by_length`, else the batches as
  they come, each cut to the bucket of its longest example."""
  if not bucket_by_length:
    return dataset.batch(batch_size, drop_remainder=drop_remainder)
  if group_by_length:
    return batch_by_length(dataset, batch_size, drop_remainder)
  # trim_to_bucket takes the longest of all the batch's rows.
  return dataset.batch(batch_size, drop_remainder=drop_remainder).map(
      trim_to_bucket, num_parallel_calls=tf.data.AUTOTUNE)
