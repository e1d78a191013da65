"""Length bucketing (issue 18): the bucketed path gives the padded path's results, in input order.

Every task runs the same tiny random model twice over the same generated data, once padded to
max_seq_length as the original and once bucketed, and the outputs the users read are compared.
"""
import json
import os
import random

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

import classifier
import classifier_data
import evaluation
import fine_tuning
import length_buckets
import modeling
import squad
import squad_data
import tagging
import text_pairs
import tokenization
import training_loop

pytestmark = pytest.mark.slow

MAX_SEQ_LENGTH = 64
WORDS = ["w%d" % i for i in range(40)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
CONFIG = modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=MAX_SEQ_LENGTH)


@pytest.fixture
def tokenizer(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def sentences(count, seed, longest=80):
  """Word lists of very different lengths (1 to `longest` words), so every bucket occurs."""
  rng = random.Random(seed)
  return [[rng.choice(WORDS) for _ in range(rng.choice([1, 3, 8, 13, 20, 29, 40, longest]))]
          for _ in range(count)]


def by_bucket(length):
  return min(b for b in length_buckets.padded_length_buckets(MAX_SEQ_LENGTH) if b >= length)


def test_bucket_lengths():
  short = [4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64]
  assert length_buckets.padded_length_buckets(128) == short + [96, 128]
  assert length_buckets.padded_length_buckets(384) == short + [96, 128, 160, 192, 224, 256, 288,
                                                               320, 352, 384]
  assert length_buckets.padded_length_buckets(100) == short + [96, 100]
  assert length_buckets.padded_length_buckets(72) == short + [72]
  assert length_buckets.padded_length_buckets(64) == short
  assert length_buckets.padded_length_buckets(36) == [4, 8, 12, 16, 20, 24, 28, 32, 36]
  assert length_buckets.padded_length_buckets(16) == [4, 8, 12, 16]
  assert length_buckets.padded_length_buckets(10) == [4, 8, 10]
  assert length_buckets.padded_length_buckets(4) == [4]


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_batches_hold_one_bucket_each_and_every_example_once(drop_remainder):
  lengths = [1, 17, 64, 5, 16, 33, 6, 31, 40, 63, 8, 13, 14, 7, 50]
  masks = np.array([[1] * n + [0] * (MAX_SEQ_LENGTH - n) for n in lengths], np.int32)
  ids = masks * np.arange(1, MAX_SEQ_LENGTH + 1)
  dataset = tf.data.Dataset.from_tensor_slices(
      {"input_ids": ids, "input_mask": masks, "row": np.arange(len(lengths)),
       "label_ids": np.arange(len(lengths)) * 10})
  seen = []
  for batch in length_buckets.batch_by_length(dataset, 3, drop_remainder):
    rows = batch["row"].numpy()
    width = batch["input_ids"].shape[1]
    assert batch["input_mask"].shape[1] == width
    assert len(rows) == 3 or not drop_remainder
    for position, row in enumerate(rows):
      assert by_bucket(lengths[row]) == width  # the smallest bucket holding the row
      np.testing.assert_array_equal(batch["input_ids"][position], ids[row, :width])
      assert batch["label_ids"][position] == row * 10  # not per position: unchanged
    seen.extend(rows.tolist())
  assert len(seen) == len(set(seen))
  # Buckets 4: 1 row, 8: 4, 16: 3, 20: 1, 32: 1, 40: 2, 56: 1, 64: 2 -> full batches only in 8, 16.
  if drop_remainder:
    assert len(seen) == 6
  else:
    assert sorted(seen) == list(range(len(lengths)))


def test_default_training_batches_are_the_originals_cut_to_their_longest_row():
  """Without grouping, the batches hold what `Dataset.batch` gives (same rows, same order: their
  composition does not follow length), each as wide as the bucket of its longest row."""
  lengths = [1, 17, 64, 5, 16, 33, 6, 31, 40, 63, 8, 13, 14, 7, 50, 3]
  masks = np.array([[1] * n + [0] * (MAX_SEQ_LENGTH - n) for n in lengths], np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(
      {"input_ids": masks * 7, "input_mask": masks, "row": np.arange(len(lengths))})
  batches = list(length_buckets.batch(dataset, 4, True, bucket_by_length=True,
                                      group_by_length=False))
  # Rows 0-3: longest 64 -> 64; rows 4-7: 33 -> 40; rows 8-11: 63 -> 64; rows 12-15: 50 -> 56.
  assert [batch["input_ids"].shape[1] for batch in batches] == [64, 40, 64, 56]
  for number, batch in enumerate(batches):
    rows = list(range(4 * number, 4 * number + 4))
    assert batch["row"].numpy().tolist() == rows
    width = batch["input_ids"].shape[1]
    np.testing.assert_array_equal(batch["input_mask"], masks[rows, :width])
    assert masks[rows, width:].sum() == 0  # Nothing real was cut.
  grouped = list(length_buckets.batch(dataset, 4, True, bucket_by_length=True,
                                      group_by_length=True))
  assert all(len({by_bucket(lengths[row]) for row in batch["row"].numpy()}) == 1
             for batch in grouped)


def test_flag_off_gives_the_original_fixed_shapes():
  dataset = tf.data.Dataset.from_tensor_slices({"input_mask": np.ones([5, 64], np.int32)[:, :]})
  dataset = dataset.map(lambda f: {"input_mask": f["input_mask"] * tf.constant([1] * 3 + [0] * 61)})
  off = next(iter(length_buckets.batch(dataset, 4, True, bucket_by_length=False)))
  on = next(iter(length_buckets.batch(dataset, 4, True, bucket_by_length=True)))
  assert off["input_mask"].shape == (4, 64)
  assert on["input_mask"].shape == (4, 4)


@pytest.mark.parametrize("argv, expected", [([], True), (["--bucket_by_length=false"], False),
                                            (["--use_tpu"], False)])
def test_flag_defaults_to_true_and_is_off_on_tpus(argv, expected):
  import cli  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  cli.define_fine_tuning_flags(flag_values=flag_values)
  flag_values(["run_classifier.py"] + argv)
  assert cli.bucket_by_length(flag_values) is expected
  assert flag_values.group_by_length is False


# ------------------------------------------------------------------------------------------------
# The tasks.


def write_tsv(path, rows):
  with open(path, "w") as writer:
    writer.write("text_a\tlabel\n" + "".join("%s\t%s\n" % row for row in rows))


def classifier_task(tokenizer, tmp_path, name, bucket, config=CONFIG, group=False):
  data_dir = tmp_path / "data"
  if not data_dir.exists():
    data_dir.mkdir()
    for split, seed in (("train", 1), ("dev", 2), ("test", 3)):
      write_tsv(data_dir / (split + ".tsv"),
                [(" ".join(words), "pos" if len(words) % 2 else "neg")
                 for words in sentences(23, seed)])
  output_dir = str(tmp_path / name)
  os.makedirs(output_dir)  # As fine_tuning.run makes it, before the features are cached there.
  processor = classifier_data.get_processor("generic")
  processor.load_or_create_label_list(str(data_dir), output_dir)
  return classifier.ClassifierTask(config, processor, tokenizer, str(data_dir), output_dir,
                                   MAX_SEQ_LENGTH, bucket_by_length=bucket, group_by_length=group)


def test_classifier_bucketed_logits_metrics_and_test_results_equal_padded(tokenizer, tmp_path):
  padded = classifier_task(tokenizer, tmp_path, "padded", False)
  bucketed = classifier_task(tokenizer, tmp_path, "bucketed", True)
  model = padded.build_model()
  strategy = tf.distribute.get_strategy()
  dev = padded.processor.get_dev_examples(padded.data_dir)
  path = padded._features_file("eval", dev)  # pylint: disable=protected-access
  outputs = {}
  for bucket in (False, True):
    outputs[bucket] = evaluation.predict(
        strategy, model, padded.predict_outputs,
        text_pairs.features_dataset(path, MAX_SEQ_LENGTH), 4, bucket_by_length=bucket)
  np.testing.assert_allclose(outputs[True]["logits"], outputs[False]["logits"], atol=1e-5)
  labels = [padded.processor.get_labels().index(example.label) for example in dev]
  np.testing.assert_array_equal(outputs[True]["label_ids"], labels)  # input order
  results = [task.evaluate(strategy, model, 4) for task in (padded, bucketed)]
  assert results[0].keys() == results[1].keys()
  for key in results[0]:
    assert results[1][key] == pytest.approx(results[0][key], abs=1e-5)
  for task in (padded, bucketed):
    task.predict(strategy, model, 4)
  tables = [np.loadtxt(os.path.join(task.output_dir, "test_results.tsv"))
            for task in (padded, bucketed)]
  assert tables[0].shape == (23, 2)
  np.testing.assert_allclose(tables[1], tables[0], atol=1e-5)


def test_classifier_trains_on_bucketed_batches(tokenizer, tmp_path):
  task = classifier_task(tokenizer, tmp_path, "train", True)
  data = task.train_data()
  widths = {batch["input_ids"].shape[1] for batch in data.dataset_fn(4, 7).take(12)}
  assert widths <= {4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64} and len(widths) > 1
  config = training_loop.TrainConfig(output_dir=task.output_dir, num_train_steps=6,
                                     num_warmup_steps=0, train_batch_size=4,
                                     learning_rate=1e-3, iterations_per_loop=3)
  summary = fine_tuning.run(task, tf.distribute.get_strategy(), config, do_train=True,
                            do_eval=True, eval_batch_size=4)
  assert "trained to step 6" in summary[0]
  with open(os.path.join(task.output_dir, "eval_results.txt")) as reader:
    assert "global_step = 6" in reader.read()


def test_default_training_learns_what_the_padded_batches_learn(tokenizer, tmp_path):
  """Dropout off: training on the original's batches cut to buckets ends with the padded path's
  weights (to float rounding); grouping by length, which changes the batches, does not."""
  config = modeling.BertConfig(**dict(CONFIG.to_dict(), hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0))
  weights = {}
  for name, bucket, group in (("padded", False, False), ("cut", True, False),
                              ("grouped", True, True)):
    task = classifier_task(tokenizer, tmp_path, name, bucket, config, group)
    train_config = training_loop.TrainConfig(output_dir=task.output_dir, num_train_steps=8,
                                             num_warmup_steps=0, train_batch_size=4,
                                             learning_rate=1e-3, iterations_per_loop=4,
                                             optimizer="adamw")
    result = training_loop.train(tf.distribute.get_strategy(), task.build_model, task.loss,
                                 task.train_data().dataset_fn, train_config)
    weights[name] = {v.path: v.numpy() for v in result.model.weights}
  largest = {name: max(np.abs(weights[name][path] - weights["padded"][path]).max()
                       for path in weights["padded"]) for name in ("cut", "grouped")}
  assert largest["cut"] < 1e-5
  assert largest["grouped"] > 1e-3


def test_tagging_bucketed_tags_and_loss_equal_padded(tokenizer, tmp_path):
  data_dir = tmp_path / "conll"
  data_dir.mkdir()
  rng = random.Random(5)
  for split, seed in (("train", 1), ("dev", 2), ("test", 3)):
    with open(data_dir / (split + ".txt"), "w") as writer:
      for words in sentences(15, seed, longest=90):  # 90 words: split into two windows
        writer.write("".join("%s %s\n" % (w, rng.choice(["O", "B-X", "I-X"])) for w in words))
        writer.write("\n")
  tasks = [tagging.TaggingTask(CONFIG, tokenizer, str(data_dir), str(tmp_path / name),
                               MAX_SEQ_LENGTH, tag_list=["O", "B-X", "I-X"],
                               bucket_by_length=bucket)
           for name, bucket in (("padded", False), ("bucketed", True))]
  for task in tasks:
    os.makedirs(task.output_dir)
  model = tasks[0].build_model()
  strategy = tf.distribute.get_strategy()
  features = tasks[0]._features(tasks[0]._read("eval"))  # pylint: disable=protected-access
  outputs = [evaluation.predict(strategy, model, tasks[0].predict_outputs,
                                tagging.features_dataset(features), 4, bucket_by_length=b)
             for b in (False, True)]
  assert outputs[0]["tag_ids"].shape[1] == MAX_SEQ_LENGTH
  for row, feature in enumerate(features):
    real = int(np.sum(feature.input_mask))
    np.testing.assert_array_equal(outputs[1]["tag_ids"][row, :real],
                                  outputs[0]["tag_ids"][row, :real])
  np.testing.assert_allclose(outputs[1]["loss_sum"], outputs[0]["loss_sum"], atol=1e-4)
  results = [task.evaluate(strategy, model, 4) for task in tasks]
  assert results[1] == pytest.approx(results[0], abs=1e-5)
  files = [open(os.path.join(task.output_dir, "eval_predictions.txt")).read() for task in tasks]
  assert files[0] == files[1]


def squad_file(path, seed):
  rng = random.Random(seed)
  paragraphs = []
  for number, words in enumerate(sentences(12, seed, longest=150)):
    question = " ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 4, 9])))
    paragraphs.append({"context": " ".join(words), "qas": [
        {"id": "q%d" % number, "question": question,
         "answers": [{"text": words[0], "answer_start": 0}]}]})
  with open(path, "w") as writer:
    json.dump({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}, writer)


def test_squad_bucketed_logits_and_predictions(tokenizer, tmp_path):
  """Logits equal below each window's bucket length; predictions.json equals the original's
  n-best ranking over those positions (padding logits past the bucket do not exist)."""
  predict_file = str(tmp_path / "dev.json")
  squad_file(predict_file, 4)
  options = squad_data.SquadOptions(max_seq_length=MAX_SEQ_LENGTH, doc_stride=24,
                                    max_query_length=16, n_best_size=5)
  tasks = [squad.SquadTask(CONFIG, tokenizer, options, str(tmp_path / name),
                           predict_file=predict_file, bucket_by_length=bucket)
           for name, bucket in (("padded", False), ("bucketed", True))]
  model = tasks[0].build_model()
  strategy = tf.distribute.get_strategy()
  for task in tasks:
    os.makedirs(task.output_dir)
    task.predict(strategy, model, 4)
  record = os.path.join(tasks[0].output_dir, "eval.tf_record")
  outputs = [evaluation.predict(strategy, model, tasks[0].predict_outputs,
                                squad_data.input_dataset(record, MAX_SEQ_LENGTH, False), 4,
                                bucket_by_length=b) for b in (False, True)]
  np.testing.assert_array_equal(outputs[1]["unique_ids"], outputs[0]["unique_ids"])  # order
  masks = [f["input_mask"].numpy() for f in squad_data.input_dataset(record, MAX_SEQ_LENGTH, False)]
  assert len({by_bucket(int(m.sum())) for m in masks}) > 1
  expected = {}
  for key in ("start_logits", "end_logits"):
    width = [by_bucket(int(m.sum())) for m in masks]
    for row, logits in enumerate(outputs[0][key]):
      np.testing.assert_allclose(outputs[1][key][row, :width[row]], logits[:width[row]],
                                 atol=1e-5)
      assert np.all(outputs[1][key][row, width[row]:] == -np.inf)
    # The padded path's logits, with the positions past each bucket removed as bucketing does.
    expected[key] = [np.where(np.arange(MAX_SEQ_LENGTH) < w, logits, -np.inf)
                     for w, logits in zip(width, outputs[0][key])]
  data = squad_data.load_squad_json(predict_file)
  examples, _ = squad_data.examples_from_data(data, False, False, predict_file)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, MAX_SEQ_LENGTH,
                                                          24, 16, is_training=False))
  results = [squad.RawResult(int(u), s.tolist(), e.tolist()) for u, s, e in zip(
      outputs[0]["unique_ids"], expected["start_logits"], expected["end_logits"])]
  predictions, _, _ = squad.compute_predictions(examples, features, results, 5, 30, True, False,
                                                0.0)
  written = json.load(open(os.path.join(tasks[1].output_dir, "predictions.json")))
  assert written == predictions
  assert list(written) == ["q%d" % i for i in range(12)]  # input order


