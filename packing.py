# coding=utf-8
"""Packed rows: several sequences share one row, with the padded model's math.

A batch padded to its longest example spends most of its work on padding (a random batch of 32
SST-2 sentences pads to about four times their average length). Packing puts several sequences
in one row instead. Each keeps its own position ids (from 0) and segment ids, and attends only
to itself (`modeling.packed_attention_mask`, the original's additive -10000 mask per row, block
diagonal); a head reads each sequence's own [CLS] (`sequence_starts`) or its tokens
(`unpack_tokens`). Masked keys get exactly zero attention in float32, so every sequence's outputs
are its padded outputs up to float rounding (Krell et al., "Efficient Sequence Packing without
Cross-contamination").

A packed batch (`pack_batch`) keeps the examples of the batch it packs, in their order, cut into
`num_groups` equal groups of consecutive examples (one per replica and micro-batch, so
tf.distribute and gradient accumulation see the same examples per step as unpacked); each group
is packed into rows of its own. Every tensor leads with the group axis:

- `input_ids`, `input_mask`, `segment_ids`, `position_ids`, `packed_sequence_ids` (1, 2, ... per
  sequence of a row, 0 on padding): [groups, rows, width];
- `sequence_starts`: [groups, examples, 2] (row in the group, first position), for multiple
  choice [groups, examples, choices, 2];
- every other feature: [groups, examples, ...], those of `input_mask`'s shape cut to the width.

`merge_groups` turns a replica's groups into one set of rows, as the model reads them.

An export packs one request in graph ops (`pack_request`): the same rule at the request's padded
width, in that merged layout (rows [rows, width], `sequence_starts` [N, 2] or [N, E, 2]).
"""

from typing import Collection, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

import length_buckets

# The per-position features packed into rows; every other feature stays per example.
PACKED_INPUTS = ("input_ids", "input_mask", "segment_ids")
POSITION_IDS = "position_ids"
SEQUENCE_IDS = "packed_sequence_ids"
SEQUENCE_STARTS = "sequence_starts"
# What a packed batch adds to a padded one; the model reads rows as packed when they are present.
PACKED_FEATURES = (POSITION_IDS, SEQUENCE_IDS, SEQUENCE_STARTS)
_ROW_FEATURES = PACKED_INPUTS + (POSITION_IDS, SEQUENCE_IDS)


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
  """Packs items of `lengths` into bins of `capacity`: longest first (ties in input order), each
  into the first bin with room, else a new bin.

  Returns the bins as lists of item indices, in the order the bins were opened, each in the
  order its items were placed. Zero-length items take no room and go to the first bin. FFD
  uses at most 11/9 of the optimal number of bins plus one, and it is deterministic, which exact
  resume needs (the same batch always packs alike).
  """
  if any(length > capacity for length in lengths):
    raise ValueError("an item of length %d does not fit a bin of %d" % (max(lengths), capacity))
  order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
  bins, room = [], []
  for index in order:
    for bin_index, free in enumerate(room):
      if lengths[index] <= free:
        bins[bin_index].append(index)
        room[bin_index] -= lengths[index]
        break
    else:
      bins.append([index])
      room.append(capacity - lengths[index])
  return bins


def sequence_lengths(mask: np.ndarray) -> np.ndarray:
  """One past the last non-zero position of each row of `mask` [..., T] (0 for an empty row):
  the tokens a sequence keeps, as `length_buckets.trim_to_bucket` counts them."""
  positions = np.arange(1, mask.shape[-1] + 1)
  return np.max(np.where(mask != 0, positions, 0), axis=-1)


def _pack_rows(lengths: np.ndarray, num_groups: int, width: int) -> list[list[list[int]]]:
  """FFD bins (sequence indices within the group) of each of `num_groups` equal groups."""
  per_group = len(lengths) // num_groups
  return [first_fit_decreasing(lengths[group * per_group:(group + 1) * per_group].tolist(), width)
          for group in range(num_groups)]


def choose_width(lengths: np.ndarray, num_groups: int, widths: Sequence[int]) -> int:
  """The row width among `widths` (length buckets at least the longest sequence) that computes
  the fewest positions (groups x rows of the fullest group x width); the narrowest on a tie."""
  longest = int(np.max(lengths, initial=1))
  candidates = [width for width in widths if width >= longest]
  return min(candidates, key=lambda width: (
      width * max(len(rows) for rows in _pack_rows(lengths, num_groups, width)), width))


