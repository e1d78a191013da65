"""Tests for convert_checkpoint.py on tiny random Hugging Face-style models generated here."""
import json
import math
import os

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

import checkpoints
import conversion
import errors
import heads
import model_conversion
import modeling

HF_CONFIG = {
    "architectures": ["BertForPreTraining"], "model_type": "bert", "vocab_size": 40,
    "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 24,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 12, "type_vocab_size": 2, "initializer_range": 0.02,
    "layer_norm_eps": 1e-12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "transformers_version": "4.40.0", "use_cache": True,
}


def _random_hf_tensors(prefix: str, with_heads: bool, layer_norm_leaves=("weight", "bias"),
                       seed: int = 0) -> dict:
  """HF BERT tensors by HF name in PyTorch layout (Linear weight [out, in]), plus buffers."""
  rng = np.random.default_rng(seed)
  c = HF_CONFIG
  hidden, vocab = c["hidden_size"], c["vocab_size"]
  tensors = {}

  def rand(*shape):
    return (0.2 * rng.normal(size=shape)).astype(np.float32)

  def linear(name, out_size, in_size):
    tensors[name + ".weight"] = rand(out_size, in_size)
    tensors[name + ".bias"] = rand(out_size)

  def layer_norm(name):
    tensors["%s.%s" % (name, layer_norm_leaves[0])] = 1.0 + rand(hidden)
    tensors["%s.%s" % (name, layer_norm_leaves[1])] = rand(hidden)

  p = prefix
  tensors[p + "embeddings.word_embeddings.weight"] = rand(vocab, hidden)
  tensors[p + "embeddings.position_embeddings.weight"] = rand(c["max_position_embeddings"], hidden)
  tensors[p + "embeddings.token_type_embeddings.weight"] = rand(c["type_vocab_size"], hidden)
  tensors[p + "embeddings.position_ids"] = np.arange(c["max_position_embeddings"])[None]
  layer_norm(p + "embeddings.LayerNorm")
  for i in range(c["num_hidden_layers"]):
    layer = "%sencoder.layer.%d." % (p, i)
    for part in ("query", "key", "value"):
      linear(layer + "attention.self." + part, hidden, hidden)
    linear(layer + "attention.output.dense", hidden, hidden)
    layer_norm(layer + "attention.output.LayerNorm")
    linear(layer + "intermediate.dense", c["intermediate_size"], hidden)
    linear(layer + "output.dense", hidden, c["intermediate_size"])
    layer_norm(layer + "output.LayerNorm")
  linear(p + "pooler.dense", hidden, hidden)
  if with_heads:
    linear("cls.predictions.transform.dense", hidden, hidden)
    layer_norm("cls.predictions.transform.LayerNorm")
    tensors["cls.predictions.bias"] = rand(vocab)
    tensors["cls.predictions.decoder.weight"] = tensors[p + "embeddings.word_embeddings.weight"]
    tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
    linear("cls.seq_relationship", 2, hidden)
  return tensors


def _write_hf_model(directory, tensors, config=None) -> str:
  os.makedirs(directory, exist_ok=True)
  safetensors.numpy.save_file(tensors, os.path.join(directory, "model.safetensors"),
                              metadata={"format": "pt"})
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config or HF_CONFIG, f)
  with open(os.path.join(directory, "vocab.txt"), "w") as f:
    f.write("\n".join("tok%d" % i for i in range(HF_CONFIG["vocab_size"])) + "\n")
  return str(directory)


# ---------------------------------------------------------------- NumPy reference (HF names/layout)

_erf = np.vectorize(math.erf)


def _gelu(x):
  return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x, t, name, leaves):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-12) * t[name + "." + leaves[0]] + t[name + "." + leaves[1]]


def _linear(x, t, name):
  return x @ t[name + ".weight"].T + t[name + ".bias"]


