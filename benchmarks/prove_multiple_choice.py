r"""Proof on real data that run_multiple_choice learns: answer-sentence choice built from SQuAD.

The 4-way multiple-choice set is built from `../shared/squad/squad_v1.1_dev_part_a.json` as
multiple_choice_data.py describes (the sentence holding the answer among other sentences of its
paragraph). Articles are split: --eval_articles are held out for the dev file, the
training file takes --num_train questions of the others (shuffled).

Then it runs `run_multiple_choice.py` (a subprocess, the real CLI) on the JSON Lines files:
fine-tuning from --model_dir's Google-format checkpoint (all-MiniLM-L6-v2 converted with
convert_checkpoint.py), --do_eval on the held-out articles, and prints dev accuracy against chance
(1/4) and against a word-overlap baseline (the ending sharing most lower-cased words with the
question, ties to the first).

  python benchmarks/prove_multiple_choice.py --model_dir=/work/minilm/google \
    --work_dir=/tmp/mc_proof
"""
import json
import os
import re
import subprocess
import sys
import time

from absl import app
from absl import flags

from benchmark_paths import REPO_ROOT, SHARED_DIR  # pylint: disable=g-import-not-at-top
import multiple_choice_data  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string("squad_file", os.path.join(SHARED_DIR, "squad", "squad_v1.1_dev_part_a.json"),
                    "SQuAD v1.1 JSON to build the multiple-choice set from.")
flags.DEFINE_string("model_dir", None, "Directory with bert_config.json, bert_model.ckpt.*, "
                    "vocab.txt (Google format).")
flags.DEFINE_string("work_dir", None, "Where the data files and the run's output_dir go.")
flags.DEFINE_list("eval_articles", ["Apollo_program", "Black_Death", "Prime_number"],
                  "Articles held out for the dev file.")
flags.DEFINE_integer("num_train", 1500, "Training questions (from the other articles).")
flags.DEFINE_integer("num_endings", 4, "Endings per question (the right sentence + distractors).")
flags.DEFINE_integer("max_seq_length", 64, "run_multiple_choice --max_seq_length.")
flags.DEFINE_float("num_train_epochs", 2.0, "run_multiple_choice --num_train_epochs.")
flags.DEFINE_integer("train_batch_size", 16, "run_multiple_choice --train_batch_size.")
flags.DEFINE_float("learning_rate", 1e-4, "run_multiple_choice --learning_rate.")
flags.DEFINE_integer("seed", 0, "Seed of the distractor draw, ending order and training subset.")

def overlap_accuracy(records: list[dict]) -> float:
  """Accuracy of picking the ending with the most words in common with the question."""
  def words(text):
    return set(re.findall(r"\w+", text.lower()))
  correct = 0
  for record in records:
    question = words(record["context"])
    scores = [len(question & words(ending)) for ending in record["endings"]]
    correct += scores.index(max(scores)) == record["label"]
  return correct / len(records)


def main(_):
  with open(FLAGS.squad_file, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  try:
    train, dev = multiple_choice_data.split(articles, FLAGS.eval_articles, FLAGS.num_train,
                                            FLAGS.num_endings, FLAGS.seed)
  except ValueError as error:
    raise app.UsageError("--eval_articles: %s" % error) from error
  data_dir = os.path.join(FLAGS.work_dir, "data")
  output_dir = os.path.join(FLAGS.work_dir, "output")
  os.makedirs(data_dir, exist_ok=True)
  multiple_choice_data.write_jsonl(os.path.join(data_dir, "train.jsonl"), train)
  multiple_choice_data.write_jsonl(os.path.join(data_dir, "dev.jsonl"), dev)
  print("train %d questions, dev %d questions (%s), %d endings each" % (
      len(train), len(dev), ", ".join(FLAGS.eval_articles), FLAGS.num_endings))
  model = FLAGS.model_dir
  command = [
      sys.executable, os.path.join(REPO_ROOT, "run_multiple_choice.py"),
      "--vocab_file=%s/vocab.txt" % model, "--bert_config_file=%s/bert_config.json" % model,
      "--init_checkpoint=%s/bert_model.ckpt" % model, "--do_lower_case=true",
      "--do_train=true", "--do_eval=true", "--data_dir=" + data_dir,
      "--train_file=train.jsonl", "--dev_file=dev.jsonl",
      "--max_seq_length=%d" % FLAGS.max_seq_length,
      "--train_batch_size=%d" % FLAGS.train_batch_size,
      "--learning_rate=%g" % FLAGS.learning_rate,
      "--num_train_epochs=%g" % FLAGS.num_train_epochs, "--eval_batch_size=32",
      "--output_dir=" + output_dir]
  print(" ".join(command), flush=True)
  start = time.time()
  subprocess.run(command, check=True)
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f if line.strip())
  print("| what | dev accuracy |\n| --- | --- |")
  print("| chance (1/%d) | %.3f |" % (FLAGS.num_endings, 1 / FLAGS.num_endings))
  print("| word overlap with the question | %.3f |" % overlap_accuracy(dev))
  print("| fine-tuned (%s steps, %.0f min) | %.3f |" % (
      results["global_step"], (time.time() - start) / 60, float(results["eval_accuracy"])))


if __name__ == "__main__":
  flags.mark_flags_as_required(["model_dir", "work_dir"])
  app.run(main)
