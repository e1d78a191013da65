"""Tests for modeling.py: shapes, sizes, an independent NumPy forward pass, checkpoints, configs."""
import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import heads
import modeling

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, hidden_act="gelu", hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1, max_position_embeddings=64, type_vocab_size=3,
            initializer_range=0.02)


def tiny_config(**overrides) -> modeling.BertConfig:
  return modeling.BertConfig.from_dict(dict(TINY, **overrides))


def randomize(model: keras.Model, seed: int) -> keras.Model:
  """Builds the model and gives every variable large random values (gammas near 1), so that a
  wrong weight, transpose or missing bias changes the outputs visibly."""
  model.build()
  rng = np.random.default_rng(seed)
  for variable in model.weights:
    value = rng.normal(0.0, 0.3, variable.shape)
    if variable.path.endswith("gamma"):
      value += 1.0
    variable.assign(value.astype(np.float32))
  return model


def example_inputs(seed=0, batch=3, length=7, vocab=99, type_vocab=3):
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, vocab, (batch, length))
  types = rng.integers(0, type_vocab, (batch, length))
  real_lengths = rng.integers(2, length + 1, batch)
  real_lengths[0] = length
  mask = (np.arange(length)[None, :] < real_lengths[:, None]).astype(np.int32)
  return ids, mask, types


# ------------------------------------------------------------------------------------------------
# NumPy reference, written from the paper/original code, reading weights by Google names.
# ------------------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf)


def np_gelu(x):
  return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_layer_norm(x, w, scope):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + 1e-12) * w[scope + "/gamma"] + w[scope + "/beta"]


def np_dense(x, w, scope):
  return x @ w[scope + "/kernel"] + w[scope + "/bias"]


def np_attention(from_x, to_x, mask_3d, w, scope, heads):
  """Multi-head attention; mask_3d is [B, F, T] with 1 = attend."""
  batch, from_len, width = from_x.shape
  size = width // heads

  def split(t):
    return t.reshape(batch, t.shape[1], heads, size).transpose(0, 2, 1, 3)

  q = split(np_dense(from_x, w, scope + "/query"))
  k = split(np_dense(to_x, w, scope + "/key"))
  v = split(np_dense(to_x, w, scope + "/value"))
  scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size)
  scores = scores + (1.0 - mask_3d[:, None, :, :]) * -10000.0
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return (probs @ v).transpose(0, 2, 1, 3).reshape(batch, from_len, width)


def np_bert(w, config, ids, mask, types, positions):
  """Returns the reference of every output of BertPretrainingModel."""
  length = ids.shape[1]
  x = (w["bert/embeddings/word_embeddings"][ids] + w["bert/embeddings/token_type_embeddings"][types]
       + w["bert/embeddings/position_embeddings"][:length])
  x = np_layer_norm(x, w, "bert/embeddings/LayerNorm")
  out = {"embedding_output": x, "encoder_outputs": []}
  mask_3d = np.broadcast_to(mask[:, None, :], (ids.shape[0], length, length)).astype(np.float64)
  for i in range(config.num_hidden_layers):
    scope = "bert/encoder/layer_%d" % i
    context = np_attention(x, x, mask_3d, w, scope + "/attention/self", config.num_attention_heads)
    attention = np_layer_norm(np_dense(context, w, scope + "/attention/output/dense") + x, w,
                              scope + "/attention/output/LayerNorm")
    intermediate = np_gelu(np_dense(attention, w, scope + "/intermediate/dense"))
    x = np_layer_norm(np_dense(intermediate, w, scope + "/output/dense") + attention, w,
                      scope + "/output/LayerNorm")
    out["encoder_outputs"].append(x)
  out["sequence_output"] = x
  out["pooled_output"] = np.tanh(np_dense(x[:, 0], w, "bert/pooler/dense"))
  gathered = np.take_along_axis(x, positions[:, :, None], axis=1)
  transformed = np_layer_norm(np_gelu(np_dense(gathered, w, "cls/predictions/transform/dense")), w,
                              "cls/predictions/transform/LayerNorm")
  out["masked_lm_logits"] = (transformed @ w["bert/embeddings/word_embeddings"].T +
                             w["cls/predictions/output_bias"])
  out["next_sentence_logits"] = (out["pooled_output"] @ w["cls/seq_relationship/output_weights"].T +
                                 w["cls/seq_relationship/output_bias"])
  return out


def weights_by_name(model):
  return {name: variable.numpy().astype(np.float64)
          for name, variable in checkpoints.checkpoint_variables(model).items()}


# ------------------------------------------------------------------------------------------------
# Model behaviour.
# ------------------------------------------------------------------------------------------------


