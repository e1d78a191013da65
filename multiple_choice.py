"""Multiple choice (SWAG): pick the most plausible ending of a context among several.

The paper's fourth kind of fine-tuning, which the original repository never shipped: each
(context, ending) pair is encoded as `[CLS] context [SEP] ending [SEP]`, BERT's pooled output of
every pair gets one score from a shared head (`cls/multiple_choice/output_weights` [1, H] and
`output_bias` [1]), and a softmax over an example's scores picks the ending.

Data files (`read_examples`, by extension):
- `.csv`: SWAG's files (`video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0..3,label`,
  with or without the leading unnamed index column of the released files; the test file has no
  `label`). Columns are found by header name. As in the paper and Hugging Face's run_swag, the
  context is `sent1` and each ending is `sent2 + " " + endingN` (the start phrase split in two).
- `.jsonl`/`.json`: JSON Lines, one object a line: `{"context": str, "question": str (optional),
  "endings": [str, ...] (any number), "label": index (optional)}`; each ending is then
  `question + " " + ending` (as SWAG's `sent2`).

An empty ending ("") is a missing one, in files as in the export's requests (whose rows of fewer
endings are filled with ""): it is no choice, gets probability 0, and the other endings get what
they would get without it. So SWAG's four ending columns serve fewer endings too. A labeled row
needs a non-empty ending, its label pointing at one; an unlabeled (test) row without any gets
probability 0 for each, as the export answers it. A test row is never skipped (see
`task_files.BadRows`): test_results.tsv has one line per test row, in order.

Features are the classifier's pair records and cache (`text_pairs.cached_features_file`): one
record per (context, ending) pair, an example's pairs consecutive, every example padded to the
split's largest number of endings with padding pairs; `label_ids` is 1 for the right ending, 0 for
the others (and for every ending of an unlabeled example), 2 for a padding pair. Reading groups the
records back into [num_choices, seq] examples with a `choice_mask`. Padded choices get a -inf logit,
so their probability is 0 and they never win. With `bucket_by_length` (default; `--bucket_by_length`)
an example is cut to the length bucket of its longest pair, and a batch to the bucket of its
longest example (`length_buckets.batch`: evaluation, prediction and, with `--group_by_length`,
training batch examples of one bucket together), as the other tasks are.
"""

import dataclasses
import os
from typing import Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

import distribution
import errors
import export
import fine_tuning
import heads
import in_graph_tokenization
import modeling
import packing
import task_files
import text_pairs
import tokenization
import training_loop

# The classifier-record labels of the pairs (see the module docstring); their index is label_ids.
WRONG, RIGHT, PADDING = "wrong", "right", "padding"
PAIR_LABELS = (WRONG, RIGHT, PADDING)
SWAG_ENDINGS = ("ending0", "ending1", "ending2", "ending3")
SWAG_REQUIRED = ("sent1", "sent2") + SWAG_ENDINGS
HEAD_SCOPE = "cls/multiple_choice"
CHOICE_MASK_KEY = "choice_mask"


@dataclasses.dataclass
class MultipleChoiceExample:
  """A context, its candidate endings and the right ending's index (None when unlabeled).

  `question` (SWAG's `sent2`) starts every ending: the second text of pair i is
  `question + " " + endings[i]`.
  """
  guid: str
  context: str
  endings: list[str]
  question: str = ""
  label: Optional[int] = None

  def second_texts(self) -> list[str]:
    """The second text of each (context, ending) pair."""
    return [(self.question + " " + ending) if self.question else ending for ending in self.endings]

  def choice_mask(self) -> list[bool]:
    """Whether each ending is a choice: an empty one is missing (see the module docstring)."""
    return [bool(ending) for ending in self.endings]


def read_examples(path: str, split: str = "data",
                  bad_rows: Optional[task_files.BadRows] = None) -> list[MultipleChoiceExample]:
  """Reads SWAG CSV (`.csv`) or JSON Lines (`.jsonl`, `.json`) examples; BadInputError naming the
  file (and line) for a missing file, an unknown extension, a bad row (unless `bad_rows` skips
  it: `--skip_bad_rows`) or no examples."""
  if not os.path.lexists(path):
    raise task_files.BadInputError("%s: no such file (the %s file)" % (path, split))
  bad_rows = bad_rows or task_files.BadRows()
  bad_rows.start_file(path, predicted=split == "test")
  extension = os.path.splitext(path)[1].lower()
  if extension == ".csv":
    examples = read_swag_csv(path, split, bad_rows)
  elif extension in (".jsonl", ".json"):
    examples = read_jsonl(path, split, bad_rows)
  else:
    raise task_files.BadInputError("%s: unknown format: use SWAG's .csv or JSON Lines (.jsonl)" %
                                   path)
  return bad_rows.finish_file(path, examples, "%s file" % split)