def _numpy_forward(t, prefix, input_ids, input_mask, token_type_ids, leaves=("weight", "bias")):
  """BERT forward pass reading HF tensors by HF name; returns (sequence, pooled, mlm, nsp)."""
  p, c = prefix, HF_CONFIG
  heads, size = c["num_attention_heads"], c["hidden_size"] // c["num_attention_heads"]
  batch, length = input_ids.shape
  x = (t[p + "embeddings.word_embeddings.weight"][input_ids]
       + t[p + "embeddings.position_embeddings.weight"][:length][None]
       + t[p + "embeddings.token_type_embeddings.weight"][token_type_ids])
  x = _layer_norm(x, t, p + "embeddings.LayerNorm", leaves)
  adder = (1.0 - input_mask[:, None, None, :]) * -10000.0
  for i in range(c["num_hidden_layers"]):
    layer = "%sencoder.layer.%d." % (p, i)

    def split(h):
      return h.reshape(batch, length, heads, size).transpose(0, 2, 1, 3)

    q, k, v = (split(_linear(x, t, layer + "attention.self." + part))
               for part in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + adder
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, heads * size)
    attention = _layer_norm(_linear(context, t, layer + "attention.output.dense") + x, t,
                            layer + "attention.output.LayerNorm", leaves)
    intermediate = _gelu(_linear(attention, t, layer + "intermediate.dense"))
    x = _layer_norm(_linear(intermediate, t, layer + "output.dense") + attention, t,
                    layer + "output.LayerNorm", leaves)
  pooled = np.tanh(_linear(x[:, 0], t, p + "pooler.dense"))
  if "cls.predictions.bias" not in t:
    return x, pooled, None, None
  transformed = _layer_norm(_gelu(_linear(x, t, "cls.predictions.transform.dense")), t,
                            "cls.predictions.transform.LayerNorm", leaves)
  mlm = transformed @ t[p + "embeddings.word_embeddings.weight"].T + t["cls.predictions.bias"]
  nsp = _linear(pooled, t, "cls.seq_relationship")
  return x, pooled, mlm, nsp


def _inputs():
  rng = np.random.default_rng(5)
  input_ids = rng.integers(0, HF_CONFIG["vocab_size"], size=(2, 7))
  input_mask = np.ones((2, 7), np.int64)
  input_mask[1, 4:] = 0
  token_type_ids = np.zeros((2, 7), np.int64)
  token_type_ids[:, 3:] = 1
  return input_ids, input_mask, token_type_ids


# ---------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("prefix, with_heads, leaves", [
    ("bert.", True, ("weight", "bias")),    # BertForPreTraining layout
    ("", False, ("weight", "bias")),        # bare BertModel layout (e.g. sentence-transformers)
    ("bert.", False, ("gamma", "beta")),    # old LayerNorm names
])
def test_hf_to_google_loads_and_matches_numpy_forward(tmp_path, prefix, with_heads, leaves):
  hf = _random_hf_tensors(prefix, with_heads, leaves)
  prefix_written = model_conversion.convert_hf_to_google(
      _write_hf_model(tmp_path / "hf", hf), str(tmp_path / "google"))

  config = modeling.BertConfig.from_json_file(str(tmp_path / "google" / "bert_config.json"))
  with open(tmp_path / "google" / "bert_config.json") as f:
    assert sorted(json.load(f)) == sorted(conversion.CONFIG_FIELDS)
  assert (tmp_path / "google" / "vocab.txt").exists()
  model = (heads.BertPretrainingModel(config) if with_heads else modeling.BertModel(config))
  model.build()
  report = checkpoints.init_from_checkpoint(model, prefix_written)
  assert report.missing == [] and report.unused == []

  input_ids, input_mask, token_type_ids = _inputs()
  outputs = model(tf.constant(input_ids), input_mask=tf.constant(input_mask),
                  token_type_ids=tf.constant(token_type_ids))
  sequence, pooled, mlm, nsp = _numpy_forward(hf, prefix, input_ids, input_mask, token_type_ids,
                                              leaves)
  np.testing.assert_allclose(outputs["sequence_output"].numpy(), sequence, atol=1e-5)
  np.testing.assert_allclose(outputs["pooled_output"].numpy(), pooled, atol=1e-5)
  if with_heads:
    np.testing.assert_allclose(outputs["masked_lm_logits"].numpy(), mlm, atol=1e-4)
    np.testing.assert_allclose(outputs["next_sentence_logits"].numpy(), nsp, atol=1e-5)


