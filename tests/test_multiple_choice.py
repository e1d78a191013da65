"""Multiple choice (multiple_choice.py, run_multiple_choice.py): SWAG CSV and JSON Lines reading,
the shared scoring head, masked probabilities, a CLI run that learns a generated rule, and the
export served through TF's C++ loader (tests/cpp_serving_client.py), as TF Serving serves it."""

import json
import os
import random
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from conftest import write_model_files
import checkpoints
import distribution
import evaluation
import length_buckets
import modeling
import multiple_choice
import run_multiple_choice
import task_files
import tokenization
from test_serving import CLIENT, assert_same, warmup_requests

pytestmark = pytest.mark.slow

FLAGS = flags.FLAGS
run_multiple_choice.define_flags()

SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2," \
              "ending3,label"
WORDS = "the a cat dog sat ran big small red blue happy sad day night".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", ",", "."] + WORDS


def tiny_config(max_positions: int = 64) -> modeling.BertConfig:
  return modeling.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=max_positions, initializer_range=0.3)


def write(path, text: str) -> str:
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


# --------------------------------------------------------------------------------------------------
# Reading.


def test_swag_csv_with_and_without_labels(tmp_path):
  train = write(tmp_path / "train.csv", SWAG_HEADER + "\n"
                '0,lsmdc1,19,"Someone, smiling, walks in. He","Someone, smiling, walks in.",He,'
                'gold,sits.,"runs, fast.",eats.,sleeps.,1\n'
                "1,anetv,2,A man plays.,A man plays.,The crowd,gen,cheers.,boos.,leaves.,sings.,3\n")
  examples = multiple_choice.read_examples(train, "train")
  assert [(e.context, e.question, e.endings, e.label) for e in examples] == [
      ("Someone, smiling, walks in.", "He", ["sits.", "runs, fast.", "eats.", "sleeps."], 1),
      ("A man plays.", "The crowd", ["cheers.", "boos.", "leaves.", "sings."], 3)]
  # The paper's (and Hugging Face's) pairs: sent1, then sent2 + " " + ending.
  assert examples[0].second_texts()[1] == "He runs, fast."
  test = write(tmp_path / "test.csv", SWAG_HEADER.rsplit(",", 1)[0].lstrip(",") + "\n"
               "lsmdc,7,X y,X y,She,gold,a.,b.,c.,d.\n")
  (example,) = multiple_choice.read_examples(test, "test")
  assert example.label is None and example.second_texts() == ["She a.", "She b.", "She c.",
                                                              "She d."]


@pytest.mark.parametrize("rows, message", [
    ("0,v,1,s,c,q,g,a,b,c,d,1\n1,v,1,s,c,q,g,a,b,c,1\n", r"train\.csv:3: 11 columns, expected 12"),
    ("0,v,1,s,c,q,g,a,b,c,d,4\n", r"train\.csv:2: label 4 is not an index of the 4 endings"),
    ("0,v,1,s,c,q,g,a,b,c,d,x\n", r"train\.csv:2: label 'x' is not an ending index"),
    ("0,v,1,s,c,q,g,a,,c,d,1\n", r"train\.csv:2: label 1 is an empty ending"),
    ("0,v,1,s,c,q,g,a,b,c,d,1\n\n", r"train\.csv:3: an empty line: 1 columns, expected 12"),
])
def test_bad_swag_rows_name_file_and_line(tmp_path, rows, message):
  path = write(tmp_path / "train.csv", SWAG_HEADER + "\n" + rows)
  with pytest.raises(task_files.BadInputError, match=message):
    multiple_choice.read_examples(path, "train")


