"""Artifacts check their companions before any work: the vocab against the model's config, the
records against the vocab (dynamic masking), a task head against evaluation, prediction and
export without training, label and tag names against each other and the head.

Each case is what a user would run (fresh processes where the script is the user's entry point,
tiny models); the expectations come from the files themselves (lines counted here, ids read
from the records here), not from the code under test.
"""

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, write_model_files
import checkpoints
import classifier
import modeling
import pretraining
import tokenization

WORDS = "the a cat dog sat ran big small red blue happy sad day night good bad".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", "."] + WORDS


def tiny_config(vocab_size: int = len(VOCAB)) -> modeling.BertConfig:
  return modeling.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=64, type_vocab_size=2)


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
  """Runs a script of the repository in a fresh process, as a user would."""
  return subprocess.run([sys.executable, os.path.join(REPO_ROOT, script)] + list(args),
                        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)


def assert_one_line_error(result: subprocess.CompletedProcess, script: str, *fragments: str):
  """Exit status 1 and one line `<script>: error: ...` holding every fragment."""
  assert result.returncode == 1, result.stderr[-3000:]
  lines = [line for line in result.stderr.splitlines() if line.startswith(script + ": error:")]
  assert len(lines) == 1, result.stderr[-3000:]
  for fragment in fragments:
    assert fragment in lines[0], lines[0]
  return lines[0]


def count_lines(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for _ in f)


# ------------------------------------------------------------------------------------------------
# The config's own values.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_initializer_range_is_refused(tmp_path, value):
  config_file = tmp_path / "bert_config.json"
  text = tiny_config().to_json_string().replace('"initializer_range": 0.02',
                                                '"initializer_range": %s' % value)
  assert value in text
  config_file.write_text(text)
  with pytest.raises(modeling.ConfigError, match="initializer_range must be a finite number"):
    modeling.BertConfig.from_json_file(str(config_file))


def test_non_finite_extra_float_is_refused(tmp_path):
  config = dict(tiny_config().to_dict(), layer_norm_eps=float("nan"))
  with pytest.raises(modeling.ConfigError, match="layer_norm_eps must be a finite number"):
    modeling.BertConfig.from_dict(config)


# ------------------------------------------------------------------------------------------------
# The vocab against the model.
# ------------------------------------------------------------------------------------------------


def test_google_vocabs_fit_their_configs(chinese_bert_dir, uncased_vocab_file):
  chinese_config = modeling.BertConfig.from_json_file(
      os.path.join(chinese_bert_dir, "bert_config.json"))
  chinese_vocab = os.path.join(chinese_bert_dir, "vocab.txt")
  assert count_lines(chinese_vocab) == chinese_config.vocab_size == 21128
  tokenization.check_vocab_fits_model(chinese_vocab, chinese_config.vocab_size)
  assert count_lines(uncased_vocab_file) == 30522
  tokenization.check_vocab_fits_model(uncased_vocab_file, 30522)
  # NVIDIA's configs pad the uncased vocab's 30522 rows to a multiple of 8.
  tokenization.check_vocab_fits_model(uncased_vocab_file, 30528)
  # Another model's vocab: the English vocab with the Chinese config, and the other way round.
  with pytest.raises(tokenization.VocabError, match=r"has 30522 tokens but the model's vocab_size "
                     r"is 21128"):
    tokenization.check_vocab_fits_model(uncased_vocab_file, chinese_config.vocab_size)
  with pytest.raises(tokenization.VocabError, match=r"has 21128 tokens but .* is 30522"):
    tokenization.check_vocab_fits_model(chinese_vocab, 30522)


def test_vocab_without_a_special_token_is_refused(tmp_path):
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(token for token in VOCAB if token != "[SEP]") + "\n")
  with pytest.raises(tokenization.VocabError, match=r"has no \[SEP\] token"):
    tokenization.check_vocab_fits_model(str(vocab_file), len(VOCAB) - 1)
  with pytest.raises(tokenization.VocabError, match=r"has no \[SEP\] or \[MASK\] token"):
    vocab_file.write_text("\n".join(t for t in VOCAB if t not in ("[SEP]", "[MASK]")) + "\n")
    tokenization.check_vocab_fits_model(str(vocab_file), len(VOCAB) - 2,
                                        special_tokens=("[CLS]", "[SEP]", "[MASK]"))


def test_fill_mask_export_refuses_a_short_vocab(tmp_path, uncased_vocab_file):
  # The first 200 lines of the 30522-token vocab for a model of 30522 tokens: before, every
  # served token id above 199 came back as "".
  with open(uncased_vocab_file, encoding="utf-8") as f:
    head = [next(f) for _ in range(200)]
  short_vocab = tmp_path / "vocab_200.txt"
  short_vocab.write_text("".join(head))
  config_file, _ = write_model_files(str(tmp_path), tiny_config(30522), VOCAB)
  checkpoint = checkpoints.save_checkpoint(pretraining.build_model(tiny_config(30522)),
                                           str(tmp_path / "bert_model.ckpt"))
  export_dir = tmp_path / "export"
  result = run_script("run_pretraining.py", "--do_train=false", "--init_checkpoint=" + checkpoint,
                      "--bert_config_file=%s" % config_file, "--vocab_file=%s" % short_vocab,
                      "--export_dir=%s" % export_dir, "--max_seq_length=32")
  assert_one_line_error(result, "run_pretraining.py", "--vocab_file", str(short_vocab),
                        "has 200 tokens but the model's vocab_size is 30522")
  assert not export_dir.exists()
