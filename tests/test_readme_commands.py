"""Every command of the README's shell blocks runs as written, each in a fresh process.

The commands are read from README.md (```sh, ```bash and ```shell blocks; `\\` continuations
joined, comments dropped), so a documented command cannot crash unnoticed. Environment variables
get tiny stand-ins written here in the original formats: $BERT_BASE_DIR a 4-layer, 32-wide BERT
in Google's format (config, vocab, `bert_model.ckpt` with the pretraining heads; 4 layers because
extract_features reads --layers=-1,-2,-3,-4), $GLUE_DIR/MRPC, $SQUAD_DIR, $CONLL_DIR, $SWAG_DIR
and $MY_DATA a few dozen rows each (enough for one step of the README's batch sizes), and
$MACHINE_INDEX 0. The commands run two at a time; one that reads another's output waits for it.

What the test changes in a command, and why (each only moves where files are, or makes the run
small; the flags a command documents are kept):
- `python X.py` runs `X.py` of this repository with this interpreter, in a work directory that
  holds the relative inputs (`./sample_text.txt`, `corpus.txt`);
- absolute paths under `/tmp/` and `/data/` move into the work directory, and the placeholders
  `/path/to/hf_model_dir` and `/path/to/keras_hub_preset` become a converted stand-in model;
- `...` (flags left out in the README) becomes `ELIDED_FLAGS` of the script;
- `OVERRIDES` replaces a few values that would only make a run long (a 4096 batch).

Commands that cannot run here are in `SKIPPED` with a reason; the test fails if the README has a
command that is neither run nor listed, or if the list names a command the README lacks.
Select with `pytest -m readme`.
"""

import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import heads
import pytest

from conftest import REPO_ROOT

pytestmark = [pytest.mark.readme, pytest.mark.slow]

README = os.path.join(REPO_ROOT, "README.md")

# Commands of the README that need what this machine lacks, by the start of their text.
SKIPPED = {
    "python create_pretraining_data.py --runner=beam": "needs Google Cloud Storage and Dataflow",
    "export TF_CONFIG=": "configures a cluster of two workers",
    "python run_pretraining.py --distribution_strategy=multi_worker_mirrored":
        "needs the two workers of TF_CONFIG running at once",
    "saved_model_cli show": "saved_model_cli is not installed with the project",
    "docker run": "needs docker and the tensorflow/serving image",
    "curl ": "needs a running TF Serving model server",
    "python run_classifier_with_tfhub.py": "needs a TF Hub encoder: tests/test_model_garden.py runs "
                                           "this command on Model Garden's export",
    "python convert_checkpoint.py --tf_hub_model_path=": "needs a TF Hub encoder: "
                                                        "tests/test_model_garden.py converts one",
    "python convert_checkpoint.py --model_garden_checkpoint=": "needs a Model Garden checkpoint: "
                                                              "tests/test_model_garden.py converts one",
}

# What `...` stands for in a command of each script: the model, data and output flags of the
# complete command of that script above it in the README, sized small.
ELIDED_FLAGS = {
    "run_classifier.py": "--vocab_file=$BERT_BASE_DIR/vocab.txt "
                         "--bert_config_file=$BERT_BASE_DIR/bert_config.json "
                         "--init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=32 "
                         "--train_batch_size=4 --output_dir={output_dir}",
    "run_squad.py": "--vocab_file=$BERT_BASE_DIR/vocab.txt "
                    "--bert_config_file=$BERT_BASE_DIR/bert_config.json "
                    "--init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --do_train=True "
                    "--train_file=$SQUAD_DIR/train-v1.1.json --train_batch_size=4 "
                    "--num_train_epochs=1.0 --max_seq_length=128 --doc_stride=64 "
                    "--output_dir={output_dir}",
    "run_pretraining.py": "--input_file=/tmp/tf_examples.tfrecord --do_train=True "
                          "--bert_config_file=$BERT_BASE_DIR/bert_config.json "
                          "--max_seq_length=128 --max_predictions_per_seq=20 "
                          "--num_train_steps=2 --num_warmup_steps=1 --output_dir={output_dir}",
}

