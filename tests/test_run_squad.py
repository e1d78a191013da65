"""End-to-end tests of run_squad.py: train a tiny model on generated questions, predict, evaluate,
export, and answer from the SavedModel in a fresh process that imports only TensorFlow."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from conftest import write_model_files
import modeling
import squad_data
import squad_serving

pytestmark = pytest.mark.slow

PEOPLE = ["Alice", "Bob", "Chloé", "Dmitri"]
PLACES = ["Paris", "Zürich", "New-York", "Oslo"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "lives", "in", "where", "does", "live", "?",
         ",", ".", "and", "nobody", "knows", "why", "alice", "bob", "chloe", "dmitri", "paris",
         "zurich", "new", "-", "york", "os", "##lo", "who", "the"]
TINY_CONFIG = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                   max_position_embeddings=64, type_vocab_size=2, initializer_range=0.02)


def generated_squad(version_2: bool = False) -> dict:
  """Four contexts, each with one person and one place, and a where- and a who-question; for
  v2.0 also an unanswerable why-question ("nobody knows why")."""
  paragraphs = []
  for index, (person, place) in enumerate(zip(PEOPLE, PLACES)):
    template = ("%s lives in %s, nobody knows why." if index % 2 else
                "Nobody knows why %s  lives in %s.")
    context = template % (person, place)
    qas = [{"id": "where-%d" % index, "question": "Where does %s live?" % person,
            "answers": [{"text": place, "answer_start": context.index(place)}]},
           {"id": "who-%d" % index, "question": "Who lives in %s?" % place,
            "answers": [{"text": person, "answer_start": context.index(person)}]}]
    if version_2:
      for qa in qas:
        qa["is_impossible"] = False
      qas.append({"id": "why-%d" % index, "question": "Why does %s live in %s?" % (person, place),
                  "answers": [], "is_impossible": True})
    paragraphs.append({"context": context, "qas": qas})
  return {"version": "2.0" if version_2 else "1.1",
          "data": [{"title": "generated", "paragraphs": paragraphs}]}


def gold_answers(dataset):
  return {qa["id"]: qa["answers"][0]["text"] if qa["answers"] else ""
          for paragraph in dataset["data"][0]["paragraphs"] for qa in paragraph["qas"]}


def run_squad(tmp_path, *args, returncode: int = 0):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  completed = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "run_squad.py"),
       "--vocab_file=%s" % (tmp_path / "vocab.txt"),
       "--bert_config_file=%s" % (tmp_path / "bert_config.json"),
       "--max_seq_length=32", "--doc_stride=16", "--max_query_length=10", "--n_best_size=5",
       "--max_answer_length=4", "--predict_batch_size=5"] + list(args),
      capture_output=True, text=True, env=env, timeout=600)
  assert completed.returncode == returncode, completed.stderr[-3000:]
  return completed


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A tiny model trained on the generated v2.0 questions, predicted and exported by the CLI."""
  tmp_path = tmp_path_factory.mktemp("squad")
  write_model_files(str(tmp_path), modeling.BertConfig.from_dict(TINY_CONFIG), VOCAB)
  (tmp_path / "v2.json").write_text(json.dumps(generated_squad(True)), encoding="utf-8")
  run_squad(tmp_path, "--do_train", "--do_predict", "--version_2_with_negative",
            "--train_file=%s" % (tmp_path / "v2.json"),
            "--predict_file=%s" % (tmp_path / "v2.json"), "--output_dir=%s" % (tmp_path / "out"),
            "--export_dir=%s" % (tmp_path / "export"), "--train_batch_size=8",
            "--learning_rate=3e-4", "--num_train_epochs=400", "--warmup_proportion=0.05",
            "--iterations_per_loop=100")
  return tmp_path


def read_json(path):
  return json.loads(path.read_text(encoding="utf-8"))


def test_a_squad_2_run_is_not_predicted_as_squad_1(trained):
  """Whether null scores answer (--version_2_with_negative) is recorded with the run: predicting
  its model the other way is refused in one line, and the run's predictions stay (before, v1
  answers replaced them beside the v2 run's null_odds.json)."""
  out = trained / "out"
  before = {name: (out / name).read_bytes() for name in ("predictions.json", "null_odds.json")}
  completed = run_squad(trained, "--do_predict", "--predict_file=%s" % (trained / "v2.json"),
                        "--output_dir=%s" % out, returncode=1)
  assert completed.stderr.strip().splitlines()[-1] == (
      "run_squad.py: error: the model in --output_dir=%s was trained with other settings "
      "(recorded in training_settings.json): --version_2_with_negative: recorded True, now False. "
      "Use it with the run's settings and files" % out)
  assert {name: (out / name).read_bytes() for name in before} == before