def test_google_to_safetensors_to_google_round_trip_is_identical(tmp_path):
  hf = _random_hf_tensors("bert.", with_heads=True)
  first = model_conversion.convert_hf_to_google(_write_hf_model(tmp_path / "hf", hf),
                                                  str(tmp_path / "google"))
  # A training checkpoint: optimizer slots and global_step must not reach the safetensors file.
  reader = tf.train.load_checkpoint(first)
  weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
  training_state = dict(weights, global_step=np.int64(7))
  training_state["bert/pooler/dense/kernel/adam_m"] = weights["bert/pooler/dense/kernel"]
  checkpoints.write_checkpoint(training_state, str(tmp_path / "train" / "model.ckpt-7"))
  model_conversion.convert_google_to_hf(
      str(tmp_path / "train"), str(tmp_path / "hf2"),
      bert_config_file=str(tmp_path / "google" / "bert_config.json"))

  written = safetensors.numpy.load_file(str(tmp_path / "hf2" / "model.safetensors"))
  for name, value in written.items():  # Same HF names and layout as the original file.
    np.testing.assert_array_equal(value, hf[name], err_msg=name)
  skipped = set(hf) - set(written)
  assert skipped == {"bert.embeddings.position_ids", "cls.predictions.decoder.weight",
                     "cls.predictions.decoder.bias"}
  with open(tmp_path / "hf2" / "config.json") as f:
    assert json.load(f)["architectures"] == ["BertForPreTraining"]

  second = model_conversion.convert_hf_to_google(str(tmp_path / "hf2"), str(tmp_path / "google2"))
  again = tf.train.load_checkpoint(second)
  assert sorted(again.get_variable_to_shape_map()) == sorted(weights)
  for name, value in weights.items():
    np.testing.assert_array_equal(again.get_tensor(name), value, err_msg=name)


def test_a_vocab_is_read_by_its_newlines_only(chinese_bert_dir, tmp_path):
  """Google's Chinese vocab holds U+2028 (a line separator to str.splitlines) as a token: the
  converter counts its lines as the scripts do, and writes the vocab unchanged."""
  vocab_file = os.path.join(chinese_bert_dir, "vocab.txt")
  with open(vocab_file, "rb") as f:
    vocab_bytes = f.read()
  assert "\u2028" in vocab_bytes.decode("utf-8")
  config = {name: HF_CONFIG[name] for name in conversion.CONFIG_FIELDS}
  config["vocab_size"] = vocab_bytes.count(b"\n")  # 21128 lines, 21128 ids.
  bert = modeling.BertModel(modeling.BertConfig.from_dict(config), name="bert")
  bert.build()
  (tmp_path / "google").mkdir()
  checkpoints.save_checkpoint(bert, str(tmp_path / "google" / "bert_model.ckpt"))
  with open(tmp_path / "google" / "bert_config.json", "w") as f:
    json.dump(config, f)
  model_conversion.convert_google_to_hf(
      str(tmp_path / "google" / "bert_model.ckpt"), str(tmp_path / "hf"), vocab_file=vocab_file)
  with open(tmp_path / "hf" / "vocab.txt", "rb") as f:
    assert f.read() == vocab_bytes


def test_pickle_checkpoints_are_refused(tmp_path):
  directory = tmp_path / "torch_model"
  directory.mkdir()
  (directory / "pytorch_model.bin").write_bytes(b"not read")
  (directory / "config.json").write_text(json.dumps(HF_CONFIG))
  for path in (directory, directory / "pytorch_model.bin"):
    with pytest.raises(ValueError, match=r"pytorch_model\.bin.*arbitrary code.*safetensors"):
      model_conversion.convert_hf_to_google(str(path), str(tmp_path / "out"))


def _convert(directory, hf_tensors) -> str:
  return model_conversion.convert_hf_to_google(_write_hf_model(directory, hf_tensors),
                                                 str(directory / "google"))


def test_unknown_tensor_and_wrong_shape_are_named(tmp_path):
  hf = _random_hf_tensors("bert.", with_heads=False)
  hf["classifier.weight"] = np.zeros((3, 16), np.float32)
  with pytest.raises(ValueError, match=r"not in a BERT model: classifier\.weight"):
    _convert(tmp_path / "a", hf)

  hf = _random_hf_tensors("bert.", with_heads=False)
  hf["bert.encoder.layer.1.intermediate.dense.weight"] = np.zeros((23, 16), np.float32)
  with pytest.raises(ValueError, match=r"bert\.encoder\.layer\.1\.intermediate\.dense\.weight "
                     r"\(bert/encoder/layer_1/intermediate/dense/kernel\) has shape \[16, 23\] "
                     r"but the config needs \[16, 24\]"):
    _convert(tmp_path / "b", hf)

  hf = _random_hf_tensors("bert.", with_heads=True)
  hf["cls.predictions.decoder.weight"] = hf["cls.predictions.decoder.weight"] + 1.0
  with pytest.raises(ValueError, match="differ"):
    _convert(tmp_path / "c", hf)