def pack_arrays(features: Mapping[str, np.ndarray], num_groups: int,
                per_position: Optional[Collection[str]] = None) -> dict:
  """Packs one batch of padded numpy features ([batch, ...], `input_mask` [batch, T] or
  [batch, choices, T]) into `num_groups` groups of rows (the layout of this module's docstring).
  The features of `per_position` (default: those of `input_mask`'s shape) are cut to the width.

  The batch must divide into `num_groups`; the width is `choose_width`'s among the length
  buckets of T; every group has the rows of the fullest one (the others' extra rows are padding).
  """
  mask = np.asarray(features["input_mask"])
  batch_size, seq_length = mask.shape[0], mask.shape[-1]
  if batch_size % num_groups:
    raise ValueError("a batch of %d examples does not split into %d groups" %
                     (batch_size, num_groups))
  per_sequence = mask.shape[1:-1]  # () or (choices,)
  lengths = sequence_lengths(mask).reshape(-1)
  width = choose_width(lengths, num_groups, length_buckets.padded_length_buckets(seq_length))
  groups = _pack_rows(lengths, num_groups, width)
  num_rows = max(len(rows) for rows in groups)
  sequences = {name: np.asarray(features[name]).reshape(-1, seq_length) for name in PACKED_INPUTS}
  rows = {name: np.zeros((num_groups, num_rows, width), sequences[name].dtype)
          for name in PACKED_INPUTS}
  rows.update({name: np.zeros((num_groups, num_rows, width), np.int32)
               for name in (POSITION_IDS, SEQUENCE_IDS)})
  sequences_per_group = len(lengths) // num_groups
  starts = np.zeros((num_groups, sequences_per_group, 2), np.int32)
  for group, bins in enumerate(groups):
    for row, members in enumerate(bins):
      start = 0
      for number, member in enumerate(members, start=1):
        sequence = group * sequences_per_group + member
        length = lengths[sequence]
        span = slice(start, start + length)
        for name in PACKED_INPUTS:
          rows[name][group, row, span] = sequences[name][sequence, :length]
        rows[POSITION_IDS][group, row, span] = np.arange(length)
        rows[SEQUENCE_IDS][group, row, span] = number
        starts[group, member] = (row, start) if length else (0, 0)  # in range, never read
        start += length
  packed = dict(rows)
  packed[SEQUENCE_STARTS] = starts.reshape((num_groups, -1) + per_sequence + (2,))
  if per_position is None:
    per_position = [name for name, value in features.items()
                    if np.shape(value) == mask.shape]
  for name, value in features.items():
    if name in PACKED_INPUTS:
      continue
    value = np.asarray(value)
    if name in per_position:
      value = value[..., :width]
    packed[name] = value.reshape((num_groups, batch_size // num_groups) + value.shape[1:])
  return packed


def pack_batch(features: Mapping[str, tf.Tensor], num_groups: int) -> dict:
  """`pack_arrays` on a batch of a tf.data pipeline (a `dataset.map` function).

  The packing runs in numpy (`tf.numpy_function`); the result keeps the static shapes that do
  not depend on the batch's lengths: the group axis, the examples per group, the choices.
  """
  names = sorted(features)
  mask_shape = features["input_mask"].shape
  # What is per position is decided on the static shapes, as length_buckets.trim_to_bucket does.
  per_position = [name for name in names if features[name].shape == mask_shape]
  batch_size = features["input_mask"].shape[0]  # None for evaluation's last partial batch.
  per_group = None if batch_size is None else batch_size // num_groups
  out_names = sorted(set(names) | set(PACKED_FEATURES))
  out_dtypes = {name: (tf.int32 if name in PACKED_FEATURES else features[name].dtype)
                for name in out_names}

  def pack(*values):
    packed = pack_arrays(dict(zip(names, values)), num_groups, per_position)
    return [packed[name].astype(out_dtypes[name].as_numpy_dtype) for name in out_names]

  outputs = tf.numpy_function(pack, [features[name] for name in names],
                              [out_dtypes[name] for name in out_names], stateful=False)
  packed = dict(zip(out_names, outputs))
  for name, value in packed.items():
    if name in _ROW_FEATURES:
      value.set_shape([num_groups, None, None])
    elif name == SEQUENCE_STARTS:
      value.set_shape([num_groups, per_group] + mask_shape[1:-1].as_list() + [2])
    else:
      shape = features[name].shape
      trailing = (shape[1:-1].as_list() + [None] if name in per_position else
                  shape[1:].as_list())
      value.set_shape([num_groups, per_group] + trailing)
  return packed


def merge_groups(features: Mapping[str, tf.Tensor]) -> dict:
  """A replica's packed features [g, ...] as one batch: rows [g * rows, width], examples
  [g * examples, ...], `sequence_starts` pointing into the merged rows."""
  rows_per_group = tf.shape(features[SEQUENCE_IDS])[1]

  def merged(value):
    return tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0))

  merged_features = {name: merged(value) for name, value in features.items()}
  starts = features[SEQUENCE_STARTS]
  group = tf.range(tf.shape(starts)[0], dtype=starts.dtype)
  group = tf.reshape(group, [-1] + [1] * (len(starts.shape) - 1))
  offset = tf.concat([group * rows_per_group, tf.zeros_like(group)], axis=-1)
  merged_features[SEQUENCE_STARTS] = merged(starts + offset)
  return merged_features


