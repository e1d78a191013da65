"""The validation pass every script runs before any work, and its one-line errors.

The flag walk runs each script's real `run_script` on every numeric flag with a list of candidate
values (in one subprocess: scripts define clashing flag names, so each gets fresh flags) and
compares what was accepted with the rules written out below, independently of `cli.FLAG_RULES`.
"""

import json
import os
import re
import subprocess
import sys

from absl import flags
import pytest

from conftest import REPO_ROOT
import cli
import distribution
import errors
import feature_extraction
import modeling
import tokenization
import training_loop

pytestmark = pytest.mark.slow

SCRIPTS = ["run_pretraining", "run_classifier", "run_squad", "run_ner", "run_multiple_choice",
           "extract_features", "create_pretraining_data", "create_vocab", "convert_checkpoint"]
CANDIDATES = ["-1", "0", "1", "2", "5", "0.5", "1.5", "nan", "inf", "abc", "4294967296"]

# Runs each script's flags through cli.run_script with a `main` that records that it was reached;
# prints one JSON record per (script, flag, value).
_WALK = r"""
import importlib, json, os, sys
from absl import flags
import cli
scripts, candidates = json.loads(sys.argv[1])
project = {name[:-3] for name in os.listdir(".") if name.endswith(".py")}
def ours(name):
  return (flags.FLAGS.find_module_defining_flag(name) or "").split(".")[-1] in project
results = []
for script in scripts:
  for name in [name for name in flags.FLAGS if ours(name)]:
    delattr(flags.FLAGS, name)
  importlib.import_module(script).define_flags()
  for name in sorted(n for n in flags.FLAGS
                     if ours(n) and flags.FLAGS[n].flag_type() in ("int", "float")):
    for value in candidates:
      reached = []
      flags.FLAGS.unparse_flags()
      sys.argv = [script + ".py", "--%s=%s" % (name, value)]
      try:
        cli.run_script(lambda argv: reached.append(True))
        error = None
      except SystemExit as exit_:
        error = exit_.code if isinstance(exit_.code, str) else None
      results.append(dict(script=script, flag=name, type=flags.FLAGS[name].flag_type(),
                          value=value, reached_main=bool(reached), error=error))
print(json.dumps(results))
"""

# The rules, written out for this test. Integers are >= 1 unless listed here.
ZERO_ALLOWED = {"num_warmup_steps", "phase2_steps", "phase2_num_warmup_steps", "eval_every_steps",
                "early_stopping_patience", "shard_index", "random_seed"}
SEQUENCE_LENGTHS = {"max_seq_length", "phase2_max_seq_length"}  # at least 3
# Floats: (lowest, highest, whether the lowest is allowed, whether the highest is); None: no bound.
FLOAT_RANGES = {
    "learning_rate": (0, None, False, None), "phase2_learning_rate": (0, None, False, None),
    "num_train_epochs": (0, None, False, None), "warmup_proportion": (0, 1, True, True),
    "multi_label_threshold": (0, 1, False, False),
    "null_score_diff_threshold": (None, None, None, None),
    "masked_lm_prob": (0, 1, True, True), "short_seq_prob": (0, 1, True, True),
    "slack_ratio": (0, 1, True, False),
}
# Numeric flags that act only with another flag the walk does not give (--export_dir,
# --phase2_steps, --multi_label): any value in range is refused for that.
ACTS_ONLY_WITH = {"max_request_rows": "--export_dir", "max_request_tokens": "--export_dir",
                  "fill_mask_top_k": "--export_dir", "multi_label_threshold": "--multi_label",
                  "phase2_max_seq_length": "--phase2_steps",
                  "phase2_max_predictions_per_seq": "--phase2_steps",
                  "phase2_learning_rate": "--phase2_steps",
                  "phase2_num_warmup_steps": "--phase2_steps",
                  "phase2_train_batch_size": "--phase2_steps",
                  "eval_every_steps": "--do_train", "early_stopping_patience": "--do_train"}