def test_config_conversion(tmp_path):
  config = conversion.google_config_from_hf(
      dict(HF_CONFIG, hidden_act="gelu_pytorch_tanh"), "config.json")
  assert config.hidden_act == "gelu_new"
  with pytest.raises(ValueError, match="config.json: hidden_act 'quick_gelu'"):
    conversion.google_config_from_hf(dict(HF_CONFIG, hidden_act="quick_gelu"),
                                             "config.json")
  with pytest.raises(ValueError, match="config.json: missing key.*type_vocab_size"):
    conversion.google_config_from_hf(
        {k: v for k, v in HF_CONFIG.items() if k != "type_vocab_size"}, "config.json")
  for bad, expected in (([HF_CONFIG], "expected a JSON object of config values, got list"),
                        (dict(HF_CONFIG, hidden_act=["gelu"]), r"hidden_act \['gelu'\]")):
    with pytest.raises(conversion.ConversionError, match="config.json: " + expected):
      conversion.google_config_from_hf(bad, "config.json")
  back = conversion.hf_config_from_google(config, "BertModel")
  assert back["hidden_act"] == "gelu_new" and back["architectures"] == ["BertModel"]
  assert {k: back[k] for k in conversion.CONFIG_FIELDS if k != "hidden_act"} == {
      k: HF_CONFIG[k] for k in conversion.CONFIG_FIELDS if k != "hidden_act"}


def test_google_release_names_map_to_bert_for_pretraining_names(chinese_bert_dir):
  prefix = os.path.join(chinese_bert_dir, "bert_model.ckpt")
  google = dict(tf.train.list_variables(prefix))
  hf = {}
  for name, shape in google.items():
    hf_name, transpose = conversion.hf_name_for_google(name)
    hf[hf_name] = shape[::-1] if transpose else shape
  # The names transformers' BertForPreTraining.save_pretrained writes (tied decoder left out).
  expected = {"bert.embeddings.%s" % n for n in (
      "LayerNorm.bias", "LayerNorm.weight", "position_embeddings.weight",
      "token_type_embeddings.weight", "word_embeddings.weight")}
  expected |= {"bert.pooler.dense.bias", "bert.pooler.dense.weight", "cls.predictions.bias",
               "cls.seq_relationship.bias", "cls.seq_relationship.weight"}
  expected |= {"cls.predictions.transform.%s.%s" % (m, p)
               for m in ("dense", "LayerNorm") for p in ("weight", "bias")}
  expected |= {"bert.encoder.layer.%d.%s.%s" % (i, m, p) for i in range(12) for m in (
      "attention.self.query", "attention.self.key", "attention.self.value",
      "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
      "output.dense", "output.LayerNorm") for p in ("weight", "bias")}
  assert set(hf) == expected
  assert hf["bert.encoder.layer.3.intermediate.dense.weight"] == [3072, 768]  # PyTorch [out, in]
  assert hf["cls.seq_relationship.weight"] == [2, 768]
  assert hf["bert.embeddings.word_embeddings.weight"] == [21128, 768]

  config = modeling.BertConfig.from_json_file(os.path.join(chinese_bert_dir, "bert_config.json"))
  hf_config = conversion.hf_config_from_google(config, "BertForPreTraining")
  back = conversion.google_config_from_hf(hf_config, "config.json")
  assert {k: getattr(back, k) for k in conversion.CONFIG_FIELDS} == {
      k: getattr(config, k) for k in conversion.CONFIG_FIELDS}


def test_output_dir_that_cannot_be_written_is_named(tmp_path):
  model = _write_hf_model(tmp_path / "hf", _random_hf_tensors("bert.", with_heads=False))
  blocked = tmp_path / "a_file"
  blocked.write_text("")
  with pytest.raises(conversion.ConversionError,
                     match=r"^cannot write the converted model to %s/out \(\w+Error: " % blocked):
    model_conversion.convert_hf_to_google(model, str(blocked / "out"))