# Values replaced because they only make a run long: (script, flag) -> value.
OVERRIDES = {
    # LAMB's large-batch example: a batch of 4096 on 128 tokens would take minutes on 2 cores;
    # the flag combination (--optimizer=lamb with its rate) is what the command shows.
    ("run_pretraining.py", "train_batch_size"): "8",
}

WORDS = ("the cat sat on mat dog ran in park alice lives paris bob visited london a man "
         "opens fridge takes out milk flies away she he said yes refused film was good bad "
         "city river house green red big small").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "'", "-"]


def _sentence(rng: np.random.Generator, length: int = 8) -> str:
  return " ".join(rng.choice(WORDS, size=length)) + " ."


def readme_commands() -> list:
  """The commands of the README's shell blocks, one string each, in order."""
  with open(README, encoding="utf-8") as f:
    text = f.read()
  commands = []
  for block in re.findall(r"^ *```(?:sh|bash|shell)\n(.*?)^ *```", text, re.M | re.S):
    pending = ""
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
      pending = (pending + "\n" + line.strip()) if pending else line.strip()
      if not pending or pending.startswith("#"):
        pending = ""
      elif _is_complete(pending):
        commands.append(pending)
        pending = ""
  return commands


def _is_complete(command: str) -> bool:
  """Whether `command` closes its quotes (a quoted argument may span lines)."""
  try:
    shlex.split(command, comments=True)
    return True
  except ValueError:
    return False


def _skip_reason(command: str):
  return next((reason for start, reason in SKIPPED.items() if command.startswith(start)), None)


def _write(path, text: str) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def _write_model(directory: str) -> None:
  """A released model's three parts: bert_config.json, vocab.txt and bert_model.ckpt (encoder
  and pretraining heads, random weights)."""
  import checkpoints  # pylint: disable=g-import-not-at-top  (TensorFlow only where needed)
  import modeling  # pylint: disable=g-import-not-at-top
  vocab = SPECIAL + WORDS
  config = modeling.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=4,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=512, type_vocab_size=2)
  _write(os.path.join(directory, "bert_config.json"), config.to_json_string())
  _write(os.path.join(directory, "vocab.txt"), "\n".join(vocab) + "\n")
  model = heads.BertPretrainingModel(config)
  model.build()
  checkpoints.write_checkpoint(
      {name: variable.numpy()
       for name, variable in checkpoints.checkpoint_variables(model).items()},
      os.path.join(directory, "bert_model.ckpt"))


def _write_mrpc(directory: str, rng) -> None:
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  for name, first in (("train.tsv", "Quality"), ("dev.tsv", "Quality"), ("test.tsv", "index")):
    rows = ["%s\t%d\t%d\t%s\t%s" % (i % 2 if first == "Quality" else i, 100 + i, 200 + i,
                                      _sentence(rng), _sentence(rng)) for i in range(40)]
    _write(os.path.join(directory, name), header.replace("Quality", first, 1) +
           "\n".join(rows) + "\n")


def _write_squad(directory: str, rng) -> None:
  for name in ("train-v1.1.json", "dev-v1.1.json"):
    paragraphs = []
    for i in range(24):
      context = "alice lives in paris . " + _sentence(rng, 30)
      paragraphs.append({"context": context, "qas": [{
          "id": "%s-%d" % (name, i), "question": "where does alice live ?",
          "answers": [{"text": "paris", "answer_start": context.index("paris")}]}]})
    _write(os.path.join(directory, name),
           json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))


def _write_conll(directory: str, rng) -> None:
  tags = {"alice": "B-PER", "bob": "B-PER", "paris": "B-LOC", "london": "B-LOC"}
  for name in ("train.txt", "dev.txt", "test.txt"):
    sentences = []
    for _ in range(40):
      words = list(rng.choice(WORDS, size=6)) + ["alice", "visited", "paris"]
      sentences.append("\n".join("%s NN O %s" % (w, tags.get(w, "O")) for w in words))
    _write(os.path.join(directory, name), "-DOCSTART- -X- -X- O\n\n" +
           "\n\n".join(sentences) + "\n")