def read_swag_csv(path: str, split: str,
                  bad_rows: task_files.BadRows) -> list[MultipleChoiceExample]:
  """SWAG's CSV files, columns found by header name; `label` optional (test file)."""
  header = task_files.read_header(path, "csv")
  missing = [name for name in SWAG_REQUIRED if name not in header]
  if missing:
    raise task_files.BadInputError("%s:1: no column %s in the header (SWAG's columns: video-id,"
                                   "fold-ind,startphrase,sent1,sent2,gold-source,ending0,...,"
                                   "ending3[,label])" % (path, ", ".join(missing)))
  column = {name: header.index(name) for name in header}
  label_column = column.get("label")
  layout = task_files.SplitLayout(path, column["sent1"], column["sent2"], label_column,
                                  file_format="csv")
  examples = []
  for line_number, row in task_files.read_rows(path, "csv", has_header=True):
    try:
      row.check_columns(layout)
      endings = [row.get(column[name]) for name in SWAG_ENDINGS]
      label = None if label_column is None else _label_index(row.get(label_column).strip(), 4)
      _check_choices(endings, label)
    except task_files.BadInputError as e:
      bad_rows.reject(path, line_number, str(e))
      continue
    examples.append(MultipleChoiceExample(
        "%s-%d" % (split, len(examples)), row.get(column["sent1"]), endings,
        row.get(column["sent2"]), label))
  return examples


def _label_index(label, num_endings: int) -> int:
  """An ending index from a CSV cell or a JSON value; BadInputError if it is not one."""
  if isinstance(label, bool) or not isinstance(label, (int, str)):
    raise task_files.BadInputError("label %r is not an ending index" % (label,))
  try:
    index = int(label)
  except ValueError:
    raise task_files.BadInputError("label %r is not an ending index" % label) from None
  if not 0 <= index < num_endings:
    raise task_files.BadInputError("label %d is not an index of the %d endings" %
                                   (index, num_endings))
  return index


def _check_choices(endings: Sequence[str], label: Optional[int]) -> None:
  """BadInputError unless a labeled row has some non-empty ending and its label points at one. An
  unlabeled row (a test row) may have no ending at all: its probabilities are all 0, as the
  export answers it."""
  if label is not None and not any(endings):
    raise task_files.BadInputError("every ending is empty: a row needs at least one (\"\" is a "
                                   "missing ending)")
  if label is not None and not endings[label]:
    raise task_files.BadInputError("label %d is an empty ending (\"\" is a missing ending)" %
                                   label)


def read_jsonl(path: str, split: str, bad_rows: task_files.BadRows) -> list[MultipleChoiceExample]:
  """JSON Lines objects `{"context", "question"?, "endings": [...], "label"?}`, blank lines
  skipped."""
  errors.check_text_file(path, "the %s file" % split)  # A CSV is checked by read_rows.
  examples = []
  with open(path, "rb") as f:
    for line_number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        examples.append(_jsonl_example(line, "%s-%d" % (split, len(examples))))
      except task_files.BadInputError as e:
        bad_rows.reject(path, line_number, str(e))
  return examples


def _jsonl_example(line: bytes, guid: str) -> MultipleChoiceExample:
  try:
    text = line.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise task_files.BadInputError("invalid UTF-8 byte 0x%02x at byte %d" %
                                   (line[e.start], e.start)) from None
  record = task_files.parse_jsonl_line(text)
  context, question, endings = record.get("context"), record.get("question"), record.get("endings")
  if not isinstance(context, str):
    raise task_files.BadInputError("\"context\" must be a string")
  if question is not None and not isinstance(question, str):
    raise task_files.BadInputError("\"question\" must be a string")
  if (not isinstance(endings, list) or not endings or
      not all(isinstance(ending, str) for ending in endings)):
    raise task_files.BadInputError("\"endings\" must be a non-empty list of strings")
  label = record.get("label")
  label = None if label is None else _label_index(label, len(endings))
  _check_choices(endings, label)
  return MultipleChoiceExample(guid, context, endings, question or "", label)