def test_a_hugging_face_tokenizer_google_s_cannot_reproduce_is_refused(tmp_path, caplog):
  """transformers' own tokenizer files (save_pretrained): keeping accents while lower-casing, or
  not splitting CJK characters, tokenizes otherwise than FullTokenizer, and a tokenizer.json
  whose vocab is not vocab.txt's would give other ids than AutoTokenizer; each is refused rather
  than converted into a model that reads other tokens. The defaults convert."""
  import transformers  # pylint: disable=g-import-not-at-top
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["tok%d" % i for i in range(
      HF_CONFIG["vocab_size"] - 5)]
  (tmp_path / "vocab.txt").write_text("".join(token + "\n" for token in tokens))
  hf = _random_hf_tensors("bert.", with_heads=False)
  cases = {"default": {}, "accents": {"strip_accents": False},
           "cjk": {"tokenize_chinese_chars": False}}
  for name, settings in cases.items():
    directory = _write_hf_model(tmp_path / name, hf)
    os.remove(os.path.join(directory, "vocab.txt"))  # transformers 5 saves tokenizer.json only.
    transformers.BertTokenizerFast(str(tmp_path / "vocab.txt"), do_lower_case=True,
                                   **settings).save_pretrained(directory)
  with caplog.at_level("WARNING"):
    model_conversion.convert_hf_to_google(str(tmp_path / "default"), str(tmp_path / "ok"))
  # What the files cannot carry is said: transformers' [UNK] for a word over 100 characters.
  assert "makes a word of more than 100 characters one [UNK]" in caplog.text
  with pytest.raises(conversion.ConversionError, match="strip_accents is false with do_lower_case "
                     "true, which Google's tokenizer cannot reproduce"):
    model_conversion.convert_hf_to_google(str(tmp_path / "accents"), str(tmp_path / "out1"))
  with pytest.raises(conversion.ConversionError, match="tokenize_chinese_chars is false"):
    model_conversion.convert_hf_to_google(str(tmp_path / "cjk"), str(tmp_path / "out2"))
  # A vocab.txt beside it that is not its vocab (two ids swapped): AutoTokenizer reads the json.
  swapped = tokens[:5] + [tokens[6], tokens[5]] + tokens[7:]
  (tmp_path / "default" / "vocab.txt").write_text("".join(t + "\n" for t in swapped))
  with pytest.raises(conversion.ConversionError, match="hold different vocabs"):
    model_conversion.convert_hf_to_google(str(tmp_path / "default"), str(tmp_path / "out3"))
  assert not any((tmp_path / name).exists() for name in ("out1", "out2", "out3"))
  # KerasHub's BertTokenizer names the same settings its own way.
  with pytest.raises(conversion.ConversionError, match="strip_accents is true with lowercase false"):
    conversion.check_tokenizer_settings(
        {"lowercase": False, "strip_accents": True},
        {"lowercase": "lowercase", "strip_accents": "strip_accents",
         "chinese_chars": "split_on_cjk"}, "tokenizer.json")


def test_task_name_for_a_recorded_tagger_run_is_named_as_such(tmp_path):
  # run_classifier's and run_ner's heads have the same variable names; before, --task_name=MRPC
  # on an NER run was read as a classifier of 8 outputs for 2 labels (probe 25 case 102).
  import conversion_google  # pylint: disable=g-import-not-at-top
  names = {name for architecture in conversion.ARCHITECTURES.values()
           if architecture.head_scope is not None for name in architecture.head_names()}
  (tmp_path / "training_settings.json").write_text('{"phases": {"0": {"task": "tagger"}}}')
  with pytest.raises(errors.FlagError, match=r"^`task_name` is for run_classifier checkpoints, "
                     r"but %s holds a tagger run \(recorded in training_settings.json\): convert "
                     r"it without `task_name`$" % tmp_path):
    conversion_google.google_architecture(names, str(tmp_path), "MRPC", "the run")
  (tmp_path / "training_settings.json").write_text('{"phases": {"0": {"task": "classifier"}}}')
  assert conversion_google.google_architecture(names, str(tmp_path), "MRPC", "the run") is (
      conversion.SEQUENCE_CLASSIFICATION)