def is_packed(features) -> bool:
  """Whether a feature dict holds packed rows (`PACKED_FEATURES`)."""
  return isinstance(features, Mapping) and SEQUENCE_STARTS in features


def unpack_tokens(packed: tf.Tensor, sequence_starts: tf.Tensor,
                  sequence_ids: tf.Tensor) -> tf.Tensor:
  """Per-token values of packed rows [rows, width, ...] as one row per sequence [sequences,
  width, ...] (`sequence_starts` [..., 2] flattened in order), zero past each sequence's end:
  the layout a padded batch of width `width` gives its heads. A sequence without tokens (a
  multiple-choice example's missing choice) has no own values; heads mask it."""
  starts = tf.reshape(sequence_starts, [-1, 2])
  width = tf.shape(packed)[1]
  positions = starts[:, 1:] + tf.range(width)[tf.newaxis, :]  # [sequences, width]
  in_row = positions < width
  clipped = tf.minimum(positions, width - 1)
  rows = tf.broadcast_to(starts[:, :1], tf.shape(clipped))
  indices = tf.stack([rows, clipped], axis=-1)
  own_id = tf.gather_nd(sequence_ids, starts)[:, tf.newaxis]
  keep = in_row & (tf.gather_nd(sequence_ids, indices) == own_id) & (own_id > 0)
  values = tf.gather_nd(packed, indices)
  keep = tf.reshape(keep, tf.concat([tf.shape(keep), tf.ones([len(packed.shape) - 2], tf.int32)],
                                    0))
  return tf.where(keep, values, tf.zeros_like(values))


# --------------------------------------------------------------------------------------------------
# The same packing in TensorFlow ops, for one request inside an export (no numpy_function, so a
# SavedModel served by TF's C++ loader packs it).