def test_forward_shapes_and_defaults():
  model = modeling.BertModel(tiny_config())
  ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
  out = model(ids, input_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]]), training=False)
  assert tuple(out["sequence_output"].shape) == (2, 4, 32)
  assert tuple(out["pooled_output"].shape) == (2, 32)
  assert tuple(out["embedding_output"].shape) == (2, 4, 32)
  assert [tuple(t.shape) for t in out["encoder_outputs"]] == [(2, 4, 32)] * 2
  np.testing.assert_array_equal(out["sequence_output"], out["encoder_outputs"][-1])
  # Defaults: mask of ones, type ids of zeros; a feature dict gives the same as arguments.
  default = model(ids)["sequence_output"]
  explicit = model(ids, np.ones_like(ids), np.zeros_like(ids))["sequence_output"]
  as_dict = model({"input_ids": ids, "input_mask": np.ones_like(ids),
                   "segment_ids": np.zeros_like(ids)})["sequence_output"]
  np.testing.assert_array_equal(default, explicit)
  np.testing.assert_array_equal(default, as_dict)
  assert model.get_embedding_table().shape == (99, 32)


def test_dropout_only_when_training():
  model = modeling.BertModel(tiny_config(hidden_dropout_prob=0.5))
  ids = np.array([[5, 6, 7, 8]])
  first = model(ids)["sequence_output"]
  np.testing.assert_array_equal(first, model(ids, training=False)["sequence_output"])
  assert not np.allclose(first, model(ids, training=True)["sequence_output"])


def test_sequence_longer_than_positions_is_an_error():
  model = modeling.BertModel(tiny_config(max_position_embeddings=4))
  with pytest.raises(ValueError, match="max_position_embeddings"):
    model(np.ones((1, 5), np.int32))


@pytest.mark.parametrize("config, expected", [
    (dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
     110e6),
    (dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
     340e6),
])
def test_published_model_sizes(config, expected):
  config = modeling.BertConfig(vocab_size=30522, type_vocab_size=2, **config)
  # Shapes only: a stateless scope that never initializes skips drawing 340M random numbers.
  try:
    with keras.StatelessScope(initialize_variables=False):
      model = modeling.BertModel(config)
      model.build()
      count = sum(int(np.prod(v.shape)) for v in model.weights)
  finally:
    # Keras keeps such variables registered and would initialize them at the next stateless scope
    # (every symbolic call); forget them.
    keras.backend.clear_session(free_memory=False)
  assert abs(count - expected) / expected < 0.02, count


def test_padding_does_not_change_real_tokens():
  config = tiny_config()
  model = randomize(modeling.BertModel(config), seed=1)
  ids, mask, types = example_inputs(seed=2)
  base = model(ids, mask, types)
  pad = 3
  rng = np.random.default_rng(3)
  padded = model(np.concatenate([ids, rng.integers(1, 99, (3, pad))], 1),
                 np.concatenate([mask, np.zeros((3, pad), np.int32)], 1),
                 np.concatenate([types, rng.integers(0, 3, (3, pad))], 1))
  length = ids.shape[1]
  real = mask.astype(bool)
  for name in ("sequence_output", "embedding_output"):
    np.testing.assert_allclose(padded[name][:, :length][real], base[name].numpy()[real], atol=1e-5)
  for got, want in zip(padded["encoder_outputs"], base["encoder_outputs"]):
    np.testing.assert_allclose(got[:, :length][real], want.numpy()[real], atol=1e-5)
  np.testing.assert_allclose(padded["pooled_output"], base["pooled_output"], atol=1e-5)


def test_matches_independent_numpy_forward_pass():
  config = tiny_config()
  model = randomize(heads.BertPretrainingModel(config), seed=4)
  ids, mask, types = example_inputs(seed=5)
  positions = np.array([[0, 3, 6], [1, 1, 2], [4, 0, 5]])
  got = model(ids, mask, types, masked_lm_positions=positions)
  want = np_bert(weights_by_name(model), config, ids, mask, types, positions)
  for name in ("embedding_output", "sequence_output", "pooled_output", "masked_lm_logits",
               "next_sentence_logits"):
    np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-5, err_msg=name)
  for got_layer, want_layer in zip(got["encoder_outputs"], want["encoder_outputs"]):
    np.testing.assert_allclose(got_layer, want_layer, atol=1e-5, rtol=1e-5)
  assert got["masked_lm_logits"].shape == (3, 3, 99)
  assert got["next_sentence_logits"].shape == (3, 2)


