"""No tool replaces what it was not asked to write: each script runs in a fresh process, as a user
runs it, on tiny inputs, and every refused run must leave every file as it was."""
import builtins
import errno
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy

import atomic_files
import model_conversion
import squad

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN, LAYERS, INTERMEDIATE, POSITIONS = 16, 2, 24, 64
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    "the", "a", "cat", "dog", "sat", "on", "mat", "alice", "bob", "paris", "london", "saw", "in",
    "and", ".", ",", "is", "was", "big", "small", "red", "blue", "ran", "to", "home", "park", "of",
    "it", "he", "she", "we", "they", "day", "night"]
CORPUS = ["the cat sat on the mat . the dog ran to the park .",
          "alice saw bob in paris . he was big and she was small .", "",
          "we ran home at night . they sat in london on a red day ."] * 20


def _run(script: str, *args: str, umask: int = 0o022, cwd=None) -> subprocess.CompletedProcess:
  """Runs `python <script> <args>` in a fresh process with `umask`."""
  return subprocess.run([sys.executable, os.path.join(REPO, script), *args], cwd=cwd,
                        capture_output=True, text=True, timeout=300,
                        preexec_fn=lambda: os.umask(umask))


def _start(script: str, *args: str) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, os.path.join(REPO, script), *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _tree(path) -> dict:
  """Every file under `path` (or `path` itself) by relative name: its content's sha256."""
  path = str(path)
  if os.path.isfile(path):
    with open(path, "rb") as f:
      return {".": hashlib.sha256(f.read()).hexdigest()}
  tree = {}
  for directory, _, names in os.walk(path):
    for name in names:
      full = os.path.join(directory, name)
      with open(full, "rb") as f:
        tree[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
  return tree


def _refused(result, *words: str) -> str:
  """The one error line of a refused run, which must name `words`."""
  assert result.returncode == 1, result.stderr[-2000:]
  line = result.stderr.strip().splitlines()[-1]
  assert "error:" in line and all(word in line for word in words), line
  return line


def _hf_classifier(directory, labels, seed: int, intermediate: int = INTERMEDIATE) -> str:
  """A tiny Hugging Face BertForSequenceClassification as transformers saves it (a wide
  `intermediate` size makes its files take longer to write)."""
  rng = np.random.default_rng(seed)
  tensors = {}

  def add(name, *shape):
    tensors[name] = (0.2 * rng.normal(size=shape)).astype(np.float32)

  add("bert.embeddings.word_embeddings.weight", len(VOCAB), HIDDEN)
  add("bert.embeddings.position_embeddings.weight", POSITIONS, HIDDEN)
  add("bert.embeddings.token_type_embeddings.weight", 2, HIDDEN)
  norms = ["bert.embeddings.LayerNorm"]
  for i in range(LAYERS):
    layer = "bert.encoder.layer.%d." % i
    for part, out_size, in_size in (("attention.self.query", HIDDEN, HIDDEN),
                                    ("attention.self.key", HIDDEN, HIDDEN),
                                    ("attention.self.value", HIDDEN, HIDDEN),
                                    ("attention.output.dense", HIDDEN, HIDDEN),
                                    ("intermediate.dense", intermediate, HIDDEN),
                                    ("output.dense", HIDDEN, intermediate)):
      add(layer + part + ".weight", out_size, in_size)
      add(layer + part + ".bias", out_size)
    norms += [layer + "attention.output.LayerNorm", layer + "output.LayerNorm"]
  for norm in norms:
    tensors[norm + ".weight"] = np.ones(HIDDEN, np.float32)
    add(norm + ".bias", HIDDEN)
  add("bert.pooler.dense.weight", HIDDEN, HIDDEN)
  add("bert.pooler.dense.bias", HIDDEN)
  add("classifier.weight", len(labels), HIDDEN)
  add("classifier.bias", len(labels))
  os.makedirs(directory)
  safetensors.numpy.save_file(tensors, os.path.join(directory, "model.safetensors"),
                              metadata={"format": "pt"})
  config = {
      "architectures": ["BertForSequenceClassification"], "model_type": "bert",
      "vocab_size": len(VOCAB), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
      "num_attention_heads": 4, "intermediate_size": intermediate, "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
      "max_position_embeddings": POSITIONS, "type_vocab_size": 2, "initializer_range": 0.02,
      "layer_norm_eps": 1e-12, "id2label": {str(i): label for i, label in enumerate(labels)},
      "label2id": {label: i for i, label in enumerate(labels)}}
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(directory, "vocab.txt"), "w") as f:
    f.write("".join(token + "\n" for token in VOCAB))
  return str(directory)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """A corpus, a vocab, two Hugging Face classifiers (labels neg/pos and x/y/z, the second wide
  enough to take a while to write) and the first converted to Google's format."""
  root = tmp_path_factory.mktemp("outputs")
  corpus, vocab = root / "corpus.txt", root / "vocab.txt"
  corpus.write_text("\n".join(CORPUS) + "\n")
  vocab.write_text("".join(token + "\n" for token in VOCAB))
  first = _hf_classifier(root / "hf_first", ["neg", "pos"], seed=1)
  second = _hf_classifier(root / "hf_second", ["x", "y", "z"], seed=2, intermediate=50000)
  google = root / "google"
  # What `convert_checkpoint.py --hf_model_path=<first> --output_dir=<google>` writes (the same
  # files and mark, under _run's umask), in this process: a fixture, not a behaviour under test.
  umask = os.umask(0o022)
  try:
    model_conversion.convert_hf_to_google(first, str(google))
  finally:
    os.umask(umask)
  return dict(root=root, corpus=str(corpus), vocab=str(vocab), first=first, second=second,
              google=str(google), checkpoint=str(google / "bert_model.ckpt"),
              config=str(google / "bert_config.json"))


# ------------------------------------------------------------------------------------------------
# The data tools (pure Python, fast).
# ------------------------------------------------------------------------------------------------


def test_a_file_output_named_with_a_trailing_separator_is_refused_creating_nothing(files, tmp_path):
  before = sorted(os.listdir(tmp_path))
  _refused(_run("create_pretraining_data.py", "--input_file=" + files["corpus"],
                "--output_file=%s/" % (tmp_path / "new.tfrecord"), "--vocab_file=" + files["vocab"]),
           "--output_file", "must name a file")
  assert sorted(os.listdir(tmp_path)) == before