def _write_swag(directory: str, rng) -> None:
  header = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3"
  for name, labeled in (("train.csv", True), ("val.csv", True), ("test.csv", False)):
    lines = [("," + header + (",label" if labeled else ""))]
    for i in range(20):
      endings = [_sentence(rng, 4) for _ in range(4)]
      lines.append(",".join([str(i), "v%d" % i, str(i), "she opens the fridge", "she opens the "
                             "fridge", "she", "gold"] + endings + ([str(i % 4)] if labeled else [])))
    _write(os.path.join(directory, name), "\n".join(lines) + "\n")


def _write_generic(directory: str, rng) -> None:
  labels = ["sports", "politics", "sports,politics"]
  for name in ("train.tsv", "dev.tsv", "test.tsv"):
    rows = ["%s\t%s" % (_sentence(rng, 40), labels[i % 3]) for i in range(6)]
    _write(os.path.join(directory, name), "text_a\tlabel\n" + "\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict:
  """The work directory and the environment of the README's commands, with tiny files."""
  work = str(tmp_path_factory.mktemp("readme"))
  rng = np.random.default_rng(0)
  env = {name: os.path.join(work, name.lower()) for name in
         ("BERT_BASE_DIR", "GLUE_DIR", "SQUAD_DIR", "CONLL_DIR", "SWAG_DIR", "MY_DATA")}
  env["MACHINE_INDEX"] = "0"  # The corpus is one chunk: shard 0 holds it.
  _write_model(env["BERT_BASE_DIR"])
  _write_mrpc(os.path.join(env["GLUE_DIR"], "MRPC"), rng)
  _write_squad(env["SQUAD_DIR"], rng)
  _write_conll(env["CONLL_DIR"], rng)
  _write_swag(env["SWAG_DIR"], rng)
  _write_generic(env["MY_DATA"], rng)
  documents = ["\n".join(_sentence(rng) for _ in range(6)) for _ in range(4)]
  for path in ("sample_text.txt", "corpus.txt", "data/wiki/a.txt"):
    _write(os.path.join(work, path), "\n\n".join(documents) + "\n")
  _write(os.path.join(work, "tmp", "input.txt"), "the cat sat . ||| the dog ran .\nalice .\n")
  import model_conversion  # pylint: disable=g-import-not-at-top
  prefix = os.path.join(env["BERT_BASE_DIR"], "bert_model.ckpt")
  paths = {"/path/to/hf_model_dir": os.path.join(work, "stand_in_hf"),
           "/path/to/keras_hub_preset": os.path.join(work, "stand_in_keras_hub")}
  model_conversion.convert_google_to_hf(prefix, paths["/path/to/hf_model_dir"])
  model_conversion.convert_google_to_keras_hub(prefix, paths["/path/to/keras_hub_preset"])
  return {"work": work, "env": env, "paths": paths}


def _arguments(command: str, index: int, stand_ins: dict) -> tuple:
  """(script, its arguments) of a README command, with the changes the module docstring lists."""
  work = stand_ins["work"]
  tokens = shlex.split(command, comments=True)
  assert tokens[0] == "python", command
  script = tokens[1]
  elided = ELIDED_FLAGS.get(script, "").format(
      output_dir="/tmp/readme_%d_%s" % (index, script[:-3]))
  arguments = []
  for token in tokens[2:]:
    arguments.extend(shlex.split(elided) if token == "..." else [token])
  result = []
  for argument in arguments:
    name = argument[2:].split("=", 1)[0]
    if (script, name) in OVERRIDES:
      argument = "--%s=%s" % (name, OVERRIDES[script, name])
    argument = re.sub(r"(^|=)/(tmp|data)/", r"\1%s/\2/" % work, argument)
    for variable, value in stand_ins["env"].items():
      argument = argument.replace("$" + variable, value)
    for placeholder, value in stand_ins["paths"].items():
      argument = argument.replace(placeholder, value)
    result.append(argument)
  return script, result


def _flag(arguments: list, name: str):
  values = [a.split("=", 1)[1] for a in arguments if a.startswith("--%s=" % name)]
  return values[-1] if values else None


def _true(arguments: list, name: str) -> bool:
  return (_flag(arguments, name) or "").lower() == "true"


PREDICTIONS_FILES = {"run_squad.py": "predictions.json", "run_ner.py": "test_predictions.txt"}


def _promised_outputs(script: str, arguments: list) -> list:
  """The files the README says a command leaves, from its flags."""
  outputs = []
  output_file = _flag(arguments, "output_file")
  if output_file:
    shards = _flag(arguments, "num_shards")
    outputs.append(output_file if not shards else "%s-%05d-of-%05d" % (
        output_file, int(_flag(arguments, "shard_index")), int(shards)))
  output_dir = _flag(arguments, "output_dir")
  if output_dir and script == "convert_checkpoint.py":
    to_google = not _flag(arguments, "init_checkpoint")
    output_format = _flag(arguments, "output_format") or "hugging_face"
    outputs.append(os.path.join(output_dir, {
        "hugging_face": "model.safetensors", "keras_hub": "config.json",
        "model_garden": "bert_model.ckpt.index"}[output_format] if not to_google
                                else "bert_model.ckpt.index"))
  elif output_dir:
    if _true(arguments, "do_train"):
      outputs.append(os.path.join(output_dir, "checkpoint"))
    if _true(arguments, "do_eval"):
      outputs.append(os.path.join(output_dir, "eval_results.txt"))
    if _true(arguments, "do_predict"):
      outputs.append(os.path.join(output_dir, PREDICTIONS_FILES.get(script, "test_results.tsv")))
  export_dir = _flag(arguments, "export_dir")
  if export_dir:
    outputs.append(os.path.join(export_dir, "1", "saved_model.pb"))
  return outputs


COMMANDS = readme_commands()
# Commands run this many at a time; one that reads what an earlier one writes waits for it.
PARALLEL_RUNS = 2


def _outputs_flags(arguments: list) -> list:
  return [value for value in (_flag(arguments, name) for name in
                              ("output_file", "output_dir", "export_dir")) if value]


@pytest.fixture(scope="module")
def runs(stand_ins) -> dict:
  """{index: (script, arguments, finished process)} of every command not skipped."""
  work = stand_ins["work"]
  commands = {index: _arguments(command, index, stand_ins)
              for index, command in enumerate(COMMANDS) if not _skip_reason(command)}
  futures = {}

  def run(index: int) -> tuple:
    script, arguments = commands[index]
    for earlier, (_, earlier_arguments) in commands.items():
      written = _outputs_flags(earlier_arguments)
      if earlier < index and any(a.split("=", 1)[-1].startswith(w.rstrip("/"))
                                 for a in arguments for w in written):
        futures[earlier].result()
    process = subprocess.run([sys.executable, os.path.join(REPO_ROOT, script)] + arguments,
                             cwd=work, capture_output=True, text=True, timeout=300,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return script, arguments, process

  # Submitted in README order to a first-in first-out pool: what a command waits for has
  # started before it, so the waits end.
  with concurrent.futures.ThreadPoolExecutor(PARALLEL_RUNS) as pool:
    for index in commands:
      futures[index] = pool.submit(run, index)
  return {index: future.result() for index, future in futures.items()}


def test_every_command_is_run_or_skipped_with_a_reason():
  """A command the README gains is run, or listed in SKIPPED; no entry of SKIPPED is stale."""
  for command in COMMANDS:
    assert command.startswith("python ") or _skip_reason(command), (
        "README command neither run nor in SKIPPED: " + command)
  for start in SKIPPED:
    assert any(c.startswith(start) for c in COMMANDS), "SKIPPED entry not in README: " + start


@pytest.mark.parametrize("index", range(len(COMMANDS)),
                         ids=[c.split()[1] if c.startswith("python ") else c.split()[0]
                              for c in COMMANDS])
def test_readme_command_runs(index, runs, stand_ins):
  """Exit status 0, and the files the command promises exist."""
  command = COMMANDS[index]
  reason = _skip_reason(command)
  if reason:
    pytest.skip(reason)
  script, arguments, process = runs[index]
  assert process.returncode == 0, "%s\n%s" % (command, process.stderr[-3000:])
  for path in _promised_outputs(script, arguments):
    assert os.path.exists(os.path.join(stand_ins["work"], path)), "%s: no %s" % (command, path)