def test_pretraining_model_without_positions_scores_every_token():
  model = randomize(heads.BertPretrainingModel(tiny_config()), seed=6)
  ids, mask, types = example_inputs(seed=7)
  everywhere = model(ids, mask, types)["masked_lm_logits"]
  at_two = model({"input_ids": ids, "input_mask": mask, "segment_ids": types,
                  "masked_lm_positions": np.array([[2], [2], [2]])})["masked_lm_logits"]
  assert everywhere.shape == (3, 7, 99)
  np.testing.assert_allclose(at_two[:, 0], everywhere[:, 2], atol=1e-6)


def test_mixed_precision_keeps_float32_variables_and_close_outputs(tmp_path):
  config = tiny_config()
  reference = randomize(heads.BertPretrainingModel(config), seed=8)
  prefix = checkpoints.save_checkpoint(reference, str(tmp_path / "model.ckpt"))
  ids, mask, types = example_inputs(seed=9)
  want = reference(ids, mask, types)
  keras.mixed_precision.set_dtype_policy("mixed_float16")
  try:
    model = heads.BertPretrainingModel(config)
    model.build()
    checkpoints.init_from_checkpoint(model, prefix)
    got = model(ids, mask, types)
  finally:
    keras.mixed_precision.set_dtype_policy("float32")
  assert {v.dtype for v in model.weights} == {"float32"}
  assert got["sequence_output"].dtype == tf.float16
  assert got["masked_lm_logits"].dtype == tf.float32
  for name in ("sequence_output", "pooled_output", "next_sentence_logits"):
    np.testing.assert_allclose(tf.cast(got[name], tf.float32), want[name], atol=5e-2, err_msg=name)


def test_xla_compiled_training_step_reaches_every_variable():
  model = randomize(heads.BertPretrainingModel(tiny_config()), seed=10)
  ids, mask, types = example_inputs(seed=11)
  positions = np.array([[1, 2], [0, 1], [1, 0]])

  @tf.function(jit_compile=True)
  def forward_and_gradients(ids, mask, types, positions):
    with tf.GradientTape() as tape:
      out = model(ids, mask, types, masked_lm_positions=positions, training=True)
      loss = tf.reduce_sum(out["masked_lm_logits"]) + tf.reduce_sum(out["next_sentence_logits"])
    inference = model(ids, mask, types, masked_lm_positions=positions)["masked_lm_logits"]
    return inference, tape.gradient(loss, model.trainable_weights)

  logits, gradients = forward_and_gradients(ids, mask, types, positions)
  np.testing.assert_allclose(logits, model(ids, mask, types, masked_lm_positions=positions)[
      "masked_lm_logits"], atol=1e-4)
  assert all(g is not None for g in gradients)


def test_exports_as_saved_model(tmp_path):
  model = randomize(modeling.BertModel(tiny_config()), seed=12)
  module = tf.Module()
  module.model = model
  spec = tf.TensorSpec([None, None], tf.int32)
  module.serve = tf.function(lambda ids, mask: model(ids, mask)["pooled_output"],
                             input_signature=[spec, spec])
  tf.saved_model.save(module, str(tmp_path / "export"))
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  ids, mask, _ = example_inputs(seed=13)
  ids, mask = ids.astype(np.int32), mask.astype(np.int32)
  np.testing.assert_allclose(loaded.serve(ids, mask), model(ids, mask)["pooled_output"], atol=1e-5)


# ------------------------------------------------------------------------------------------------
# The original's helper functions.
# ------------------------------------------------------------------------------------------------


def test_activations():
  x = np.array([-2.0, -0.5, 0.0, 1.0, 3.0], np.float32)
  np.testing.assert_allclose(modeling.get_activation("gelu")(x), np_gelu(x.astype(np.float64)),
                             atol=1e-6)
  tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
  for name in ("gelu_new", "gelu_approximate"):
    np.testing.assert_allclose(modeling.get_activation(name)(x), tanh_form, atol=1e-6)
  np.testing.assert_allclose(modeling.gelu(np.float32(1.0)), 0.8413447, atol=1e-6)
  for name in ("swish", "silu"):
    np.testing.assert_allclose(modeling.get_activation(name)(x), x / (1 + np.exp(-x)), atol=1e-6)
  np.testing.assert_allclose(modeling.get_activation("relu")(x), np.maximum(x, 0))
  np.testing.assert_allclose(modeling.get_activation("tanh")(x), np.tanh(x), atol=1e-6)
  assert modeling.get_activation("linear") is None and modeling.get_activation(None) is None
  assert modeling.get_activation(np.abs) is np.abs
  with pytest.raises(ValueError, match="mish"):
    modeling.get_activation("mish")