def first_fit_decreasing_in_graph(lengths: tf.Tensor, capacity: tf.Tensor
                                  ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """`first_fit_decreasing` of int32 `lengths` [N] (each at most `capacity`) in graph ops.

  Returns, per item in input order, int32 [N] each: its bin, its first position in the bin (the
  room its bin's earlier items took) and its number in the bin (1, 2, ... in placement order).
  The bins and their items are `first_fit_decreasing`'s: items go longest first (ties in input
  order, a stable sort) into the first bin with room; bins not yet opened have all their room,
  so the first of them is where a new bin opens. One `tf.while_loop` step per item, each a few
  ops on vectors of N bins.
  """
  lengths = tf.convert_to_tensor(lengths, tf.int32)
  num_items = tf.size(lengths)
  order = tf.argsort(-lengths, stable=True)
  bin_indexes = tf.range(num_items)

  def place(step, room, members, bins, starts, numbers):
    length = tf.gather(lengths, order[step])
    first = tf.reduce_min(tf.where(room >= length, bin_indexes, num_items))
    chosen = tf.equal(bin_indexes, first)
    return (step + 1, room - tf.where(chosen, length, 0), members + tf.cast(chosen, tf.int32),
            bins.write(step, first), starts.write(step, capacity - tf.gather(room, first)),
            numbers.write(step, tf.gather(members, first) + 1))

  placed = [tf.TensorArray(tf.int32, size=num_items, element_shape=[]) for _ in range(3)]
  _, _, _, *placed = tf.while_loop(
      lambda step, *_: step < num_items, place,
      [tf.constant(0), tf.fill([num_items], capacity), tf.zeros([num_items], tf.int32)] + placed)
  # Placement order back to input order.
  inverse = tf.math.invert_permutation(order)
  return tuple(tf.gather(values.stack(), inverse) for values in placed)


def sequence_lengths_in_graph(mask: tf.Tensor) -> tf.Tensor:
  """`sequence_lengths` in graph ops: one past the last non-zero position of each row of `mask`
  [S, T] (0 for an empty row), int32 [S]."""
  positions = tf.range(1, tf.shape(mask)[-1] + 1)
  return tf.reduce_max(tf.where(mask != 0, positions, 0), axis=-1)


def pack_request(features: Mapping[str, tf.Tensor]) -> dict:
  """One request's padded id features packed in graph ops, in the layout the model reads.

  `features`: int32 `PACKED_INPUTS` [N, T], or multiple choice's [N, E, T] whose every (example,
  ending) row is a sequence, plus any per-example features (passed on unchanged). Each sequence
  (its tokens up to its last real one, `sequence_lengths_in_graph`) goes into rows of width T by
  `first_fit_decreasing_in_graph`, so a request of N sequences packs into at most N rows, the
  rows `pack_arrays` gives one group at that width. Returns `PACKED_INPUTS`, `POSITION_IDS` (0,
  1, ... per sequence) and `SEQUENCE_IDS` (1, 2, ... per row, 0 on padding) as [rows, T], and
  `SEQUENCE_STARTS` [N, 2] (or [N, E, 2]): each sequence's (row, first position) in input
  order, (0, 0) for a sequence without tokens, which heads never read. Everything past a
  sequence's last real token is 0. A request of one sequence is its own row: it skips the
  packer's loop and scatters (`tf.cond`), so it costs what the unpacked row costs.
  """
  shape = tf.shape(features["input_mask"])
  width = shape[-1]
  sequences = {name: tf.reshape(features[name], [-1, width]) for name in PACKED_INPUTS}
  lengths = sequence_lengths_in_graph(sequences["input_mask"])
  packed = tf.cond(tf.size(lengths) > 1, lambda: _packed_rows(sequences, lengths, width),
                   lambda: _own_rows(sequences, lengths, width))
  packed[SEQUENCE_STARTS] = tf.reshape(packed[SEQUENCE_STARTS], tf.concat([shape[:-1], [2]], 0))
  for name, value in features.items():
    packed.setdefault(name, value)
  return packed


def _packed_rows(sequences: Mapping[str, tf.Tensor], lengths: tf.Tensor, width: tf.Tensor
                 ) -> dict:
  """`pack_request`'s rows for sequences [S, T] of `lengths` [S], by the packer's loop."""
  rows, starts, numbers = first_fit_decreasing_in_graph(lengths, width)
  num_rows = tf.reduce_max(tf.concat([[-1], rows], 0)) + 1
  # Every token of every sequence: its (sequence, position) and where it goes in the rows.
  tokens = tf.cast(tf.where(tf.range(width)[tf.newaxis, :] < lengths[:, tf.newaxis]), tf.int32)
  sequence, position = tokens[:, 0], tokens[:, 1]
  targets = tf.stack([tf.gather(rows, sequence), tf.gather(starts, sequence) + position], axis=1)

  def scattered(values):
    return tf.scatter_nd(targets, values, tf.stack([num_rows, width]))

  packed = {name: scattered(tf.gather_nd(sequences[name], tokens)) for name in PACKED_INPUTS}
  packed[POSITION_IDS] = scattered(position)
  packed[SEQUENCE_IDS] = scattered(tf.gather(numbers, sequence))
  has_tokens = lengths > 0
  packed[SEQUENCE_STARTS] = tf.stack([tf.where(has_tokens, rows, 0),
                                      tf.where(has_tokens, starts, 0)], axis=1)
  return packed


def _own_rows(sequences: Mapping[str, tf.Tensor], lengths: tf.Tensor, width: tf.Tensor) -> dict:
  """`pack_request`'s rows for at most one sequence: the sequence is its row (what the packer
  gives it), cut after its last real token."""
  positions = tf.range(width)[tf.newaxis, :]
  real = positions < lengths[:, tf.newaxis]
  packed = {name: tf.where(real, sequences[name], 0) for name in PACKED_INPUTS}
  packed[POSITION_IDS] = tf.where(real, positions, 0)
  packed[SEQUENCE_IDS] = tf.cast(real, tf.int32)
  packed[SEQUENCE_STARTS] = tf.zeros([tf.size(lengths), 2], tf.int32)
  return packed


def zero_empty_sequences(values: tf.Tensor, input_mask: tf.Tensor) -> tf.Tensor:
  """Per-sequence outputs `values` [N, ...] of packed rows, 0 where a sequence of `input_mask`
  [N, T] has no real token: it has no position of its own, and its `sequence_starts` (0, 0)
  reads another sequence's (a request's other rows, perhaps another client's)."""
  has_tokens = tf.reduce_any(input_mask != 0, axis=-1)
  has_tokens = tf.reshape(has_tokens, tf.concat([tf.shape(has_tokens),
                                                 tf.ones([len(values.shape) - 1], tf.int32)], 0))
  return tf.where(has_tokens, values, tf.zeros_like(values))