def test_skip_bad_rows_skips_and_counts_them_per_file(tmp_path):
  csv_path = write(tmp_path / "train.csv", SWAG_HEADER + "\n0,v,1,s,c1,q,g,a,b,c,d,1\n"
                   "1,v,1,s,c,q,g,a,b,c,1\n2,v,1,s,c3,q,g,a,b,c,d,3\n3,v,1,s,c,q,g,a,b,c,d,x\n")
  jsonl_path = write(tmp_path / "dev.jsonl", '{"context": "c", "endings": []}\n'
                     '{"context": "ok", "endings": ["a", "b"], "label": 1}\n')
  bad_rows = task_files.BadRows(skip=True)
  first, second = multiple_choice.read_examples(csv_path, "train", bad_rows)
  (only,) = multiple_choice.read_examples(jsonl_path, "dev", bad_rows)
  assert [(e.guid, e.context, e.label) for e in (first, second, only)] == [
      ("train-0", "c1", 1), ("train-1", "c3", 3), ("dev-0", "ok", 1)]
  assert bad_rows.skipped == {csv_path: 2, jsonl_path: 1}
  multiple_choice.read_examples(csv_path, "train", bad_rows)  # Read again (as each evaluation):
  assert bad_rows.skipped == {csv_path: 2, jsonl_path: 1}  # its rows count once.
  all_bad = write(tmp_path / "val.jsonl", '["c"]\n{"endings": ["a"]}\n')
  with pytest.raises(task_files.BadInputError,
                     match=r"val\.jsonl: no examples in the dev file \(2 bad rows skipped\)"):
    multiple_choice.read_examples(all_bad, "dev", bad_rows)
  # test_results.tsv has one line per test row: a bad one stops the run even when skipping.
  with pytest.raises(task_files.BadInputError,
                     match=r"test\.jsonl:1: .* never skipped, not even with `skip_bad_rows`"):
    multiple_choice.read_examples(write(tmp_path / "test.jsonl", '["c"]\n'),
                                  "test", bad_rows)
  # Without skipping, the first bad row stops the run and the message says how to skip it.
  with pytest.raises(task_files.BadInputError,
                     match=r"train\.csv:3: 11 columns, expected 12 \(pass `skip_bad_rows`"):
    multiple_choice.read_examples(csv_path, "train")


def test_swag_header_without_endings_is_named(tmp_path):
  path = write(tmp_path / "val.csv", "sent1,sent2,ending0,label\nA,B,c,0\n")
  with pytest.raises(task_files.BadInputError,
                     match=r"val\.csv:1: no column ending1, ending2, ending3 in the header"):
    multiple_choice.read_examples(path)


def test_jsonl_any_number_of_endings_question_and_label_optional(tmp_path):
  path = write(tmp_path / "dev.jsonl",
               '{"context": "The sky", "endings": ["is blue", "is green"], "label": 0}\n\n'
               '{"context": "Q?", "question": "It", "endings": ["a", "b", "c", "d", "e"]}\n')
  first, second = multiple_choice.read_examples(path, "dev")
  assert (first.second_texts(), first.label) == (["is blue", "is green"], 0)
  assert (second.second_texts(), second.label) == (["It a", "It b", "It c", "It d", "It e"], None)


@pytest.mark.parametrize("line, message", [
    ('{"context": "c", "endings": ["a"]', r"invalid JSON"),
    ('["c", ["a"]]', r"a JSON object is expected, got list"),
    ('{"context": "c", "endings": []}', r'"endings" must be a non-empty list of strings'),
    ('{"context": "c", "endings": ["a", 2]}', r'"endings" must be a non-empty list of strings'),
    ('{"endings": ["a"]}', r'"context" must be a string'),
    ('{"context": "c", "endings": ["a", "b"], "label": 2}', r"label 2 is not an index of the 2"),
    ('{"context": "c", "endings": ["a", "b"], "label": true}', r"label True is not an ending"),
    ('{"context": "c", "endings": ["a", ""], "label": 1}', r"label 1 is an empty ending"),
    ('{"context": "c", "endings": ["", ""], "label": 0}', r"every ending is empty"),
])
def test_bad_jsonl_lines_name_file_and_line(tmp_path, line, message):
  path = write(tmp_path / "train.jsonl", '{"context": "c", "endings": ["a"], "label": 0}\n\n' +
               line + "\n")
  with pytest.raises(task_files.BadInputError, match=r"train\.jsonl:3: " + message):
    multiple_choice.read_examples(path)


def test_unknown_extension_and_missing_file_are_named(tmp_path):
  with pytest.raises(task_files.BadInputError, match=r"x\.tsv: unknown format"):
    multiple_choice.read_examples(write(tmp_path / "x.tsv", "a\tb\n"))
  with pytest.raises(task_files.BadInputError, match=r"absent\.csv: no such file"):
    multiple_choice.read_examples(str(tmp_path / "absent.csv"), "test")