DEFAULTS = {"train_batch_size": 32, "max_seq_length": 128, "max_predictions_per_seq": 20,
            "phase2_max_seq_length": 512, "phase2_max_predictions_per_seq": 80, "num_shards": 1}


def _float_allowed(flag: str, value: float) -> bool:
  low, high, low_allowed, high_allowed = FLOAT_RANGES[flag]
  if value != value or abs(value) == float("inf"):
    return False
  if low is not None and (value < low or (value == low and not low_allowed)):
    return False
  return high is None or value < high or (value == high and high_allowed)


def _int_allowed(script_flags: set, flag: str, value: int) -> bool:
  minimum = 0 if flag in ZERO_ALLOWED else 3 if flag in SEQUENCE_LENGTHS else 1
  if value < minimum:
    return False
  if flag == "random_seed":
    return value < 2**32
  if flag == "shard_index":
    return value < DEFAULTS["num_shards"]
  if flag == "gradient_accumulation_steps":
    return DEFAULTS["train_batch_size"] % value == 0
  for prefix in ("", "phase2_"):  # No more masked positions than positions.
    if prefix + "max_predictions_per_seq" in script_flags:
      if flag == prefix + "max_predictions_per_seq":
        return value <= DEFAULTS[prefix + "max_seq_length"]
      if flag == prefix + "max_seq_length":
        return value >= DEFAULTS[prefix + "max_predictions_per_seq"]
  return True


def _allowed(script_flags: set, record: dict) -> bool:
  try:
    value = int(record["value"]) if record["type"] == "int" else float(record["value"])
  except ValueError:
    return False
  if record["type"] == "float":
    return _float_allowed(record["flag"], value)
  return _int_allowed(script_flags, record["flag"], value)


@pytest.fixture(scope="module")
def walk() -> list:
  run = subprocess.run([sys.executable, "-c", _WALK, json.dumps([SCRIPTS, CANDIDATES])],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert run.returncode == 0, run.stderr[-3000:]
  return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_numeric_flag_of_every_script_accepts_exactly_its_range(walk):
  flags_of = {}
  for record in walk:
    flags_of.setdefault(record["script"], set()).add(record["flag"])
  assert set(flags_of) == set(SCRIPTS) - {"convert_checkpoint"}  # It has no numeric flag.
  assert {"learning_rate", "warmup_proportion", "train_batch_size", "multi_label_threshold",
          "num_train_epochs", "save_checkpoints_steps", "iterations_per_loop"} <= (
              flags_of["run_classifier"])
  wrong = []
  for record in walk:
    script_flags = flags_of[record["script"]]
    in_range = _allowed(script_flags, record)
    expected = in_range and record["flag"] not in ACTS_ONLY_WITH
    if expected != record["reached_main"]:
      wrong.append("%s --%s=%s: %s" % (record["script"], record["flag"], record["value"],
                                       record["error"] or "accepted"))
      continue
    if not expected:
      error = record["error"] or ""
      # A value outside a rule between two flags (--phase2_max_predictions_per_seq above the
      # default --phase2_max_seq_length) is judged only once the flag acts: it is named first.
      acts_only = ("--%s acts only with %s" % (record["flag"], ACTS_ONLY_WITH[record["flag"]])
                   if record["flag"] in ACTS_ONLY_WITH else None)
      named = [acts_only] if in_range else ["--%s=" % record["flag"], acts_only]
      if not (error.startswith("%s.py: error: --" % record["script"]) and "\n" not in error
              and any(name and name in error for name in named)):
        wrong.append("%s --%s=%s: message %r" % (record["script"], record["flag"],
                                                record["value"], error))
  assert not wrong, "\n".join(wrong[:40])


def test_every_flag_rule_belongs_to_a_flag(walk):
  """No rule for a flag that no script defines (a renamed flag would lose its check)."""
  assert set(cli.FLAG_RULES) <= {record["flag"] for record in walk}


def _write(path, text: str) -> str:
  with open(path, "w", encoding="utf-8") as writer:
    writer.write(text)
  return str(path)


TINY_CONFIG = dict(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=16, max_position_embeddings=32, type_vocab_size=2)


@pytest.mark.parametrize("content, expected", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object, got list"),
    (json.dumps(dict(TINY_CONFIG, hidden_size="768")), "hidden_size must be a positive integer"),
    (json.dumps(dict(TINY_CONFIG, hidden_size=-8)), "hidden_size must be a positive integer"),
    (json.dumps(dict(TINY_CONFIG, hidden_size=9)), "must be a multiple of num_attention_heads"),
    (json.dumps(dict(TINY_CONFIG, hidden_act="mish")), "hidden_act has unsupported value"),
    (json.dumps(dict(TINY_CONFIG, num_hidden_layers=10**9)), "num_hidden_layers must be at most"),
    (json.dumps(dict(TINY_CONFIG, hidden_size=2**20, intermediate_size=2**20)),
     "parameters"),
    (json.dumps(dict(TINY_CONFIG, hidden_dropout_prob=1.5)), "hidden_dropout_prob"),
])
def test_config_errors_name_the_file_and_field(tmp_path, content, expected):
  path = _write(tmp_path / "bert_config.json", content)
  with pytest.raises(modeling.ConfigError, match=expected) as error:
    modeling.BertConfig.from_json_file(path)
  assert str(error.value).startswith(path)