def test_a_file_output_never_replaces_a_directory(files, tmp_path):
  directory = tmp_path / "existing"
  directory.mkdir()
  (directory / "keep.txt").write_text("precious\n")
  before = _tree(directory)
  _refused(_run("create_vocab.py", "--input_file=" + files["corpus"],
                "--output_file=%s" % directory, "--vocab_size=64"), "--output_file", "directory")
  _refused(_run("create_pretraining_data.py", "--input_file=" + files["corpus"],
                "--output_file=%s" % directory, "--vocab_file=" + files["vocab"]),
           "--output_file", "directory")
  assert _tree(directory) == before


@pytest.mark.parametrize("alias", ["same", "relative", "symlink", "hard_link", "glob"])
def test_an_output_never_replaces_an_input(files, tmp_path, alias):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text(open(files["corpus"]).read())
  input_flag, output = str(corpus), str(corpus)
  if alias == "relative":
    output = os.path.relpath(corpus)
  elif alias == "symlink":
    output = str(tmp_path / "link.txt")
    os.symlink(corpus, output)
  elif alias == "hard_link":
    output = str(tmp_path / "hard.txt")
    os.link(corpus, output)
  elif alias == "glob":
    input_flag = str(tmp_path / "c*.txt") + ",%s" % files["corpus"]
  before = _tree(tmp_path)
  _refused(_run("create_vocab.py", "--input_file=" + input_flag, "--output_file=" + output,
                "--vocab_size=64"), "--output_file", "overwrite input --input_file")
  assert _tree(tmp_path) == before


def test_a_file_output_never_replaces_or_adds_a_file_of_a_training_run(files, tmp_path):
  """A training run's checkpoints, record and state belong together: a file output into its
  directory may neither replace one of its files nor take the name of one (a run would read a
  new `model.ckpt-*` as its own). A new file of another name is written."""
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  for name in ("checkpoint", "training_settings.json", "model.ckpt-5.index",
               "model.ckpt-5.data-00000-of-00001", "notes.txt"):
    (run_dir / name).write_text("kept\n")
  before = _tree(run_dir)
  for name in ("model.ckpt-5.data-00000-of-00001", "training_settings.json", "notes.txt",
               "model.ckpt-9.index"):
    _refused(_run("create_vocab.py", "--input_file=" + files["corpus"],
                  "--output_file=%s" % (run_dir / name), "--vocab_size=64"),
             "--output_file", "is a file of the training run in %s" % run_dir)
  os.symlink(run_dir / "checkpoint", tmp_path / "link")
  _refused(_run("create_pretraining_data.py", "--input_file=" + files["corpus"],
                "--output_file=%s" % (tmp_path / "link"), "--vocab_file=" + files["vocab"]),
           "--output_file", "is a file of the training run")
  # Nor a name the run's scripts read there though it has none yet: before, a vocab or features
  # written as label_list.txt became the names of a GLUE run's outputs, exit 0 (probe 23 cases
  # 30-32, 59); a vocab.txt or bert_config.json there would be read as its model's.
  for script, name in (("create_vocab.py", "label_list.txt"), ("create_vocab.py", "vocab.txt"),
                       ("create_pretraining_data.py", "train.tf_record"),
                       ("create_vocab.py", "bert_config.json"), ("create_vocab.py", "best"),
                       ("create_vocab.py", "eval_history.json")):
    flags = (["--vocab_size=64"] if script == "create_vocab.py" else
             ["--vocab_file=" + files["vocab"]])
    _refused(_run(script, "--input_file=" + files["corpus"],
                  "--output_file=%s" % (run_dir / name), *flags),
             "--output_file", "is a file of the training run in %s" % run_dir)
  assert _tree(run_dir) == before
  written = _run("create_vocab.py", "--input_file=" + files["corpus"],
                 "--output_file=%s" % (run_dir / "vocab_64.txt"), "--vocab_size=64")
  assert written.returncode == 0, written.stderr[-2000:]


def test_a_file_output_never_replaces_a_file_of_a_model(files, tmp_path):
  """A model's directory (a Google release, a Hugging Face model, a TF Serving version, a
  conversion) holds files that belong together: a file output there never replaces one. Before,
  create_vocab.py --output_file=<release>/vocab.txt replaced a release's vocab, exit 0. A new
  file of another name is written; a directory with no model is the user's to write in."""
  models = {"release": ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
                        "vocab.txt", "bert_config.json"),
            "hf": ("model.safetensors", "config.json", "vocab.txt"),
            "hf_pytorch": ("pytorch_model.bin", "config.json", "vocab.txt"),
            "export/1": ("saved_model.pb", "fingerprint.pb"),
            "export/1/assets": ("vocab.txt",),  # The vocab the served graph tokenizes with.
            "export/1/assets.extra": ("tf_serving_warmup_requests",),  # TF Serving replays it.
            "preset": ("config.json", "model.weights.h5"),  # A KerasHub preset.
            "preset/assets/tokenizer": ("vocabulary.txt",),
            "converted": (".convert_checkpoint.json", "bert_config.json", "vocab.txt")}
  for directory, names in models.items():
    (tmp_path / directory).mkdir(parents=True, exist_ok=True)
    for name in names:
      (tmp_path / directory / name).write_text("kept\n")
  before = _tree(tmp_path)
  model_of = {"export/1/assets": "export/1", "export/1/assets.extra": "export/1",
              "preset/assets/tokenizer": "preset"}
  for directory, names in models.items():
    for name in names[-2:]:
      model = tmp_path / model_of.get(directory, directory)
      _refused(_run("create_vocab.py", "--input_file=" + files["corpus"],
                    "--output_file=%s" % (tmp_path / directory / name), "--vocab_size=64"),
               "--output_file", "is in the SavedModel in %s " % model
               if directory.startswith("export") else "is a file of the model in %s" % model)
  assert _tree(tmp_path) == before
  (tmp_path / "plain").mkdir()
  (tmp_path / "plain" / "vocab.txt").write_text("an old vocab of the user's own\n")
  for output in (tmp_path / "release" / "vocab_64.txt", tmp_path / "plain" / "vocab.txt"):
    written = _run("create_vocab.py", "--input_file=" + files["corpus"],
                   "--output_file=%s" % output, "--vocab_size=64")
    assert written.returncode == 0, written.stderr[-2000:]