def test_an_empty_ending_is_a_missing_choice(tmp_path):
  """SWAG's four ending columns with some left empty: the empty ones are no choices (padding
  pairs, as the rows with fewer endings get), whatever sent2 says."""
  path = write(tmp_path / "test.csv", SWAG_HEADER.rsplit(",", 1)[0].lstrip(",") + "\n"
               "lsmdc,7,X y,X y,She,gold,a.,,c.,\n")
  (example,) = multiple_choice.read_examples(path, "test")
  pairs = multiple_choice.pair_examples([example], 5)
  assert [pair.label for pair in pairs] == ["wrong", "padding", "wrong", "padding", "padding"]
  assert [pair.text_b for pair in pairs if pair.label == "wrong"] == ["She a.", "She c."]


# --------------------------------------------------------------------------------------------------
# Model.


def test_head_is_one_shared_score_under_cls_multiple_choice(tmp_path):
  model = multiple_choice.BertMultipleChoice(tiny_config())
  model.build()
  names = checkpoints.checkpoint_variables(model)
  head = {name: tuple(v.shape) for name, v in names.items() if not name.startswith("bert/")}
  assert head == {"cls/multiple_choice/output_weights": (1, 32),
                  "cls/multiple_choice/output_bias": (1,)}
  prefix = str(tmp_path / "model.ckpt")
  checkpoints.save_checkpoint(model, prefix)
  saved = dict(tf.train.list_variables(prefix))
  assert saved["cls/multiple_choice/output_weights"] == [1, 32]
  assert "bert/pooler/dense/kernel" in saved


def test_probabilities_sum_to_one_over_real_endings_and_zero_on_padding():
  rng = np.random.default_rng(0)
  model = multiple_choice.BertMultipleChoice(tiny_config())
  model.build()
  batch, choices, length = 3, 4, 10
  input_ids = rng.integers(5, len(VOCAB), size=(batch, choices, length)).astype(np.int32)
  input_mask = np.ones_like(input_ids)
  input_mask[..., 7:] = 0
  segment_ids = np.zeros_like(input_ids)
  segment_ids[..., 4:7] = 1
  choice_mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.int32)
  features = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
              multiple_choice.CHOICE_MASK_KEY: choice_mask}
  logits = model(features).numpy()
  probabilities = multiple_choice.probabilities(model(features)).numpy()
  # NumPy: pooled output of each pair, times the shared head, softmax over the real choices.
  pooled = model.bert({k: v.reshape(-1, length) for k, v in features.items()
                       if k != multiple_choice.CHOICE_MASK_KEY})["pooled_output"].numpy()
  scores = (pooled @ model.output_weights.numpy().T + model.output_bias.numpy()).reshape(
      batch, choices)
  expected = np.where(choice_mask > 0, np.exp(scores - scores.max(1, keepdims=True)), 0.0)
  expected /= expected.sum(1, keepdims=True)
  np.testing.assert_allclose(probabilities, expected, rtol=1e-5, atol=1e-6)
  assert np.all(probabilities[choice_mask == 0] == 0.0)
  np.testing.assert_allclose(probabilities.sum(1), 1.0, rtol=1e-6)
  assert np.all(np.isneginf(logits[choice_mask == 0]))
  losses = multiple_choice.per_example_loss(tf.constant(logits), tf.constant([3, 1, 0])).numpy()
  np.testing.assert_allclose(losses, -np.log(expected[[0, 1, 2], [3, 1, 0]]), rtol=1e-5)
  # A padding row of an eval batch (no real choice) stays finite.
  empty = multiple_choice.probabilities(tf.constant([[-np.inf, -np.inf]], tf.float32)).numpy()
  assert np.all(np.isfinite(empty))


def bucket_of(length: int, max_seq_length: int) -> int:
  """The smallest of 4, 8, ..., 32, 40, ..., 64, then max_seq_length that holds `length`."""
  for bucket in list(range(4, 33, 4)) + list(range(40, 65, 8)):
    if length <= bucket < max_seq_length:
      return bucket
  return max_seq_length