def test_a_config_of_realistic_size_counts_bert_base_parameters():
  """BERT-Base uncased has 109,482,240 encoder weights (embeddings, 12 layers, pooler)."""
  config = modeling.BertConfig(vocab_size=30522, type_vocab_size=2)
  assert config.num_parameters() == 109_482_240


@pytest.mark.parametrize("tf_config, expected", [
    ("{", "TF_CONFIG is not valid JSON"),
    ("[]", "TF_CONFIG must be a JSON object"),
    ('{"cluster": {"worker": "host:1"}}', 'cluster["worker"] must be a non-empty list'),
    ('{"cluster": {"worker": ["host"]}}', 'cluster["worker"] must be a non-empty list'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
     "task type 'chief' is not in the cluster"),
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}',
     "task index 2 is not in [0, 2)"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}',
     "task index '0'"),
])
def test_malformed_tf_config_is_named(monkeypatch, tf_config, expected):
  monkeypatch.setenv("TF_CONFIG", tf_config)
  with pytest.raises(distribution.DistributionError, match=re.escape(expected)):
    distribution.check_tf_config()
  with pytest.raises(distribution.DistributionError, match=re.escape(expected)):
    distribution.is_chief()


def test_a_valid_tf_config_passes(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:2"]},
                                              "task": {"type": "worker", "index": 0}}))
  distribution.check_tf_config()
  assert not distribution.is_chief()


def test_vocab_paths_that_are_not_regular_files(tmp_path):
  fifo = str(tmp_path / "fifo")
  os.mkfifo(fifo)
  for path, expected in ((str(tmp_path), "is a directory"), (fifo, "is not a regular file"),
                         ("/dev/null", "is not a regular file"),
                         (str(tmp_path / "absent.txt"), "does not exist")):
    with pytest.raises(errors.InputError, match="`vocab_file`: %s %s" % (path, expected)):
      tokenization.load_vocab(path)


def test_a_file_that_is_not_a_sentencepiece_model_is_named(tmp_path):
  path = _write(tmp_path / "model.spm", "not a model")
  with pytest.raises(tokenization.VocabError, match="^%s is not a SentencePiece model " % path):
    tokenization.FullTokenizer(None, spm_model_file=path)