# --------------------------------------------------------------------------------------------------
# Features: classifier pair records, grouped back into examples.


def pair_examples(examples: Sequence[MultipleChoiceExample],
                  num_choices: int) -> list[text_pairs.InputExample]:
  """The classifier pair examples of `examples`, each padded to num_choices pairs; a missing
  (empty) ending is a padding pair in its place."""
  pairs = []
  for example in examples:
    choices = zip(example.second_texts(), example.choice_mask())
    for index, (text_b, is_choice) in enumerate(choices):
      if not is_choice:
        pairs.append(_padding_pair(example))
        continue
      label = RIGHT if index == example.label else WRONG
      pairs.append(text_pairs.InputExample("%s-%d" % (example.guid, index), example.context,
                                           text_b, label))
    pairs.extend(_padding_pair(example) for _ in range(num_choices - len(example.endings)))
  return pairs


def _padding_pair(example: MultipleChoiceExample) -> text_pairs.InputExample:
  """A pair that is no choice: a missing ending, or a place past the example's endings."""
  return text_pairs.InputExample("%s-pad" % example.guid, "", "", PADDING)


def group_choices(records: tf.data.Dataset, num_choices: int) -> tf.data.Dataset:
  """Unbatched pair records -> unbatched examples: ids [num_choices, seq], `choice_mask`
  [num_choices] (1 for real endings), `label_ids` (the right ending; 0 when unlabeled)."""

  @tf.autograph.experimental.do_not_convert
  def to_example(pairs):
    label_ids = pairs["label_ids"]
    return {"input_ids": pairs["input_ids"], "input_mask": pairs["input_mask"],
            "segment_ids": pairs["segment_ids"],
            CHOICE_MASK_KEY: tf.cast(label_ids != PAIR_LABELS.index(PADDING), tf.int32),
            "label_ids": tf.argmax(tf.cast(label_ids == PAIR_LABELS.index(RIGHT), tf.int32),
                                   output_type=tf.int32),
            training_loop.REAL_EXAMPLE_KEY: pairs[training_loop.REAL_EXAMPLE_KEY][0]}

  return records.batch(num_choices, drop_remainder=True).map(to_example)


# --------------------------------------------------------------------------------------------------
# Model, loss, outputs.


class BertMultipleChoice(heads.BertTaskModel):
  """BERT with one shared scoring head on the pooled output of every (context, ending) pair.

  Variables: `bert/...`, `cls/multiple_choice/output_weights` [1, H], `.../output_bias` [1].
  Called on a feature dict of int32 [B, num_choices, seq] ids and `choice_mask` [B, num_choices],
  it returns float32 logits [B, num_choices], -inf where `choice_mask` is 0.
  """

  def __init__(self, config: modeling.BertConfig, name: str = "bert_multiple_choice", **kwargs):
    # Dropout 0.1 on the pooled output, as the original's classifier head.
    super().__init__(config, 1, "pooled_output", 0.1, head_scope=HEAD_SCOPE, name=name, **kwargs)

  def call(self, features, training=False):
    """Scores each pair: rows of [B * num_choices, seq] pairs, or packed rows
    (`packing`) whose `sequence_starts` [B, num_choices, 2] locate each pair's [CLS]."""
    if packing.is_packed(features):
      pairs = features
    else:
      seq_length = tf.shape(features["input_ids"])[2]
      pairs = {name: tf.reshape(features[name], [-1, seq_length]) for name in export.ID_INPUTS}
    choice_mask = features[CHOICE_MASK_KEY]
    scores = tf.reshape(self.logits(pairs, training=training), tf.shape(choice_mask))
    return tf.where(choice_mask > 0, scores, tf.cast(-np.inf, scores.dtype))


def _finite(logits: tf.Tensor) -> tf.Tensor:
  """-inf -> the smallest float: softmax gives padded choices exactly 0 and a row without real
  choices (a padding row of an eval batch) stays finite."""
  return tf.maximum(logits, logits.dtype.min)


def probabilities(logits: tf.Tensor) -> tf.Tensor:
  """Softmax over the choices; 0 on padded (-inf) choices, all of a row without a choice too."""
  return tf.where(tf.math.is_finite(logits), tf.nn.softmax(_finite(logits), axis=-1), 0.0)