def test_bucketed_examples_padded_to_their_longest_choice_give_the_padded_probabilities(tmp_path):
  """Each example is cut to the bucket of its longest (context, ending) pair; probabilities equal
  full padding's, in input order."""
  rng = random.Random(7)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  records = [{"context": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))),
              "endings": [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
                          for _ in range(rng.randint(2, 4))], "label": 0} for _ in range(23)]
  write_jsonl(data_dir / "dev.jsonl", records)
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  tokenizer = tokenization.FullTokenizer(vocab_file, True)
  max_seq_length = 48
  # [CLS] context [SEP] ending [SEP]: every word of WORDS is one token; nothing is truncated.
  longest = [max(len(r["context"].split()) + len(e.split()) + 3 for e in r["endings"])
             for r in records]
  assert max(longest) <= max_seq_length
  tf.keras.utils.set_random_seed(3)
  model = None
  outputs = {}
  for bucket in (False, True):
    task = multiple_choice.MultipleChoiceTask(
        tiny_config(), tokenizer, str(data_dir), str(tmp_path / str(bucket)), max_seq_length,
        dev_file="dev.jsonl", bucket_by_length=bucket)
    os.makedirs(task.output_dir)
    model = model or task.build_model()
    examples = task.read_split("dev")
    dataset, _ = task._examples_dataset("eval", examples)  # pylint: disable=protected-access
    batches = list(length_buckets.batch(dataset, 4, False, bucket))
    assert sorted(len(b["label_ids"]) for b in batches)[-1] == 4
    for batch in batches:
      mask = batch["input_mask"].numpy()
      widths = {bucket_of(int(length), max_seq_length) for length in mask.sum(axis=2).max(axis=1)}
      assert widths == {mask.shape[2]} if bucket else mask.shape[2] == max_seq_length
    outputs[bucket] = task._predict_split(  # pylint: disable=protected-access
        tf.distribute.get_strategy(), model, "eval", examples, 4)
  assert {bucket_of(n, max_seq_length) for n in longest} != {max_seq_length}  # several widths
  np.testing.assert_allclose(outputs[True]["probabilities"], outputs[False]["probabilities"],
                             atol=1e-5)
  np.testing.assert_allclose(outputs[True]["per_example_loss"],
                             outputs[False]["per_example_loss"], rtol=1e-5, atol=1e-6)
  assert [len(r["endings"]) for r in records] == [
      int(np.sum(row > 0)) for row in outputs[True]["probabilities"]]


# --------------------------------------------------------------------------------------------------
# The CLI.


def marker_example(rng: random.Random, num_endings: int, labeled: bool = True) -> dict:
  """The right ending holds "good", the others "bad"; context and filler words are random."""
  def text(marker=None):
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
    if marker:
      words.insert(rng.randint(0, len(words)), marker)
    return " ".join(words)
  label = rng.randrange(num_endings)
  record = {"context": text(), "endings": [text("good" if i == label else "bad")
                                           for i in range(num_endings)]}
  if labeled:
    record["label"] = label
  return record


def write_jsonl(path, records) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(json.dumps(record) + "\n" for record in records)


def run(**flag_values) -> None:
  FLAGS.unparse_flags()
  FLAGS(["run_multiple_choice.py"] + ["--%s=%s" % item for item in flag_values.items()])
  run_multiple_choice.main([])