def test_shape_list_and_attention_mask():
  mask = modeling.create_attention_mask_from_input_mask(np.zeros((2, 3)), np.array([[1, 1, 0, 0],
                                                                                    [1, 0, 0, 0]]))
  assert mask.shape == (2, 3, 4)
  np.testing.assert_array_equal(mask[1], [[1, 0, 0, 0]] * 3)

  @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
  def shape_of(t):
    shape = modeling.get_shape_list(t, expected_rank=2)
    assert isinstance(shape[1], int) and isinstance(shape[0], tf.Tensor)
    return shape[0]

  assert int(shape_of(tf.zeros([3, 5]))) == 3
  with pytest.raises(ValueError, match="rank"):
    modeling.get_shape_list(tf.zeros([2, 2]), expected_rank=3)


def test_functional_attention_layer_matches_numpy():
  from_x = keras.Input((5, 16))
  to_x = keras.Input((6, 12))
  mask_in = keras.Input((5, 6))
  context = modeling.attention_layer(from_x, to_x, mask_in, num_attention_heads=4, size_per_head=4,
                                     do_return_2d_tensor=True)
  model = keras.Model([from_x, to_x, mask_in], context)
  rng = np.random.default_rng(14)
  for variable in model.weights:
    variable.assign(rng.normal(0, 0.5, variable.shape).astype(np.float32))
  weights = {"self/" + v.path.split("self/")[1]: v.numpy().astype(np.float64)
             for v in model.weights}
  a, b = rng.normal(size=(2, 5, 16)), rng.normal(size=(2, 6, 12))
  mask = modeling.create_attention_mask_from_input_mask(a, np.array([[1] * 6, [1, 1, 1, 0, 0, 0]]))
  mask = mask.numpy()
  got = model([a.astype(np.float32), b.astype(np.float32), mask])
  want = np_attention(a, b, mask, weights, "self", heads=4).reshape(10, 16)
  np.testing.assert_allclose(got, want, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# Configuration.
# ------------------------------------------------------------------------------------------------


def test_google_config_with_extra_keys(chinese_bert_dir, tmp_path):
  config = modeling.BertConfig.from_json_file(os.path.join(chinese_bert_dir, "bert_config.json"))
  assert (config.vocab_size, config.hidden_size, config.type_vocab_size) == (21128, 768, 2)
  assert config.directionality == "bidi" and config.pooler_type == "first_token_transform"
  path = tmp_path / "bert_config.json"
  path.write_text(config.to_json_string())
  assert json.loads(path.read_text()) == json.load(open(os.path.join(chinese_bert_dir,
                                                                     "bert_config.json")))
  assert modeling.BertConfig.from_json_file(str(path)).to_dict() == config.to_dict()


@pytest.mark.parametrize("overrides, field", [
    (dict(hidden_size=30), "hidden_size"),
    (dict(hidden_act="gelu_fast"), "hidden_act"),
    (dict(num_hidden_layers=0), "num_hidden_layers"),
    (dict(vocab_size=-5), "vocab_size"),
    (dict(intermediate_size="37"), "intermediate_size"),
    (dict(max_position_embeddings=0), "max_position_embeddings"),
    (dict(attention_probs_dropout_prob=1.5), "attention_probs_dropout_prob"),
    (dict(initializer_range=0), "initializer_range"),
])
def test_bad_config_names_the_field(overrides, field):
  with pytest.raises(ValueError, match=field):
    tiny_config(**overrides)


def test_max_seq_length_up_to_the_learned_positions():
  config = tiny_config(max_position_embeddings=64)
  config.check_max_seq_length(64)
  with pytest.raises(ValueError, match=r"`max_seq_length`=65 .*max_position_embeddings=64"):
    config.check_max_seq_length(65)


def test_bad_config_file_names_the_file(tmp_path):
  missing = dict(TINY)
  del missing["vocab_size"]
  (tmp_path / "a.json").write_text(json.dumps(missing))
  (tmp_path / "b.json").write_text("{not json")
  for name, field in (("a.json", "vocab_size"), ("b.json", "JSON")):
    with pytest.raises(ValueError, match=field) as error:
      modeling.BertConfig.from_json_file(str(tmp_path / name))
    assert name in str(error.value)


# ------------------------------------------------------------------------------------------------
# Google-format checkpoints.
# ------------------------------------------------------------------------------------------------


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path):
  config = tiny_config()
  source = randomize(heads.BertPretrainingModel(config), seed=15)
  prefix = checkpoints.save_checkpoint(source, str(tmp_path / "model.ckpt-7"))
  # Readable by TF's own reader under Google's names.
  reader = tf.train.load_checkpoint(prefix)
  key = source.bert.encoder.transformer_layers[1].attention.self_attention.key
  np.testing.assert_array_equal(reader.get_tensor("bert/encoder/layer_1/attention/self/key/kernel"),
                                key.kernel.numpy())
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-7"\n')
  ids, mask, types = example_inputs(seed=16)
  want = source(ids, mask, types)
  for path in (prefix, str(tmp_path)):
    target = heads.BertPretrainingModel(config)
    target.build()
    report = checkpoints.init_from_checkpoint(target, path)
    assert report.checkpoint == prefix and not report.unused and not report.missing
    got = target(ids, mask, types)
    for name in ("sequence_output", "pooled_output", "masked_lm_logits", "next_sentence_logits"):
      np.testing.assert_array_equal(got[name], want[name])
  # The encoder alone takes the `bert/` variables and reports the heads as unused.
  encoder = modeling.BertModel(config)
  encoder.build()
  report = checkpoints.init_from_checkpoint(encoder, prefix)
  assert report.unused and all(name.startswith("cls/") for name in report.unused)
  np.testing.assert_array_equal(encoder(ids, mask, types)["pooled_output"], want["pooled_output"])