def test_layers_out_of_range_name_the_allowed_range():
  with pytest.raises(errors.FlagError, match=r"index 4 is out of range .* \(allowed: -4 to 3\)"):
    feature_extraction.parse_layer_indexes("-1,4", 4)
  with pytest.raises(errors.FlagError, match="comma-separated integers"):
    feature_extraction.parse_layer_indexes("last", 4)


def _run_script(args: list, env: dict | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable] + args, cwd=REPO_ROOT, capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {})))


def test_scripts_stop_with_one_line_before_writing_anything(tmp_path):
  """Through the real command line: exit status 1, the last stderr line names the flag or file,
  no traceback, and the output directory is not created."""
  output_dir = tmp_path / "out"
  config = _write(tmp_path / "bert_config.json", json.dumps(dict(TINY_CONFIG, hidden_size=9)))
  vocab = _write(tmp_path / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
  cases = [
      (["run_classifier.py", "--task_name=generic", "--do_train", "--learning_rate=-0.001",
        "--output_dir=%s" % output_dir], {},
       "run_classifier.py: error: --learning_rate=-0.001: must be a finite number > 0"),
      (["run_pretraining.py", "--do_train", "--input_file=x", "--bert_config_file=" + config,
        "--output_dir=%s" % output_dir], {},
       "run_pretraining.py: error: %s: BertConfig field hidden_size (9) must be a multiple of "
       "num_attention_heads (2)" % config),
      (["run_ner.py", "--do_train", "--output_dir=%s" % output_dir, "--vocab_file=" + vocab],
       {"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}'},
       "run_ner.py: error: TF_CONFIG: task index 1 is not in [0, 1) for type 'worker'"),
      # A valid config, read by a script without --max_seq_length.
      (["convert_checkpoint.py", "--init_checkpoint=%s/x" % (tmp_path / "missing"),
        "--bert_config_file=" + _write(tmp_path / "valid_config.json", json.dumps(TINY_CONFIG)),
        "--output_dir=%s" % output_dir], {},
       "convert_checkpoint.py: error: no checkpoint at {0}/x ({0}/x.index does not exist)".format(
           tmp_path / "missing")),
      (["create_pretraining_data.py", "--input_file=x", "--output_file=%s/y" % output_dir,
        "--vocab_file=" + vocab, "--short_seq_prob=1.5"], {},
       "create_pretraining_data.py: error: --short_seq_prob=1.5: must be a number in [0, 1]"),
      # The original's TPU flag on a machine without one.
      (["run_pretraining.py", "--do_train", "--use_tpu=True", "--input_file=" + vocab,
        "--bert_config_file=" + _write(tmp_path / "config_32.json", json.dumps(TINY_CONFIG)),
        "--max_seq_length=32", "--output_dir=%s" % output_dir], {},
       "run_pretraining.py: error: no TPU to run on (--tpu_name=None): ValueError: Please "
       "provide a TPU Name to connect to."),
      (["run_classifier.py", "--task_name=generic", "--do_train", "--max_request_tokens=100",
        "--export_dir=%s/export" % output_dir, "--output_dir=%s" % output_dir], {},
       "run_classifier.py: error: --max_request_tokens=100 must be at least --max_seq_length=128 "
       "(one row of the longest length) for --export_dir"),
      # An export alone needs no texts, but texts need somewhere to go.
      (["extract_features.py", "--init_checkpoint=x", "--input_file=" + vocab,
        "--export_dir=%s/export" % output_dir], {},
       "extract_features.py: error: --output_file is required"),
      # Flags the run would ignore without the flag they act with.
      (["run_classifier.py", "--task_name=generic", "--do_train", "--window_aggregation=max",
        "--output_dir=%s" % output_dir], {},
       "run_classifier.py: error: --window_aggregation acts only with --doc_stride: give "
       "--doc_stride too, or leave --window_aggregation out"),
      (["run_pretraining.py", "--do_train", "--input_file=x", "--phase2_input_file=y",
        "--output_dir=%s" % output_dir], {},
       "run_pretraining.py: error: --phase2_input_file acts only with --phase2_steps: give "
       "--phase2_steps too, or leave --phase2_input_file out"),
      # Before, the default --phase2_max_predictions_per_seq=80 was judged against it first.
      (["run_pretraining.py", "--do_train", "--input_file=x", "--phase2_max_seq_length=64",
        "--output_dir=%s" % output_dir], {},
       "run_pretraining.py: error: --phase2_max_seq_length acts only with --phase2_steps: give "
       "--phase2_steps too, or leave --phase2_max_seq_length out"),
      # create_pretraining_data's own bound, not the other scripts' 3.
      (["create_pretraining_data.py", "--input_file=x", "--output_file=%s/y" % output_dir,
        "--vocab_file=" + vocab, "--max_seq_length=3", "--max_predictions_per_seq=1"], {},
       "create_pretraining_data.py: error: --max_seq_length=3: must be at least 5 ([CLS] A [SEP] "
       "B [SEP], with A and B non-empty)"),
      (["create_pretraining_data.py", "--input_file=x", "--output_file=%s/y" % output_dir,
        "--vocab_file=" + vocab, "--beam_pipeline_options=--runner=DirectRunner"], {},
       "create_pretraining_data.py: error: --beam_pipeline_options acts only with --runner=beam: "
       "give --runner=beam too, or leave --beam_pipeline_options out"),
  ]
  for args, env, expected in cases:
    run = _run_script(args, env)
    assert run.returncode == 1, (args, run.stderr[-2000:])
    assert run.stderr.strip().splitlines()[-1] == expected
    assert "Traceback" not in run.stderr
    assert not output_dir.exists()


@pytest.mark.parametrize("script", ["run_classifier.py", "run_ner.py", "run_squad.py",
                                    "run_multiple_choice.py"])
def test_a_fine_tuning_script_refuses_bad_flags_and_outputs_before_loading_tensorflow(tmp_path,
                                                                                     script):
  # The whole of stderr is the one error line: TensorFlow, which prints its start-up lines
  # whatever TF_CPP_MIN_LOG_LEVEL says, was not loaded (the refusal takes a fraction of a second).
  (tmp_path / "a_file").write_text("kept\n")
  for flag, expected in (("--learning_rate=-1", "--learning_rate=-1.0: must be a finite number"),
                         ("--do_predict", "--output_dir=%s is a file" % (tmp_path / "a_file"))):
    task = ["--task_name=mrpc"] if script == "run_classifier.py" else []
    run = subprocess.run([sys.executable, script, *task, "--do_train",
                          "--output_dir=%s" % (tmp_path / "a_file"), flag], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr[-2000:]
    assert run.stderr.startswith("%s: error: %s" % (script, expected)), run.stderr
  assert (tmp_path / "a_file").read_text() == "kept\n"


def test_bert_traceback_shows_the_traceback_behind_the_line(tmp_path):
  run = _run_script(["create_vocab.py", "--input_file=x", "--output_file=%s" % (tmp_path / "v"),
                     "--vocab_size=0"], {cli.TRACEBACK_VARIABLE: "1"})
  assert run.returncode == 1
  assert "Traceback" in run.stderr and "errors.FlagError: --vocab_size=0" in run.stderr


def test_epochs_that_make_no_step_name_the_settings():
  """Caught once the training examples are counted (the flags alone cannot tell). A Python
  caller reads the settings' names, no command-line flags."""
  config = training_loop.TrainConfig(output_dir="unused", num_train_epochs=0.5,
                                     warmup_proportion=0.1, train_batch_size=32)
  with pytest.raises(errors.FlagError) as error:
    config.with_schedule(40)
  assert str(error.value) == ("`num_train_epochs`=0.5 of 40 training examples at "
                              "`train_batch_size`=32 is less than one step")
  assert config.with_schedule(64).num_train_steps == 1


def _generic_task_arguments(tmp_path) -> list:
  """run_classifier's command line for a two-row generic task and a tiny model from scratch."""
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  _write(data_dir / "train.tsv", "sentence\tlabel\na good day\tpos\na bad night\tneg\n")
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "good", "bad", "day", "night"]
  words += ["w%d" % index for index in range(TINY_CONFIG["vocab_size"] - len(words))]
  return ["run_classifier.py", "--task_name=generic", "--do_train", "--data_dir=%s" % data_dir,
          "--text_a_column=sentence", "--max_seq_length=16", "--output_dir=%s" % (tmp_path / "out"),
          "--vocab_file=" + _write(tmp_path / "vocab.txt", "\n".join(words) + "\n"),
          "--bert_config_file=" + _write(tmp_path / "bert_config.json", json.dumps(TINY_CONFIG))]


def test_a_script_words_the_settings_of_library_messages_as_its_flags(tmp_path):
  """The same library error and warning, through the real command line (`cli.as_flags`)."""
  arguments = _generic_task_arguments(tmp_path)
  run = _run_script(arguments + ["--num_train_epochs=0.5"])
  assert run.returncode == 1, run.stderr[-2000:]
  assert run.stderr.strip().splitlines()[-1] == (
      "run_classifier.py: error: --num_train_epochs=0.5 of 2 training examples at "
      "--train_batch_size=32 is less than one step")
  # optimization's warning about the original's optimizer at a high rate, in the script's log.
  run = _run_script(arguments + ["--num_train_epochs=1", "--train_batch_size=2",
                                 "--learning_rate=1e-3"])
  assert run.returncode == 0, run.stderr[-2000:]
  assert "] --learning_rate=0.001 with --optimizer=bert_adam, the original's optimizer" in (
      run.stderr)
  assert "use --optimizer=adamw" in run.stderr and "`optimizer`" not in run.stderr


_FLAGS = {"learning_rate", "num_train_epochs", "train_batch_size"}


@pytest.mark.parametrize("text, expected", [
    ("`learning_rate` must be > 0, got -1", "--learning_rate must be > 0, got -1"),
    ("`num_train_epochs`=0.5 of 40 training examples at `train_batch_size`=32 is less than one "
     "step", "--num_train_epochs=0.5 of 40 training examples at --train_batch_size=32 is less "
     "than one step"),
    # A backquoted name that is no flag (here: a file's name) keeps its backquotes.
    ("directory d has no `checkpoint` file; pass `learning_rate`", "directory d has no "
     "`checkpoint` file; pass --learning_rate"),
    # Only lowercase identifiers are names: not code, paths or a model's directory name.
    ("`uncased_L-12_H-768_A-12` and `a b` and `Learning_rate` and `` and `x/y`",
     "`uncased_L-12_H-768_A-12` and `a b` and `Learning_rate` and `` and `x/y`"),
    ("no backquotes: --learning_rate=1 and learning_rate stay",
     "no backquotes: --learning_rate=1 and learning_rate stay"),
])
def test_worded_rewrites_each_backquoted_setting(text, expected):
  assert errors.worded(text, lambda name: "--" + name if name in _FLAGS else "`%s`" % name) == (
      expected)


def test_worded_passes_the_bare_name_and_keeps_a_value():
  assert errors.worded("`a` and `b_2`=`3`, `c`=x y", str.upper) == "A and B_2=`3`, C=x y"


def test_the_command_line_words_only_the_running_scripts_flags(monkeypatch):
  flag_values = flags.FlagValues()
  cli.define_common_flags(flag_values=flag_values)
  monkeypatch.setattr(cli, "FLAGS", flag_values)
  assert cli.as_flags("`learning_rate`=-1 with `optimizer`=lamb; no `checkpoint` file, no "
                      "`doc_stride`") == ("--learning_rate=-1 with --optimizer=lamb; no "
                                          "`checkpoint` file, no `doc_stride`")