def test_cli_learns_the_marker_rule_and_writes_results(tmp_path):
  rng = random.Random(4)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  # 2 to 5 endings per question: every split is padded to its largest number of endings.
  write_jsonl(data_dir / "train.jsonl", [marker_example(rng, rng.randint(2, 5))
                                         for _ in range(240)])
  write_jsonl(data_dir / "dev.jsonl", [marker_example(rng, rng.randint(2, 5)) for _ in range(60)])
  test_records = [marker_example(rng, n, labeled=False) for n in (3, 5, 2, 4, 4, 3, 2)]
  write_jsonl(data_dir / "test.jsonl", test_records)
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  output_dir = str(tmp_path / "out")
  run(vocab_file=vocab_file, bert_config_file=config_file, data_dir=str(data_dir),
      train_file="train.jsonl", dev_file="dev.jsonl", test_file="test.jsonl",
      output_dir=output_dir, do_train=True, do_eval=True, do_predict=True, max_seq_length=16,
      train_batch_size=16, learning_rate=1e-3, num_train_epochs=3.0, iterations_per_loop=15)
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    results = {k: float(v) for k, v in (line.strip().split(" = ") for line in f)}
  assert set(results) == {"eval_accuracy", "eval_loss", "global_step", "loss"}
  assert results["global_step"] == 45
  assert results["eval_accuracy"] > 0.9  # Chance is about 0.3 (2 to 5 endings).
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    rows = [[float(p) for p in line.rstrip("\n").split("\t")] for line in f]
  assert [len(row) for row in rows] == [len(r["endings"]) for r in test_records]
  for row, record in zip(rows, test_records):
    assert sum(row) == pytest.approx(1.0, abs=1e-5)
    right = [i for i, ending in enumerate(record["endings"]) if "good" in ending.split()]
    assert int(np.argmax(row)) == right[0]
  saved = dict(tf.train.list_variables(os.path.join(output_dir, "model.ckpt-45")))
  assert saved["cls/multiple_choice/output_weights"] == [1, 32]
  # A dev file without labels cannot be evaluated: one line naming it.
  write_jsonl(data_dir / "dev.jsonl", test_records)
  with pytest.raises(task_files.BadInputError, match=r"dev\.jsonl: 7 examples have no label"):
    run(vocab_file=vocab_file, bert_config_file=config_file, data_dir=str(data_dir),
        dev_file="dev.jsonl", output_dir=output_dir, do_eval=True, max_seq_length=16)


def test_cli_bad_row_is_one_line_naming_file_and_line(tmp_path):
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  write(data_dir / "train.csv", SWAG_HEADER + "\n0,v,1,s,c,q,g,a,b,c,d,1\n1,v,1,s,c,q,g,a,b,c,1\n")
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "run_multiple_choice.py")
  completed = subprocess.run(
      [sys.executable, script, "--vocab_file=" + vocab_file, "--bert_config_file=" + config_file,
       "--data_dir=" + str(data_dir), "--output_dir=" + str(tmp_path / "out"), "--do_train",
       "--max_seq_length=16"], capture_output=True, text=True, timeout=300)
  assert completed.returncode == 1
  assert completed.stderr.strip().splitlines()[-1] == (
      "run_multiple_choice.py: error: %s:3: 11 columns, expected 12 (pass --skip_bad_rows to "
      "skip such rows)" % (data_dir / "train.csv"))
  # With --skip_bad_rows it trains on the one good row: 2 epochs of batch 1 are 2 steps.
  output_dir = str(tmp_path / "skipping")
  run(vocab_file=vocab_file, bert_config_file=config_file, data_dir=str(data_dir),
      output_dir=output_dir, do_train=True, max_seq_length=16, skip_bad_rows=True,
      train_batch_size=1, num_train_epochs=2.0)
  assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-2")


# --------------------------------------------------------------------------------------------------
# Export, served by TF's C++ loader.