def test_a_symlink_to_nothing_names_a_file_whose_directory_exists_and_a_loop_nothing(
    files, tmp_path):
  """A dangling symlink as an output is written through, as the shell's `>`, where it names a
  file in an existing directory; a directory output through one, a file in a missing directory
  and a loop of symlinks are refused before any work."""
  (tmp_path / "to_file").symlink_to(tmp_path / "vocab.txt")
  (tmp_path / "to_nothing").symlink_to(tmp_path / "missing" / "vocab.txt")
  (tmp_path / "to_dir").symlink_to(tmp_path / "missing_dir")
  (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
  (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
  vocab = ["--input_file=" + files["corpus"], "--vocab_size=64"]
  written = _run("create_vocab.py", *vocab, "--output_file=%s" % (tmp_path / "to_file"))
  assert written.returncode == 0, written.stderr[-2000:]
  assert (tmp_path / "vocab.txt").read_text().startswith("[PAD]\n")
  _refused(_run("create_vocab.py", *vocab, "--output_file=%s" % (tmp_path / "to_nothing")),
           "--output_file", "which does not exist")
  _refused(_run("create_vocab.py", *vocab, "--output_file=%s" % (tmp_path / "loop_a")),
           "--output_file", "is a loop of symlinks")
  _refused(_run("run_classifier.py", "--task_name=mrpc", "--do_train",
                "--output_dir=%s" % (tmp_path / "to_dir"), "--data_dir=%s" % tmp_path,
                "--vocab_file=" + files["vocab"], "--bert_config_file=" + files["config"]),
           "--output_dir", "which does not exist")
  assert not (tmp_path / "missing").exists() and not (tmp_path / "missing_dir").exists()


def test_records_never_replace_their_vocab_and_two_outputs_differ(files, tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text(open(files["vocab"]).read())
  before = _tree(tmp_path)
  _refused(_run("create_pretraining_data.py", "--input_file=" + files["corpus"],
                "--output_file=%s" % vocab, "--vocab_file=%s" % vocab),
           "--output_file", "--vocab_file")
  _refused(_run("create_pretraining_data.py", "--input_file=" + files["corpus"],
                "--output_file=%s,%s" % (tmp_path / "a.tfrecord", tmp_path / "." / "a.tfrecord"),
                "--vocab_file=%s" % vocab), "same output")
  assert _tree(tmp_path) == before


def test_a_shard_never_reads_the_records_of_another_shard_or_its_own(files, tmp_path):
  # Before, `--input_file='dir/*'` beside `--output_file=dir/out --num_shards=2`: shard 0 wrote
  # out-00000-of-00002 into dir, and shard 1 (the same command, as the README runs shards) read
  # it as text, made 81% of its instances of the record's bytes and exited 0 (probe 20).
  corpus_dir = tmp_path / "corpus"
  corpus_dir.mkdir()
  shutil.copy(files["corpus"], corpus_dir / "a.txt")
  shard_flags = ["--output_file=%s" % (corpus_dir / "out.tfrecord"), "--num_shards=2",
                 "--vocab_file=" + files["vocab"], "--max_seq_length=16",
                 "--max_predictions_per_seq=2"]
  result = _run("create_pretraining_data.py", "--input_file=%s" % (corpus_dir / "a.txt"),
                "--shard_index=0", *shard_flags)
  assert result.returncode == 0, result.stderr[-2000:]
  before = _tree(tmp_path)
  for index in (0, 1):  # The pattern names this run's output, whether written yet or not.
    _refused(_run("create_pretraining_data.py", "--input_file=%s/*" % corpus_dir,
                  "--shard_index=%d" % index, *shard_flags),
             "--input_file", "out.tfrecord-0000%d-of-00002" % index)
  # A narrower pattern that names only the other shard's file.
  _refused(_run("create_pretraining_data.py", "--input_file=%s/*0-of-*,%s" % (
      corpus_dir, corpus_dir / "a.txt"), "--shard_index=1", *shard_flags),
           "out.tfrecord-00000-of-00002, which another run of this job writes")
  # Any other pattern or list that names the records read them as text: refused as not text.
  for input_file in ("%s/*" % corpus_dir, "%s,%s" % (corpus_dir / "a.txt", corpus_dir /
                                                     "out.tfrecord-00000-of-00002")):
    _refused(_run("create_pretraining_data.py", "--input_file=" + input_file,
                  "--output_file=%s" % (tmp_path / "elsewhere.tfrecord"),
                  "--vocab_file=" + files["vocab"]),
             "out.tfrecord-00000-of-00002 is not UTF-8 text")
    _refused(_run("create_vocab.py", "--input_file=" + input_file,
                  "--output_file=%s" % (tmp_path / "vocab.txt"), "--vocab_size=100"),
             "out.tfrecord-00000-of-00002 is not UTF-8 text")
  assert _tree(tmp_path) == before


def test_a_corpus_pattern_never_takes_in_the_vocab_nor_a_list_entry_its_spaces(files, tmp_path):
  # Before, `--input_file='dir/*'` beside `--vocab_file=dir/vocab.txt` made the vocab most of the
  # corpus, exit 0; and `--output_file="a, b"` created a directory named " <b's parent>" in the
  # working directory, then failed to write b where its parent was missing (probe 20).
  corpus_dir = tmp_path / "corpus"
  corpus_dir.mkdir()
  shutil.copy(files["corpus"], corpus_dir / "a.txt")
  shutil.copy(files["vocab"], corpus_dir / "vocab.txt")
  _refused(_run("create_pretraining_data.py", "--input_file=%s/*" % corpus_dir,
                "--output_file=%s" % (tmp_path / "out.tfrecord"),
                "--vocab_file=%s" % (corpus_dir / "vocab.txt")),
           "--input_file names %s, which is --vocab_file" % (corpus_dir / "vocab.txt"))
  assert not (tmp_path / "out.tfrecord").exists()
  work = tmp_path / "work"
  work.mkdir()
  outputs = [tmp_path / "records" / "a.tfrecord", tmp_path / "records" / "new" / "b.tfrecord"]
  result = _run("create_pretraining_data.py", "--input_file=" + files["corpus"],
                "--output_file=%s, %s" % tuple(outputs), "--vocab_file=" + files["vocab"],
                "--max_seq_length=16", "--max_predictions_per_seq=2", cwd=str(work))
  assert result.returncode == 0, result.stderr[-2000:]
  assert all(path.is_file() for path in outputs)
  assert os.listdir(work) == []


def test_a_data_file_hard_linked_under_a_name_the_run_writes_is_refused_before_any_work(
    files, tmp_path):
  # Before, a --predict_file (or CoNLL test file) hard-linked as output_dir/predictions.json
  # (test_predictions.txt) was found only when the run wrote there, after training (probe 21).
  output_dir = tmp_path / "run"
  output_dir.mkdir()
  predict_file = tmp_path / "dev.json"
  predict_file.write_text('{"version": "1.1", "data": []}')
  os.link(predict_file, output_dir / "predictions.json")
  conll = tmp_path / "conll"
  conll.mkdir()
  (conll / "test.txt").write_text("EU B-ORG\n")
  os.link(conll / "test.txt", output_dir / "test_predictions.txt")
  before = _tree(tmp_path)
  _refused(_run("run_squad.py", "--do_predict", "--predict_file=%s" % predict_file,
                "--vocab_file=" + files["vocab"], "--output_dir=%s" % output_dir),
           "--predict_file=%s is the file --output_dir=%s holds as predictions.json" % (
               predict_file, output_dir))
  _refused(_run("run_ner.py", "--do_predict", "--data_dir=%s" % conll,
                "--vocab_file=" + files["vocab"], "--output_dir=%s" % output_dir),
           "--test_file=%s is the file --output_dir=%s holds as test_predictions.txt" % (
               conll / "test.txt", output_dir))
  assert _tree(tmp_path) == before


def test_a_fifo_is_not_an_output(files, tmp_path):
  fifo = tmp_path / "fifo"
  os.mkfifo(fifo)
  _refused(_run("create_vocab.py", "--input_file=" + files["corpus"], "--output_file=%s" % fifo,
                "--vocab_size=64"), "--output_file", "not a regular file")
  assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_outputs_get_the_users_umask(files, tmp_path, umask, mode):
  output = tmp_path / "vocab.txt"
  result = _run("create_vocab.py", "--input_file=" + files["corpus"], "--output_file=%s" % output,
                "--vocab_size=64", umask=umask)
  assert result.returncode == 0, result.stderr[-2000:]
  assert stat.S_IMODE(os.stat(output).st_mode) == mode


# ------------------------------------------------------------------------------------------------
# convert_checkpoint.py: a converted model is one unit.
# ------------------------------------------------------------------------------------------------


def _fake_training_dir(directory) -> dict:
  """An output_dir of run_classifier trained on labels neg/pos, as far as names go."""
  os.makedirs(directory)
  for name, text in (("label_list.txt", "neg\npos\n"), ("checkpoint", 'model_checkpoint_path: '
                     '"model.ckpt-10"\n'), ("model.ckpt-10.index", "index"),
                     ("model.ckpt-10.data-00000-of-00001", "data"), ("bert_config.json", "{}")):
    with open(os.path.join(directory, name), "w") as f:
      f.write(text)
  return _tree(directory)


def test_convert_never_writes_into_a_training_output_dir(files, tmp_path):
  training = tmp_path / "classifier_run"
  before = _fake_training_dir(training)
  _refused(_run("convert_checkpoint.py", "--hf_model_path=" + files["second"],
                "--output_dir=%s" % training, "--overwrite_output_dir"),
           "--output_dir", "training run")
  assert _tree(training) == before
  # A directory of runs (before, only its own names were looked at: the flag deleted the runs).
  (tmp_path / "NOTES.txt").write_text("my notes\n")
  before = _tree(tmp_path)
  _refused(_run("convert_checkpoint.py", "--hf_model_path=" + files["first"],
                "--output_dir=%s" % tmp_path, "--overwrite_output_dir"),
           "--output_dir", "holds a training run (classifier_run/checkpoint)")
  assert _tree(tmp_path) == before


def test_convert_replaces_another_model_only_when_asked(files, tmp_path):
  other = tmp_path / "other_model"
  other.mkdir()
  (other / "weights.bin").write_text("another model\n")
  before = _tree(other)
  _refused(_run("convert_checkpoint.py", "--hf_model_path=" + files["second"],
                "--output_dir=%s" % other), "--output_dir", "--overwrite_output_dir")
  assert _tree(other) == before
  result = _run("convert_checkpoint.py", "--hf_model_path=" + files["second"],
                "--output_dir=%s" % other, "--overwrite_output_dir", umask=0o022)
  assert result.returncode == 0, result.stderr[-2000:]
  assert ("Replacing --output_dir=%s and the 1 files in it (weights.bin): --overwrite_output_dir "
          "was given" % other) in result.stderr
  names = sorted(os.listdir(other))
  assert names == [".convert_checkpoint.json", "bert_config.json", "bert_model.ckpt.data-00000-of-"
                   "00001", "bert_model.ckpt.index", "label_list.txt", "vocab.txt"]
  assert (other / "label_list.txt").read_text() == "x\ny\nz\n"
  assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]
  for name in names:
    assert stat.S_IMODE(os.stat(other / name).st_mode) == 0o644, name


@pytest.fixture(scope="module")
def reconverted(files):
  """An earlier conversion of the first model (a copy of files["google"]) converted again over
  itself through the command line: unchanged, an earlier conversion is replaced unasked. Built
  once for the cases below, which each edit their own copy; a conversion records its source's
  path, not its own (`.convert_checkpoint.json`), so a copy is one too."""
  converted = files["root"] / "reconverted"
  shutil.copytree(files["google"], converted)
  result = _run("convert_checkpoint.py", "--hf_model_path=" + files["first"],
                "--output_dir=%s" % converted)
  assert result.returncode == 0, result.stderr[-2000:]
  return converted


@pytest.mark.parametrize("changed_file, refusal", [
    ("notes.txt", "did not write or that changed since (notes.txt)"),  # Added.
    ("label_list.txt", "did not write or that changed since (label_list.txt)")])  # Edited.
def test_convert_never_replaces_what_the_user_added_to_or_edited_in_a_conversion(
    files, reconverted, tmp_path, changed_file, refusal):
  """An earlier conversion is replaced without asking only while it holds just what it wrote, as
  it wrote it: a file added since (notes, test_results.tsv of a --do_predict there) or edited
  since (a label name fixed by hand; before, only names were compared and the edit was silently
  undone) needs the flag."""
  converted = tmp_path / "converted"
  shutil.copytree(reconverted, converted)  # Unchanged, it was replaced unasked.
  (converted / changed_file).write_text("negative\npositive\n")
  before = _tree(converted)
  _refused(_run("convert_checkpoint.py", "--hf_model_path=" + files["first"],
                "--output_dir=%s" % converted), "--output_dir", refusal, "--overwrite_output_dir")
  assert _tree(converted) == before


def test_convert_to_hugging_face_applies_the_umask(files, tmp_path):
  output = tmp_path / "hf"
  result = _run("convert_checkpoint.py", "--init_checkpoint=" + files["checkpoint"],
                "--bert_config_file=" + files["config"], "--output_dir=%s" % output, umask=0o027)
  assert result.returncode == 0, result.stderr[-2000:]
  for name in ("model.safetensors", "config.json", "vocab.txt"):
    assert stat.S_IMODE(os.stat(output / name).st_mode) == 0o640, name


def _snapshot(directory) -> tuple:
  """(names, config, checkpoint index, label list) of `directory`, or None when it changed while
  being read."""
  try:
    before = os.stat(directory).st_ino
    names = tuple(sorted(n for n in os.listdir(directory) if not n.startswith(".")))
    contents = []
    for name in ("bert_config.json", "bert_model.ckpt.index", "label_list.txt"):
      with open(os.path.join(directory, name), "rb") as f:
        contents.append(hashlib.sha256(f.read()).hexdigest())
    after = os.stat(directory).st_ino
  except FileNotFoundError:
    return ("missing",)
  return (names, *contents) if before == after else None


def test_a_reader_sees_the_old_or_the_new_model_never_a_mix(files, tmp_path):
  target = tmp_path / "model"
  shutil.copytree(files["google"], target)  # An earlier conversion of the first model.
  old = _snapshot(target)
  process = _start("convert_checkpoint.py", "--hf_model_path=" + files["second"],
                   "--output_dir=%s" % target)
  seen = set()
  while process.poll() is None:
    seen.add(_snapshot(target))
  assert process.returncode == 0, process.stderr.read()[-2000:]
  new = _snapshot(target)
  assert old[0] == new[0] and all(old[i] != new[i] for i in (1, 2, 3))
  assert (target / "label_list.txt").read_text() == "x\ny\nz\n"
  assert seen - {None} <= {old, new}


def _visible_files(directory) -> dict:
  """Name: (inode, size, mtime) of the complete (not hidden) files in `directory`."""
  try:
    entries = list(os.scandir(directory))
  except FileNotFoundError:
    return {}
  return {entry.name: (entry.inode(), entry.stat().st_size, entry.stat().st_mtime_ns)
          for entry in entries if not entry.name.startswith(".")}


def _has_written_file(directory) -> bool:
  for _, _, names in os.walk(directory):
    if any(not name.startswith(".") for name in names):
      return True
  return False


def test_a_kill_after_the_first_file_leaves_the_old_or_the_new_model(files, tmp_path):
  """Kills the converter as soon as one new file is complete (in the target, or in anything it
  stages beside it): the target must then hold the old model or the new one, whole, never some
  files of each. At least one kill must land while a file was written but not yet published; the
  next run replaces the model and leaves nothing else behind."""
  target = tmp_path / "model"
  old = _tree(files["google"])  # An earlier conversion of the first model.
  kills_mid_write = 0
  for _ in range(4):
    if os.path.exists(target) and _tree(target) != old:
      shutil.rmtree(target)
    if not os.path.exists(target):
      shutil.copytree(files["google"], target)
    old_files = _visible_files(target)
    process = _start("convert_checkpoint.py", "--hf_model_path=" + files["second"],
                     "--output_dir=%s" % target)
    while process.poll() is None:
      staged = [tmp_path / name for name in os.listdir(tmp_path) if name.startswith(".")]
      mid_write = any(map(_has_written_file, staged))
      if mid_write or _visible_files(target) != old_files:
        process.send_signal(signal.SIGKILL)
        kills_mid_write += mid_write
        break
    process.wait()
    after = _tree(target)
    unchanged = {name for name in after if after[name] == old.get(name)}
    assert set(after) == set(old) and (after == old or unchanged == {"vocab.txt"}), unchanged
    if kills_mid_write:
      break
  assert kills_mid_write, "no kill landed while the converter was writing"
  assert _run("convert_checkpoint.py", "--hf_model_path=" + files["second"],
              "--output_dir=%s" % target).returncode == 0
  assert (target / "label_list.txt").read_text() == "x\ny\nz\n"
  assert sorted(os.listdir(tmp_path)) == ["model"]


# ------------------------------------------------------------------------------------------------
# Every script.
# ------------------------------------------------------------------------------------------------


def test_run_ner_never_replaces_the_tag_list_of_its_output_dir(files, tmp_path):
  data_dir, output_dir = tmp_path / "data", tmp_path / "ner_run"
  data_dir.mkdir()
  output_dir.mkdir()
  (data_dir / "train.txt").write_text("alice B-PER\nsaw O\nparis B-LOC\n\nbob B-PER\nran O\n\n")
  (output_dir / "tag_list.txt").write_text("O\nB-ORG\n")
  before = _tree(output_dir)
  _refused(_run("run_ner.py", "--do_train", "--data_dir=%s" % data_dir,
                "--output_dir=%s" % output_dir, "--vocab_file=" + files["vocab"],
                "--bert_config_file=" + files["config"], "--init_checkpoint=" + files["checkpoint"],
                "--max_seq_length=16", "--num_train_epochs=1", "--train_batch_size=2"),
           "tag_list.txt", "other labels", "--output_dir")
  assert _tree(output_dir) == before


def test_no_tool_replaces_a_directory_an_input_or_a_file_of_the_other_kind(files, tmp_path):
  """Each script, started with an output flag that names what it must not replace, fails in its
  validation pass and changes nothing."""
  a_file = tmp_path / "a_file.txt"
  a_file.write_text("keep me\n")
  a_dir = tmp_path / "a_dir"
  a_dir.mkdir()
  (a_dir / "keep.txt").write_text("keep me too\n")
  model = ["--bert_config_file=" + files["config"], "--init_checkpoint=" + files["checkpoint"],
           "--vocab_file=" + files["vocab"], "--max_seq_length=16"]
  task = model + ["--do_predict", "--data_dir=%s" % tmp_path]
  ner_dir, squad_dir = tmp_path / "ner_data", tmp_path / "squad_data"
  ner_dir.mkdir()
  squad_dir.mkdir()
  (ner_dir / "test_predictions.txt").write_text("alice B-PER\n\n")
  (squad_dir / "train.tf_record").write_text('{"version": "v1.1", "data": []}\n')
  run_dir = tmp_path / "run"  # A training run's output_dir.
  run_dir.mkdir()
  for name in ("checkpoint", "model.ckpt-5.index", "training_settings.json"):
    (run_dir / name).write_text("kept\n")
  records_dir = tmp_path / "records"  # Records and the TensorBoard file of a run resumed there.
  records_dir.mkdir()
  (records_dir / "part-0.tfrecord").write_bytes(b"")
  (records_dir / "events.out.tfevents.1700000000.host").write_bytes(b"")
  classifier_run, classifier_data = tmp_path / "classifier_run", tmp_path / "classifier_data"
  classifier_run.mkdir()
  classifier_data.mkdir()
  (classifier_run / "test_results.tsv").write_text("index\tsentence\n0\tthe user's test row\n")
  (classifier_data / "test.tsv").symlink_to(classifier_run / "test_results.tsv")
  runs = {
      "run_classifier.py test file a symlink to its predictions in output_dir": (
          "run_classifier.py", ["--task_name=generic", "--data_dir=%s" % classifier_data,
                                "--text_a_column=sentence", "--output_dir=%s" % classifier_run,
                                *model, "--do_predict"]),
      "run_ner.py test file named as its predictions, in output_dir": (
          "run_ner.py", ["--data_dir=%s" % ner_dir, "--test_file=test_predictions.txt",
                         "--output_dir=%s" % ner_dir, *model, "--do_predict"]),
      "run_squad.py train file named as its feature cache, in output_dir": (
          "run_squad.py", ["--do_train", "--train_file=%s" % (squad_dir / "train.tf_record"),
                           "--output_dir=%s" % squad_dir, *model]),
      "extract_features.py jsonl over a directory": (
          "extract_features.py", ["--input_file=" + files["corpus"], "--output_file=%s" % a_dir,
                                  *model]),
      "extract_features.py npz over a file": (
          "extract_features.py", ["--input_file=" + files["corpus"], "--output_file=%s" % a_file,
                                  "--output_format=npz", *model]),
      "extract_features.py npz over a directory of the user's files": (
          "extract_features.py", ["--input_file=" + files["corpus"], "--output_file=%s" % a_dir,
                                  "--output_format=npz", "--layers=-1", *model]),
      "extract_features.py npz over a training run": (
          "extract_features.py", ["--input_file=" + files["corpus"], "--output_format=npz",
                                  "--layers=-1", "--output_file=%s" % run_dir, *model]),
      "extract_features.py npz holding its vocab": (
          "extract_features.py", ["--input_file=" + files["corpus"], "--output_format=npz",
                                  "--output_file=" + os.path.dirname(files["vocab"]), *model]),
      "convert_checkpoint.py over its source": (
          "convert_checkpoint.py", ["--hf_model_path=" + files["first"],
                                    "--output_dir=" + files["first"]]),
      "convert_checkpoint.py over a file": (
          "convert_checkpoint.py", ["--hf_model_path=" + files["first"],
                                    "--output_dir=%s" % a_file]),
      "run_classifier.py output_dir a file": (
          "run_classifier.py", ["--task_name=mrpc", "--output_dir=%s" % a_file, *task]),
      "run_ner.py export_dir a file": (
          "run_ner.py", ["--output_dir=%s" % (tmp_path / "ner"), "--export_dir=%s" % a_file,
                         *model]),
      "run_squad.py output_dir a file": (
          "run_squad.py", ["--do_predict", "--predict_file=" + files["corpus"],
                           "--output_dir=%s" % a_file, *model]),
      "run_multiple_choice.py output_dir a file": (
          "run_multiple_choice.py", ["--output_dir=%s" % a_file, *task]),
      "run_pretraining.py output_dir a file": (
          "run_pretraining.py", ["--do_eval", "--input_file=" + files["corpus"],
                                 "--max_predictions_per_seq=4", "--output_dir=%s" % a_file,
                                 *model]),
      "run_pretraining.py input glob covering its output_dir's TensorBoard file": (
          "run_pretraining.py", ["--do_train", "--input_file=%s/*" % records_dir,
                                 "--max_predictions_per_seq=4", "--output_dir=%s" % records_dir,
                                 *model]),
      "demo.py output_dir a file": ("demo.py", ["--output_dir=%s" % a_file, "--size=tiny"]),
  }
  watched = [tmp_path, files["root"]]
  before = [_tree(path) for path in watched]
  names = list(runs)
  for start in range(0, len(names), 4):  # A few processes at a time.
    processes = {name: _start(runs[name][0], *runs[name][1]) for name in names[start:start + 4]}
    for name, process in processes.items():
      _, stderr = process.communicate(timeout=300)
      assert process.returncode == 1, (name, stderr[-2000:])
      line = stderr.strip().splitlines()[-1]
      assert "error: --" in line and ("output_" in line or "export_dir" in line), (name, line)
  assert [_tree(path) for path in watched] == before


# ------------------------------------------------------------------------------------------------
# atomic_files, the one output path, below the scripts' checks.
# ------------------------------------------------------------------------------------------------


def test_no_output_is_published_over_an_input_of_the_run(tmp_path):
  """Behind the validation pass: whatever name a script gives an output, it never replaces a file
  the run reads (here through a symlink)."""
  import atomic_files  # pylint: disable=g-import-not-at-top
  import errors  # pylint: disable=g-import-not-at-top
  data = tmp_path / "data.txt"
  data.write_text("the user's data\n")
  (tmp_path / "link.txt").symlink_to(data)
  atomic_files.check_run_paths({"--train_file": [str(data)]}, {})
  try:
    with pytest.raises(errors.InputError, match="would overwrite input --train_file"):
      atomic_files.write_text(str(tmp_path / "link.txt"), "an output\n")
  finally:
    atomic_files.check_run_paths({}, {})  # This process's next run has other inputs.
  assert data.read_text() == "the user's data\n"
  assert sorted(os.listdir(tmp_path)) == ["data.txt", "link.txt"]


def test_the_output_path_never_renames_across_kinds(tmp_path):
  import atomic_files  # pylint: disable=g-import-not-at-top
  import errors  # pylint: disable=g-import-not-at-top
  directory, a_file = tmp_path / "directory", tmp_path / "a_file"
  directory.mkdir()
  (directory / "keep.txt").write_text("kept\n")
  a_file.write_text("kept too\n")
  with pytest.raises(errors.InputError, match="is a directory: refusing to replace it with a file"):
    atomic_files.write_text(str(directory), "new\n")
  with pytest.raises(errors.InputError, match="is a file: refusing to replace it with a directory"):
    with atomic_files.atomic_output(str(a_file)) as temporary:
      os.makedirs(os.path.join(temporary, "inside"))
  assert _tree(tmp_path) == {"directory/keep.txt": _tree(directory / "keep.txt")["."],
                             "a_file": _tree(a_file)["."]}


def test_an_output_named_through_a_symlink_is_written_where_it_points(tmp_path):
  # As the shell's `>`: the link stays and its target gets the output. Before, a link to a
  # directory was "a file" (convert_checkpoint refused it) and a link to a file was replaced.
  import atomic_files  # pylint: disable=g-import-not-at-top
  (tmp_path / "target").mkdir()
  (tmp_path / "to_directory").symlink_to(tmp_path / "target")
  with atomic_files.atomic_output(str(tmp_path / "to_directory")) as temporary:
    os.makedirs(temporary)
    with open(os.path.join(temporary, "model.txt"), "w") as f:
      f.write("the model\n")
  (tmp_path / "file.txt").write_text("old\n")
  (tmp_path / "to_file").symlink_to(tmp_path / "file.txt")
  atomic_files.write_text(str(tmp_path / "to_file"), "new\n")
  assert (tmp_path / "to_directory").is_symlink() and (tmp_path / "to_file").is_symlink()
  assert _tree(tmp_path / "target") == {"model.txt": _tree(tmp_path / "target" / "model.txt")["."]}
  assert (tmp_path / "file.txt").read_text() == "new\n"


def test_a_directory_replaced_whole_is_judged_by_what_a_symlink_to_it_holds(tmp_path):
  # Before, a symlink to a user's directory or a training run passed the check (a link is no
  # directory) and convert_checkpoint or an npz output then replaced what it points to.
  import atomic_files  # pylint: disable=g-import-not-at-top
  import errors  # pylint: disable=g-import-not-at-top
  (tmp_path / "documents").mkdir()
  (tmp_path / "documents" / "thesis.txt").write_text("years of work\n")
  run = tmp_path / "run"
  _fake_training_dir(run)
  for target, converter_refusal, npz_refusal in (
      ("documents", "it holds thesis.txt", "did not write \\(thesis.txt\\)"),
      ("run", "holds a training run", "holds a training run")):
    link = tmp_path / ("link_to_" + target)
    link.symlink_to(tmp_path / target)
    with pytest.raises(errors.FlagError, match=converter_refusal):
      atomic_files.check_replaceable_directory(str(link), "--output_dir", "convert_checkpoint.py",
                                               mark_name=".convert_checkpoint.json")
    with pytest.raises(errors.FlagError, match=npz_refusal):
      atomic_files.check_replaceable_directory(str(link), "--output_file", "extract_features.py",
                                               written_names=["features-*.npz"])
  assert (tmp_path / "documents" / "thesis.txt").read_text() == "years of work\n"


def _dead_pid() -> int:
  process = subprocess.Popen([sys.executable, "-c", "pass"])
  process.wait()
  return process.pid


def test_a_directory_moved_aside_by_a_killed_writer_is_moved_back(tmp_path):
  """Where two names cannot be swapped, the old directory is moved aside before the new one takes
  its name; a writer killed in between leaves no directory under the name, and the next writer
  of it restores the old one before anything else."""
  import socket  # pylint: disable=g-import-not-at-top
  import atomic_files  # pylint: disable=g-import-not-at-top
  target = tmp_path / "model"
  aside = tmp_path / (".model.tmp-%s-%d.old" % (socket.gethostname(), _dead_pid()))
  aside.mkdir()
  (aside / "weights").write_text("old model\n")
  with pytest.raises(RuntimeError):
    with atomic_files.atomic_output(str(target)) as temporary:
      assert (target / "weights").read_text() == "old model\n"
      os.makedirs(temporary)
      raise RuntimeError("stands for a failure while writing the new model")
  assert sorted(os.listdir(tmp_path)) == ["model"]
  assert (target / "weights").read_text() == "old model\n"


def test_without_a_swap_a_directory_is_replaced_by_moving_the_old_one_aside(tmp_path,
                                                                            monkeypatch):
  import atomic_files  # pylint: disable=g-import-not-at-top
  target = tmp_path / "model"
  target.mkdir()
  (target / "weights").write_text("old\n")
  monkeypatch.setattr(atomic_files, "_exchange", lambda first, second: False)
  with atomic_files.atomic_output(str(target)) as temporary:
    os.makedirs(temporary)
    with open(os.path.join(temporary, "weights"), "w") as f:
      f.write("new\n")
  assert sorted(os.listdir(tmp_path)) == ["model"]
  assert (target / "weights").read_text() == "new\n"


def _fake_saved_model(directory, inputs, outputs):
  """A saved_model.pb with one serving signature of these input and output names."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  saved_model = saved_model_pb2.SavedModel()
  signature = saved_model.meta_graphs.add().signature_def["serving_default"]
  for name in inputs:
    signature.inputs[name].name = name + ":0"
  for name in outputs:
    signature.outputs[name].name = name + ":0"
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
    f.write(saved_model.SerializeToString())
  return str(directory)


def test_an_export_never_joins_the_versions_of_another_kind_of_model(tmp_path):
  """TF Serving serves the newest version: a tagger's export after a classifier's would switch
  the endpoint to another model."""
  import errors  # pylint: disable=g-import-not-at-top
  import export  # pylint: disable=g-import-not-at-top
  export_dir = tmp_path / "models"
  _fake_saved_model(export_dir / "1", ["text_a", "text_b"], ["label", "probabilities"])
  tagger = _fake_saved_model(tmp_path / "staged_tagger", ["text"], ["tags", "words"])
  with pytest.raises(errors.InputError, match=r"version 1 serves another model \(its "
                     r"serving_default takes \[text_a, text_b\] and gives \[label, probabilities\]; "
                     r"this model's serving_default takes \[text\] and gives \[tags, words\]\)"):
    export.check_same_model_kind(tagger, str(export_dir))
  classifier = _fake_saved_model(tmp_path / "staged", ["text_a", "text_b"],
                                 ["label", "probabilities"])
  export.check_same_model_kind(classifier, str(export_dir))  # The same kind: a new version.
  # The same signatures with other label names (MRPC's 0/1, a generic pair task's 4.5/high):
  # before, its export became version 2 and MRPC's clients read "high" (probe 25 case 84).
  for directory, names in ((export_dir / "1", "0\n1\n"), (tmp_path / "staged", "4.5\nhigh\n")):
    (directory / "assets.extra").mkdir()
    (directory / "assets.extra" / export.OUTPUT_NAMES_FILE).write_text(names)
  with pytest.raises(errors.InputError, match=r"version 1 names its outputs 0, 1, this model "
                     r"4\.5, high: it is another model's directory"):
    export.check_same_model_kind(classifier, str(export_dir))
  (tmp_path / "staged" / "assets.extra" / export.OUTPUT_NAMES_FILE).write_text("0\n1\n")
  export.check_same_model_kind(classifier, str(export_dir))  # Retrained on the same labels.


def test_an_export_dir_must_hold_only_versions(files, tmp_path):
  """Before any work: not a version directory itself, not another training run's output_dir."""
  version = _fake_saved_model(tmp_path / "models" / "1", ["text"], ["tags"])
  model = ["--bert_config_file=" + files["config"], "--init_checkpoint=" + files["checkpoint"],
           "--vocab_file=" + files["vocab"], "--max_seq_length=16", "--task_name=mrpc",
           "--data_dir=%s" % tmp_path]
  other_run = tmp_path / "other_run"
  other_run.mkdir()
  (other_run / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')
  before = _tree(tmp_path)
  _refused(_run("run_classifier.py", "--output_dir=%s" % (tmp_path / "out"),
                "--export_dir=" + version, *model), "--export_dir", "version directory")
  _refused(_run("run_classifier.py", "--output_dir=%s" % (tmp_path / "out"),
                "--export_dir=%s" % other_run, *model), "--export_dir", "another training run")
  # Nor is a version a run's directory (its checkpoints would sit in the model TF Serving loads).
  _refused(_run("run_classifier.py", "--output_dir=%s" % version, *model), "--output_dir",
           "is in the SavedModel in %s " % version)
  assert _tree(tmp_path) == before


def test_files_written_together_replace_the_old_set_only_once_all_are_complete(tmp_path,
                                                                               monkeypatch):
  """SQuAD's predictions.json, nbest_predictions.json, null_odds.json and the eval_results.txt
  that scores them belong together: a disk that fills while the last is written leaves all the
  old ones (before, new predictions stood beside the old null odds and scores)."""
  names = ("predictions.json", "nbest_predictions.json", "null_odds.json")
  squad.write_predictions(str(tmp_path), {"q": "old"}, {"q": []}, {"q": 1.0}, {"f1": 10.0})
  before = _tree(tmp_path)
  real_open = builtins.open

  def open_until_the_disk_is_full(path, mode="r", *args, **kwargs):
    if "w" in mode and os.path.basename(str(path)).startswith(".eval_results.txt.tmp"):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_open(path, mode, *args, **kwargs)

  monkeypatch.setattr(builtins, "open", open_until_the_disk_is_full)
  with pytest.raises(OSError, match="while writing %s" % (tmp_path / "eval_results.txt")):
    squad.write_predictions(str(tmp_path), {"q": "new"}, {"q": [{"text": "new"}]}, {"q": -1.0},
                            {"f1": 90.0})
  monkeypatch.undo()
  assert _tree(tmp_path) == before
  assert sorted(os.listdir(tmp_path)) == sorted(names + ("eval_results.txt",))
  squad.write_predictions(str(tmp_path), {"q": "new"}, {"q": [{"text": "new"}]}, {"q": -1.0},
                          {"f1": 90.0})
  assert [json.loads((tmp_path / name).read_text())["q"] for name in names] == [
      "new", [{"text": "new"}], -1.0]
  assert (tmp_path / "eval_results.txt").read_text() == "f1 = 90.0\n"


_KILLED_WRITER = r"""
import os, sys
import atomic_files
paths, when = sys.argv[1:3], sys.argv[3]
rename, replace = atomic_files._rename, os.replace
def killed_after_the_first_rename(source, target):
  rename(source, target)
  os._exit(9)
journals = []
def killed_while_writing_the_journals(source, target):
  journals.append(target)
  if len(journals) == 2:  # The first journal is in place, the second not.
    os._exit(9)
  replace(source, target)
if when == "renaming":
  atomic_files._rename = killed_after_the_first_rename
else:
  os.replace = killed_while_writing_the_journals
atomic_files.write_texts({path: "new " + os.path.basename(path) for path in paths})
"""


@pytest.mark.parametrize("when, expected", [("renaming", "new"), ("journaling", "old")])
def test_a_unit_killed_between_its_renames_is_finished_or_undone(tmp_path, when, expected):
  """Outputs of one unit (create_pretraining_data's TFRecord files, SQuAD's predictions and
  scores) in two directories; their writer dies after the first rename (a new and an old file
  side by side), or while writing the journals (before any rename). The next writer or reader of
  either output finishes or undoes the unit: all new, or all old, and nothing hidden is left."""
  (tmp_path / "x").mkdir()
  (tmp_path / "y").mkdir()
  paths = [str(tmp_path / "x" / "a.tfrecord"), str(tmp_path / "y" / "b.tfrecord")]
  for path in paths:
    with open(path, "w") as f:
      f.write("old " + os.path.basename(path))
  killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, *paths, when], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True)
  assert killed.returncode == 9, killed.stderr[-2000:]
  hidden = sorted(name for directory in ("x", "y") for name in os.listdir(tmp_path / directory)
                  if name.startswith("."))
  assert hidden, "the kill left no journal or temporary: nothing was tested"
  for path in paths:  # As a reader of the files does (run_pretraining's input check).
    atomic_files.recover_interrupted_publish(path)
  for path in paths:
    with open(path) as f:
      assert f.read() == "%s %s" % (expected, os.path.basename(path))
  assert not [name for directory in ("x", "y") for name in os.listdir(tmp_path / directory)
              if name.startswith(".")]