def predicted_choice(logits: tf.Tensor) -> tf.Tensor:
  """The index of the highest-scoring choice of each row (int32), -1 for a row without one
  (also where a request has no endings at all: a -inf column after the choices gives argmax a
  column to take)."""
  no_choice = tf.fill([tf.shape(logits)[0], 1], tf.constant(-np.inf, logits.dtype))
  return tf.where(tf.reduce_any(tf.math.is_finite(logits), axis=-1),
                  tf.argmax(tf.concat([logits, no_choice], axis=-1), axis=-1,
                            output_type=tf.int32), -1)


def per_example_loss(logits: tf.Tensor, label_ids: tf.Tensor) -> tf.Tensor:
  """Cross-entropy of the right ending against the softmax over the real choices."""
  return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label_ids, logits=_finite(logits))


def num_choices_of(examples: Sequence[MultipleChoiceExample]) -> int:
  """The largest number of endings of the examples: every example is padded to it."""
  return max(len(example.endings) for example in examples)


@dataclasses.dataclass
class MultipleChoiceTask(fine_tuning.Task):
  """SWAG-style multiple choice on files in data_dir (run_multiple_choice)."""
  kind = "multiple_choice"
  bert_config: modeling.BertConfig
  tokenizer: tokenization.FullTokenizer
  data_dir: Optional[str]
  output_dir: str
  max_seq_length: int
  train_file: str = "train.csv"
  dev_file: str = "val.csv"
  test_file: str = "test.csv"
  # Each example padded only to the length bucket of its longest (context, ending) pair.
  bucket_by_length: bool = True
  pack_sequences: bool = False  # packed rows in eval and predict (packing.py)
  skip_bad_rows: bool = False
  group_by_length: bool = False  # training batches of one length bucket (length_buckets.batch)

  def __post_init__(self):
    text_pairs.check_max_seq_length(self.max_seq_length, is_pair=True)
    text_pairs.check_model_takes_pairs(self.bert_config.type_vocab_size, is_pair=True)
    self.files = {"train": self.train_file, "dev": self.dev_file, "test": self.test_file}
    self.bad_rows = task_files.BadRows(self.skip_bad_rows)

  def build_model(self) -> BertMultipleChoice:
    model = BertMultipleChoice(self.bert_config)
    model.build()
    return model

  def loss(self, model, features, training):
    """Mean cross-entropy over real examples, and accuracy."""
    logits = model(features, training=training)
    weights = features[training_loop.REAL_EXAMPLE_KEY]
    loss = distribution.replica_weighted_mean(
        per_example_loss(logits, features["label_ids"]), weights)
    correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), features["label_ids"])
    return loss, {"accuracy": distribution.replica_weighted_mean(correct, weights)}

  def predict_outputs(self, model, features):
    logits = model(features, training=False)
    return {"probabilities": probabilities(logits),
            "per_example_loss": per_example_loss(logits, features["label_ids"]),
            "label_ids": features["label_ids"]}

  def read_split(self, split: str) -> list[MultipleChoiceExample]:
    """The examples of the train, dev or test file of data_dir."""
    task_files.check_data_dir(self.data_dir)
    return read_examples(os.path.join(self.data_dir, self.files[split]), split, self.bad_rows)

  def _examples_dataset(self, record_name: str, examples: Sequence[MultipleChoiceExample]
                        ) -> tuple[tf.data.Dataset, str]:
    """Caches the examples' pair records in output_dir/<record_name>.tf_record; returns the
    dataset of grouped examples and the file."""
    num_choices = num_choices_of(examples)
    path = os.path.join(self.output_dir, record_name + ".tf_record")
    text_pairs.cached_features_file(pair_examples(examples, num_choices), PAIR_LABELS,
                                    self.max_seq_length, self.tokenizer, path)
    return group_choices(text_pairs.features_dataset(path, self.max_seq_length), num_choices), path

  def train_data(self) -> fine_tuning.TrainData:
    examples = self.read_split("train")
    examples_dataset, path = self._examples_dataset("train", examples)
    return fine_tuning.TrainData(
        fine_tuning.training_dataset_fn(examples_dataset, len(examples), self.bucket_by_length,
                                        self.group_by_length),
        len(examples), [path], unit="questions")

  def _predict_split(self, strategy, model, record_name: str,
                     examples: Sequence[MultipleChoiceExample], batch_size: int) -> dict:
    dataset, path = self._examples_dataset(record_name, examples)
    return self.predict_dataset(strategy, model, dataset, batch_size, [path])

  def check_inputs(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """The dev file (labeled) and the test file, read as evaluation and prediction read them."""
    del do_train
    if do_eval:
      self._labeled_dev_examples()
    if do_predict:
      self.read_split("test")

  def _labeled_dev_examples(self) -> list[MultipleChoiceExample]:
    examples = self.read_split("dev")
    unlabeled = [example.guid for example in examples if example.label is None]
    if unlabeled:
      raise task_files.BadInputError(
          "%s: %d examples have no label (first: %s); `do_eval` needs labels" % (
              os.path.join(self.data_dir, self.files["dev"]), len(unlabeled), unlabeled[0]))
    return examples

  def evaluate(self, strategy, model, batch_size: int) -> dict:
    """eval_accuracy (right ending ranked first) and eval_loss over the dev file."""
    examples = self._labeled_dev_examples()
    outputs = self._predict_split(strategy, model, "eval", examples, batch_size)
    loss = float(np.mean(outputs["per_example_loss"]))
    accuracy = float(np.mean(outputs["probabilities"].argmax(axis=1) == outputs["label_ids"]))
    return {"eval_accuracy": accuracy, "eval_loss": loss, "loss": loss}

  def predict(self, strategy, model, batch_size: int) -> str:
    """Writes test_results.tsv: per test example, in input order, the probability of each of its
    endings (tab-separated; as many values as the example has endings)."""
    examples = self.read_split("test")
    outputs = self._predict_split(strategy, model, "predict", examples, batch_size)
    rows = [row[:len(example.endings)]
            for row, example in zip(outputs["probabilities"], examples)]
    text_pairs.write_test_results(os.path.join(self.output_dir, "test_results.tsv"), rows)
    return "predicted %d examples" % len(rows)

  def serving_module(self, model) -> "MultipleChoiceServing":
    return MultipleChoiceServing(in_graph_tokenization.BertInputEncoder.for_tokenizer(
        self.tokenizer, self.max_seq_length, dynamic_padding=True), model)


class MultipleChoiceServing(export.ServingModule):
  """The export (see export.py).

  `serving_default(context: [B] string, endings: [B, E] string)`: "" marks a missing ending (for
  rows with fewer endings), as an empty ending of a test file does; each (context, ending) pair is
  tokenized in the graph as do_predict's features. Put a question (SWAG's sent2) at the start of
  every ending that is there, as do_predict does (a missing one stays ""). `token_ids(input_ids,
  input_mask, segment_ids: int32 [B, E, T])`: a choice whose input_mask is all 0 is missing. Both
  return `probabilities` [B, E] (0 for missing endings) and `label` [B] (the index of the most
  probable ending; -1 for a row without any ending, whose probabilities are all 0).
  """

  text_inputs = {"context": 1, "endings": 2}
  ids_rank = 3

  def __init__(self, encoder: tf.Module, model: keras.Model):
    super().__init__(encoder, model.config)
    self.model = model

  def _outputs(self, features: dict) -> dict:
    """The outputs of [B, E, T] id features and their `choice_mask` [B, E]. A missing ending's
    pair is not computed: its mask is cleared, so the packed rows hold none of its tokens."""
    choice_mask = features[CHOICE_MASK_KEY]
    features = dict(features, input_mask=features["input_mask"] * choice_mask[:, :, tf.newaxis])
    logits = self.model(self.model_features(features), training=False)
    return {"probabilities": probabilities(logits), "label": predicted_choice(logits)}

  def text_outputs(self, texts):
    context, endings = texts["context"], texts["endings"]
    shape = tf.shape(endings)
    ids = self.encoder(tf.repeat(context, shape[1]), tf.reshape(endings, [-1]))
    features = {name: tf.reshape(tf.cast(ids[name], tf.int32), [shape[0], shape[1], -1])
                for name in export.ID_INPUTS}
    features[CHOICE_MASK_KEY] = tf.cast(tf.not_equal(endings, ""), tf.int32)
    return self._outputs(features)

  def ids_outputs(self, features):
    features = dict(features, **{CHOICE_MASK_KEY: tf.cast(
        tf.reduce_any(features["input_mask"] != 0, axis=-1), tf.int32)})
    return self._outputs(features)