def test_a_predict_file_without_questions_is_refused(trained):
  """A predict file whose articles hold no question (a wrong file, or one emptied by a filter) is
  one line before TensorFlow predicts (before, predictions.json became {}, exit 0), and the run's
  predictions stay."""
  out = trained / "out"
  before = (out / "predictions.json").read_bytes()
  empty = trained / "no_questions.json"
  empty.write_text(json.dumps({"version": "2.0", "data": [
      {"title": "t", "paragraphs": [{"context": "Alice lives in Paris.", "qas": []}]}]}),
                   encoding="utf-8")
  completed = run_squad(trained, "--do_predict", "--version_2_with_negative",
                        "--predict_file=%s" % empty, "--output_dir=%s" % out, returncode=1)
  assert completed.stderr.strip().splitlines()[-1] == (
      "run_squad.py: error: %s: no questions to predict" % empty)
  assert (out / "predictions.json").read_bytes() == before


def test_tiny_model_answers_the_generated_questions_exactly(trained):
  out = trained / "out"
  assert read_json(out / "predictions.json") == gold_answers(generated_squad(True))
  results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())
  assert (results["exact_match"], results["f1"], results["HasAns_exact_match"],
          results["NoAns_exact_match"], results["HasAns_total"], results["NoAns_total"]) == (
              "100.0", "100.0", "100.0", "100.0", "8", "4")
  null_odds = read_json(out / "null_odds.json")
  assert sorted(null_odds) == sorted(gold_answers(generated_squad(True)))
  assert all((odds > 0) == qid.startswith("why") for qid, odds in null_odds.items())
  nbest = read_json(out / "nbest_predictions.json")
  first = nbest["where-0"][0]
  assert sorted(first) == ["end_logit", "probability", "start_logit", "text"]
  assert first["text"] == "Paris" and first["probability"] > 0.5
  assert sum(entry["probability"] for entry in nbest["where-0"]) == pytest.approx(1.0)
  assert (out / "train.tf_record").exists() and (out / "model.ckpt-600.index").exists()


SERVE_SCRIPT = textwrap.dedent("""
    import json, os, re, sys
    import tensorflow as tf
    import tensorflow_text  # registers the ops the SavedModel uses
    model = tf.saved_model.load(sys.argv[1])

    def kib(field):
      with open("/proc/self/status") as status:
        return int(re.search(field + r":\\s+(\\d+)", status.read()).group(1))

    model.signatures["serving_default"](question=tf.constant(["warm up"]),
                                        context=tf.constant(["warm up"]))
    answers = []
    for questions, contexts in json.loads(sys.argv[2]):
      measured = os.path.exists("/proc/self/clear_refs")  # Linux: peak RSS can be reset.
      if measured:
        with open("/proc/self/clear_refs", "w") as clear_refs:
          clear_refs.write("5")  # Resets VmHWM to the current resident size.
        before = kib("VmRSS")
      out = model.signatures["serving_default"](question=tf.constant(questions),
                                                context=tf.constant(contexts))
      peak_growth_kib = kib("VmHWM") - before if measured else None
      answers.append({"answer": [a.decode("utf-8") for a in out["answer"].numpy()],
                      "start": out["answer_start"].numpy().tolist(),
                      "end": out["answer_end"].numpy().tolist(),
                      "peak_growth_kib": peak_growth_kib})
    ids = model.signatures["token_ids"](input_ids=tf.ones([1, 32], tf.int32),
                                        input_mask=tf.ones([1, 32], tf.int32),
                                        segment_ids=tf.zeros([1, 32], tf.int32))
    print(json.dumps({"answers": answers, "logits_shape": ids["start_logits"].shape.as_list()}))
    """)