def test_export_through_the_cpp_loader_equals_do_predict(tmp_path):
  """Rows with 2 to 4 endings, "" padded; do_predict's probabilities are the model on the cached
  features of the same examples (evaluation.predict)."""
  tf.keras.utils.set_random_seed(5)
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  task = multiple_choice.MultipleChoiceTask(modeling.BertConfig.from_json_file(config_file),
                                            tokenizer, None, str(tmp_path / "out"), 24)
  os.makedirs(task.output_dir)
  model = task.build_model()
  path = task.export(model, str(tmp_path / "export"))
  rng = random.Random(6)
  records = [marker_example(rng, n, labeled=False) for n in (4, 2, 3, 4, 2)]
  records[1]["context"] = "The big red cat sat, a happy dog ran, " * 3  # Truncated at 24 tokens.
  examples = [multiple_choice.MultipleChoiceExample(str(i), r["context"], r["endings"])
              for i, r in enumerate(records)]
  dataset, _ = task._examples_dataset("predict", examples)  # pylint: disable=protected-access
  expected = evaluation.predict(distribution.make_strategy("one_device"), model,
                                task.predict_outputs, dataset, 2)["probabilities"]
  endings = [r["endings"] + [""] * (4 - len(r["endings"])) for r in records]
  # token_ids: do_predict's ids, missing endings as all-zero rows.
  pairs = [[tokenizer.encode(r["context"], e, 24) if e else ([0] * 24,) * 3 for e in row]
           for r, row in zip(records, endings)]
  ids = {name: {"dtype": "int32", "value": [[pair[k] for pair in row] for row in pairs]}
         for k, name in enumerate(("input_ids", "input_mask", "segment_ids"))}
  text = {"context": {"dtype": "string", "value": [r["context"] for r in records]},
          "endings": {"dtype": "string", "value": endings}}
  requests = [{"signature": "serving_default", "inputs": text},
              {"signature": "token_ids", "inputs": ids}] + warmup_requests(path)
  requests_file, results_file = str(tmp_path / "requests.json"), str(tmp_path / "results.json")
  write(requests_file, json.dumps([{"saved_model": path, "requests": requests}]))
  completed = subprocess.run([sys.executable, CLIENT, requests_file, results_file],
                             capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                             env=dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="2"))
  assert completed.returncode == 0, completed.stderr[-3000:]
  with open(results_file, encoding="utf-8") as f:
    (job,) = json.load(f)["jobs"]
  assert job["non_core_ops"] == ["FastWordpieceTokenizeWithOffsets"]
  text_outputs, id_outputs = job["results"][:2]
  for outputs in (text_outputs, id_outputs):
    assert "error" not in outputs, outputs.get("error")
    assert_same(outputs["probabilities"], expected, "probabilities vs do_predict")
    assert outputs["label"] == expected.argmax(1).tolist()
  assert np.all(np.array(text_outputs["probabilities"])[np.array(endings) == ""] == 0.0)
  warmed = job["results"][2:]
  assert len(warmed) >= 4 and all("error" not in outputs for outputs in warmed)
  assert {len(np.array(r["inputs"]["endings" if r["signature"] == "serving_default" else
                                   "input_ids"]["value"]).shape) for r in requests[2:]} == {2, 3}


def test_export_gives_do_predict_probabilities_with_empty_endings(tmp_path):
  """"" is a missing ending in a test file as in an export request (tf.saved_model.load): it gets
  probability 0 and the other endings what they get without it; a row without any ending gets
  probability 0 for each (do_predict) and no label (-1, the export)."""
  tf.keras.utils.set_random_seed(8)
  config_file, vocab_file = write_model_files(str(tmp_path), tiny_config(), VOCAB)
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  endings = [["good day", "", "bad night"], ["the cat", "a dog sat"], ["", "red", "blue"],
             ["good day", "bad night"], ["", ""]]
  write_jsonl(data_dir / "test.jsonl", [{"context": "the sad day", "endings": e} for e in endings])
  task = multiple_choice.MultipleChoiceTask(
      modeling.BertConfig.from_json_file(config_file),
      tokenization.FullTokenizer(vocab_file, do_lower_case=True), str(data_dir),
      str(tmp_path / "out"), 16, test_file="test.jsonl")
  os.makedirs(task.output_dir)
  model = task.build_model()
  task.predict(distribution.make_strategy("one_device"), model, 2)
  with open(os.path.join(task.output_dir, "test_results.tsv")) as f:
    rows = [[float(p) for p in line.rstrip("\n").split("\t")] for line in f]
  assert [len(row) for row in rows] == [3, 2, 3, 2, 2]  # A line per test row, a value per ending.
  assert rows[0][1] == 0.0 and rows[2][0] == 0.0 and rows[4] == [0.0, 0.0]
  # Row 0 without its empty ending is row 3.
  np.testing.assert_allclose([rows[0][0], rows[0][2]], rows[3], atol=1e-5)
  serve = tf.saved_model.load(task.export(model, str(tmp_path / "export"))).signatures[
      "serving_default"]
  padded = [row + [""] * (3 - len(row)) for row in endings]
  outputs = serve(context=tf.constant(["the sad day"] * 5), endings=tf.constant(padded))
  probabilities = outputs["probabilities"].numpy()
  np.testing.assert_allclose(probabilities, [row + [0.0] * (3 - len(row)) for row in rows],
                             atol=1e-5)
  assert outputs["label"].numpy().tolist() == [int(np.argmax(row)) for row in rows[:4]] + [-1]
  # A request of no endings at all: every row has none.
  outputs = serve(context=tf.constant(["the sad day"] * 2), endings=tf.zeros([2, 0], tf.string))
  assert outputs["label"].numpy().tolist() == [-1, -1]
  assert outputs["probabilities"].shape == (2, 0)