def test_training_state_is_stored_and_not_reported_as_unused(tmp_path):
  config = tiny_config()
  model = randomize(modeling.BertModel(config), seed=17)
  variables = checkpoints.checkpoint_variables(model)
  tensors = {name: v for name, v in variables.items() if name != "bert/pooler/dense/bias"}
  tensors["bert/pooler/dense/kernel/adam_m"] = np.ones((32, 32), np.float32)
  tensors["bert/pooler/dense/kernel/adam_v"] = np.ones((32, 32), np.float32)
  tensors["global_step"] = np.int64(123)
  tensors["some/other/variable"] = np.zeros([3], np.float16)
  prefix = checkpoints.write_checkpoint(tensors, str(tmp_path / "sub" / "model.ckpt-123"))
  reader = tf.train.load_checkpoint(prefix)
  assert reader.get_variable_to_dtype_map()["global_step"] == tf.int64
  assert reader.get_tensor("global_step") == 123
  report = checkpoints.init_from_checkpoint(_built(modeling.BertModel(config)), prefix)
  assert report.unused == ["some/other/variable"]
  assert report.missing == ["bert/pooler/dense/bias"]
  assert len(report.loaded) == len(variables) - 1


def _built(model):
  model.build()
  return model


def test_shape_mismatch_names_the_variable_and_both_shapes(tmp_path):
  model = randomize(modeling.BertModel(tiny_config()), seed=18)
  tensors = dict(checkpoints.checkpoint_variables(model))
  tensors["bert/pooler/dense/kernel"] = np.zeros((32, 16), np.float32)
  prefix = checkpoints.write_checkpoint(tensors, str(tmp_path / "bad.ckpt"))
  before = model.embeddings.word_embeddings.numpy()
  target = _built(modeling.BertModel(tiny_config()))
  target.embeddings.word_embeddings.assign(before + 1)
  with pytest.raises(ValueError, match=r"bert/pooler/dense/kernel.*\[32, 16\].*\[32, 32\]"):
    checkpoints.init_from_checkpoint(target, prefix)
  # Nothing was assigned before the error.
  np.testing.assert_array_equal(target.embeddings.word_embeddings.numpy(), before + 1)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(ValueError, match="no checkpoint"):
    checkpoints.init_from_checkpoint(_built(modeling.BertModel(tiny_config())),
                                  str(tmp_path / "nothing.ckpt"))


def test_google_chinese_checkpoint_layout_loads_completely(chinese_bert_dir, tmp_path):
  """A checkpoint with exactly the names and shapes of Google's chinese_L-12_H-768_A-12."""
  google = tf.train.list_variables(os.path.join(chinese_bert_dir, "bert_model.ckpt"))
  rng = np.random.default_rng(19)
  tensors = {name: rng.random(shape, np.float32) for name, shape in google}
  checkpoints.write_checkpoint(tensors, str(tmp_path / "bert_model.ckpt"))
  config = modeling.BertConfig.from_json_file(os.path.join(chinese_bert_dir, "bert_config.json"))
  model = _built(heads.BertPretrainingModel(config))
  report = checkpoints.init_from_checkpoint(model, str(tmp_path))
  assert not report.unused and not report.missing
  assert len(report.loaded) == len(google) == 206
  for name in ("bert/embeddings/word_embeddings", "cls/seq_relationship/output_weights",
               "bert/encoder/layer_11/output/LayerNorm/gamma"):
    np.testing.assert_array_equal(checkpoints.checkpoint_variables(model)[name].numpy(),
                                  tensors[name])