def serve(export_path, requests):
  """Runs a SavedModel in a new process that cannot import the project (cwd and path elsewhere):
  {"answers": its answer to each request (questions, contexts), in order, each with the peak
  memory growth of its own call; "logits_shape": what `token_ids` gives for one row of 32}."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("PYTHONPATH", None)
  completed = subprocess.run(
      [sys.executable, "-c", SERVE_SCRIPT, export_path, json.dumps(requests)],
      capture_output=True, text=True, env=env, cwd=os.path.dirname(export_path), timeout=300)
  assert completed.returncode == 0, completed.stderr[-3000:]
  return json.loads(completed.stdout.strip().splitlines()[-1])


def generated_requests():
  """(questions, contexts, ids) of every generated v2.0 question."""
  questions, contexts, ids = [], [], []
  for paragraph in generated_squad(version_2=True)["data"][0]["paragraphs"]:
    for qa in paragraph["qas"]:
      questions.append(qa["question"])
      contexts.append(paragraph["context"])
      ids.append(qa["id"])
  return questions, contexts, ids


LONG_QUESTION, LONG_HEAD = "Who lives in Paris?", "Alice lives in Paris, nobody knows why."


@pytest.fixture(scope="module")
def served(trained):
  """The export's answers, from one fresh process (a TensorFlow start is most of its cost): to
  one question on a 64 KiB context (first, so that its memory is measured right after the warmup
  call, as in a process of its own), then to every generated question."""
  questions, contexts, _ = generated_requests()
  out = serve(str(trained / "export" / "1"), [
      ([LONG_QUESTION], [long_context(LONG_HEAD, 2**16)]), (questions, contexts)])
  long_request, generated = out["answers"]
  return {"long": long_request, "generated": generated, "logits_shape": out["logits_shape"]}


def test_export_in_a_fresh_process_agrees_with_do_predict(trained, served):
  _, contexts, ids = generated_requests()
  out = served["generated"]
  predictions = read_json(trained / "out" / "predictions.json")
  assert out["answer"] == [predictions[qid] for qid in ids]
  assert served["logits_shape"] == [1, 32]
  for answer, start, end, context in zip(out["answer"], out["start"], out["end"], contexts):
    if answer:
      assert context[start:end] == answer
    else:
      assert (start, end) == (-1, -1)


def long_context(head, size):
  """A context of `size` bytes: `head`, then numbered filler words."""
  return (head + " " + " ".join("w%d" % i for i in range(size // 4)))[:size]


def test_a_long_context_is_answered_like_do_predict(trained, served):
  """A 64 KiB context, about a thousand windows all tokenized in the graph: the served answer,
  chosen over all windows, is do_predict's, its offsets give its text, and it does not cost the
  memory a quadratic step would. (What such requests cost, up to the 4 MiB byte limit:
  benchmarks/bench_request_memory.py.)"""
  question, context = LONG_QUESTION, long_context(LONG_HEAD, 2**16)
  out = served["long"]
  answer, start, end = out["answer"][0], out["start"][0], out["end"][0]
  assert (context[start:end] == answer) if answer else ((start, end) == (-1, -1))
  # A guard, not a measurement: per-word copies of the whole context once made 64 KiB cost about
  # a GB; linear handling costs about 10 MiB.
  if out["peak_growth_kib"] is not None:
    assert out["peak_growth_kib"] < 128 * 1024, out["peak_growth_kib"]
  predict_file = trained / "long.json"
  predict_file.write_text(json.dumps({"version": "2.0", "data": [{"title": "long", "paragraphs": [
      {"context": context, "qas": [{"id": "long", "question": question, "answers": []}]}]}]}),
                          encoding="utf-8")
  run_squad(trained, "--do_predict", "--version_2_with_negative",
            "--init_checkpoint=%s" % (trained / "out" / "model.ckpt-600"),
            "--predict_file=%s" % predict_file, "--output_dir=%s" % (trained / "long"))
  assert answer == read_json(trained / "long" / "predictions.json")["long"]


TRICKY_CONTEXTS = [
    "The café's owner, José Núñez, sold unaffable croissants (1895-1943).",
    "Steve Smith's  bat\tbroke\nin   1999; nobody\u2014not even Ms. O'Neil\u2014saw it, 1999.",
    "Zürich's ÉCOLE polytechnique fédérale: 12,000 students & 5\u202f000 staff (ETH).",
    "北京 is the capital of 中国, said the naïve coöperative's CEO.",
    "The \u2603 snowman ate \u2ff0 things \u2014 and 3.5\u00b2 of them were [sic] green.",
    # Words without pieces: more than max_seq_length of them before the first piece.
    "\u200b " * 70 + "\u0301 Paris is the capital of France, said its \u200b\u200b mayor.",
]
TRICKY_QUESTIONS = ["Who sold croissants?", "When did it break?", "How many students?",
                    "What is the capital?"]


def test_in_graph_span_selection_and_final_text_match_python(uncased_vocab_file):
  """A random tiny model picks arbitrary spans; the serving graph must map every one of them to
  the text the Python post-processing gives (accents, case, punctuation, odd whitespace, CJK,
  [UNK] words), and to character offsets of that text in the context."""
  import keras
  import numpy as np
  import tensorflow as tf

  import squad
  import tokenization
  tokenizer = tokenization.FullTokenizer(uncased_vocab_file, do_lower_case=True)
  config = modeling.BertConfig.from_dict(dict(TINY_CONFIG, vocab_size=len(tokenizer.vocab),
                                              max_position_embeddings=128))
  keras.utils.set_random_seed(1)
  model = squad.build_model(config)
  max_seq_length = 64
  # Without length buckets: the original's ranking over all max_seq_length positions.
  module = squad_serving.SquadServingModule(
      model, tokenizer, squad_data.SquadOptions(max_seq_length=max_seq_length, max_query_length=16,
                                                n_best_size=20, max_answer_length=30),
      bucket_by_length=False)
  data = [{"title": "t", "paragraphs": [
      {"context": context, "qas": [{"id": "%d-%d" % (c, q), "question": question, "answers": []}
                                   for q, question in enumerate(TRICKY_QUESTIONS)]}
      for c, context in enumerate(TRICKY_CONTEXTS)]}]
  examples, _ = squad_data.examples_from_data(data, is_training=False)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, max_seq_length,
                                                          128, 16, is_training=False))
  assert len(features) == len(examples)  # every context fits one window
  inputs = {name: np.array([getattr(f, name) for f in features], np.int32)
            for name in ("input_ids", "input_mask", "segment_ids")}
  logits = model(inputs)
  results = [squad.RawResult(f.unique_id, s.tolist(), e.tolist()) for f, s, e in zip(
      features, logits["start_logits"].numpy(), logits["end_logits"].numpy())]
  predictions, _, _ = squad.compute_predictions(examples, features, results, 20, 30, True)

  questions = [e.question_text for e in examples]
  contexts = [e.context_text for e in examples]
  encoded = module.encode_windows(tf.constant(questions), tf.constant(contexts))[0]
  for name in inputs:
    np.testing.assert_array_equal(encoded[name].numpy(), inputs[name], err_msg=name)
  out = module.signatures()["serving_default"](tf.constant(questions), tf.constant(contexts))
  answers = [a.decode("utf-8") for a in out["answer"].numpy()]
  # Documented difference: with no valid span the export answers "", do_predict the original's "empty".
  assert answers == [("" if predictions[e.qas_id] == "empty" else predictions[e.qas_id])
                     for e in examples]
  assert len(set(answers)) > 5  # the random spans really vary
  for answer, start, end, context in zip(answers, out["answer_start"].numpy(),
                                         out["answer_end"].numpy(), contexts):
    assert " ".join(context[start:end].split()) == answer


def test_evaluates_during_training_through_the_task_protocol(tmp_path):
  """--keep_best_checkpoint evaluates the predict file (predict-and-score) at each epoch end."""
  write_model_files(str(tmp_path), modeling.BertConfig.from_dict(TINY_CONFIG), VOCAB)
  (tmp_path / "v1.json").write_text(json.dumps(generated_squad()), encoding="utf-8")
  output_dir = tmp_path / "out"
  run_squad(tmp_path, "--do_train", "--keep_best_checkpoint",
            "--train_file=%s" % (tmp_path / "v1.json"),
            "--predict_file=%s" % (tmp_path / "v1.json"), "--output_dir=%s" % output_dir,
            "--train_batch_size=8", "--learning_rate=3e-4", "--num_train_epochs=2")
  history = read_json(output_dir / "eval_history.json")
  assert history["early_stopping_metric"] == "f1" and len(history["evaluations"]) == 2
  for entry in history["evaluations"]:
    assert {"exact_match", "f1"} <= set(entry["metrics"])
  assert not (output_dir / "predictions.json").exists()  # Evaluation writes no predictions.
  assert len(list((output_dir / "best").glob("model.ckpt-*.index"))) == 1
  tags = set()
  for event_file in (output_dir / "eval").glob("events.out.tfevents.*"):
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      tags.update(value.tag for value in event.summary.value)
  assert {"exact_match", "f1"} <= tags