def test_extract_features_bucketed_json_lines_equal_padded_in_input_order(tokenizer, tmp_path):
  import feature_extraction  # pylint: disable=g-import-not-at-top
  bert = modeling.BertModel(CONFIG, name="bert")
  bert.build()
  extractor = feature_extraction.FeatureExtractor(bert, [-1, 0])
  lines = [" ".join(words) + (" ||| w1 w2" if len(words) % 3 == 0 else "")
           for words in sentences(40, 9)]
  records = {}
  for bucket in (False, True):
    batches = list(feature_extraction.read_batches(lines, tokenizer, MAX_SEQ_LENGTH, 3,
                                                 bucket_by_length=bucket))
    for batch in batches:  # Padded to the multiple of 4 (to 32), else of 8, holding its longest row.
      longest = batch.input_mask.sum(axis=1).max()
      step = 4 if longest <= 32 else 8
      assert batch.input_ids.shape[1] == (-(-longest // step) * step if bucket else MAX_SEQ_LENGTH)
    widths = {batch.input_ids.shape[1] for batch in batches}
    assert len(widths) > 1 if bucket else widths == {MAX_SEQ_LENGTH}
    output_file = str(tmp_path / ("bucketed.jsonl" if bucket else "padded.jsonl"))
    assert feature_extraction.extract(extractor, batches, output_file, "jsonl") == len(lines)
    with open(output_file) as reader:
      records[bucket] = [json.loads(line) for line in reader]
  assert [r["linex_index"] for r in records[True]] == list(range(len(lines)))
  for padded, bucketed in zip(records[False], records[True]):
    assert [f["token"] for f in bucketed["features"]] == [f["token"] for f in padded["features"]]
    for a, b in zip(padded["features"], bucketed["features"]):
      for layer_a, layer_b in zip(a["layers"], b["layers"]):
        np.testing.assert_allclose(layer_b["values"], layer_a["values"], atol=1e-5)
  output_dir = str(tmp_path / "npz")
  feature_extraction.extract(extractor, feature_extraction.read_batches(
      lines, tokenizer, MAX_SEQ_LENGTH, 3, bucket_by_length=True), output_dir, "npz")
  rows = []
  for name in sorted(os.listdir(output_dir)):
    with np.load(os.path.join(output_dir, name)) as arrays:
      rows.extend(arrays["linex_index"].tolist())
  assert sorted(rows) == list(range(len(lines)))
