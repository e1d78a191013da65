"""The training tests' scenario: a tiny BERT classifier, its data, loss, metrics and config.

test_training_loop, test_evaluation, test_distribution and test_checkpoint_faults train it;
conftest's `reference` fixture is its run on one device in the test process. Run as a script
(`python training_scenario.py <strategy> <output_dir> <init_checkpoint>`) it is the worker of
test_distribution's subprocesses: under that strategy it trains the scenario into
<output_dir>/scenario, then makes one accumulated update from the init checkpoint into
<output_dir>/accumulation, and prints each result as a `RESULT <json>` line (`{"scenario": ...}`,
then `{"accumulation": ...}`). One process does both because a worker's TensorFlow start costs
more than its training.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import checkpoints  # pylint: disable=g-import-not-at-top
import distribution  # pylint: disable=g-import-not-at-top
import evaluation  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import optimization  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top


VOCAB_SIZE = 40


SEQ_LENGTH = 8


CONFIG = dict(vocab_size=VOCAB_SIZE, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=24, hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, max_position_embeddings=SEQ_LENGTH,
              type_vocab_size=2, initializer_range=0.02)


class TinyClassifier(keras.Model):
  """BERT + a 2-class head on the pooled output (`output_weights`, `output_bias`)."""

  def __init__(self, **config_overrides):
    super().__init__(name="tiny_classifier")
    self.bert = modeling.BertModel(modeling.BertConfig.from_dict(dict(CONFIG, **config_overrides)),
                                   name="bert")

  def build(self, input_shape=None):
    self.bert.build()
    self.output_weights = self.add_weight(name="output_weights", shape=(2, 16))
    self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

  def call(self, features, training=False):
    pooled = self.bert(features["input_ids"], training=training)["pooled_output"]
    return tf.matmul(pooled, self.output_weights, transpose_b=True) + self.output_bias


def model_fn():
  model = TinyClassifier()
  model.build()
  return model


def per_example_loss(model, features, training):
  log_probs = tf.nn.log_softmax(model(features, training=training), axis=-1)
  return -tf.gather(log_probs, features["label"], batch_dims=1) * features["scale"]


def loss_fn(model, features, training):
  loss = distribution.replica_weighted_mean(per_example_loss(model, features, training))
  return loss, {"scaled_mean": distribution.replica_weighted_mean(features["scale"])}


def metric_fn(model, features):
  real = tf.cast(features[training_loop.REAL_EXAMPLE_KEY], tf.float32)
  predictions = tf.argmax(model(features), -1, output_type=tf.int32)
  correct = tf.cast(tf.equal(predictions, features["label"]), tf.float32)
  return {"accuracy": (tf.reduce_sum(correct * real), tf.reduce_sum(real)),
          "loss": (tf.reduce_sum(per_example_loss(model, features, False) * real),
                   tf.reduce_sum(real))}


def predict_fn(model, features):
  return {"logits": model(features), "first_id": features["input_ids"][:, 0]}


def examples(count, seed=0, bad_after=None):
  """Label = whether token 1 appears in the sequence; `scale` is inf from example `bad_after` on."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(2, VOCAB_SIZE, size=(count, SEQ_LENGTH)).astype(np.int32)
  label = (rng.rand(count) < 0.5).astype(np.int32)
  ids[label == 1, rng.randint(0, SEQ_LENGTH)] = 1
  scale = np.ones(count, np.float32)
  if bad_after is not None:
    scale[bad_after:] = np.inf
  return {"input_ids": ids, "label": label, "scale": scale}


def dataset_fn_of(data):
  def dataset_fn(batch_size, seed):
    del seed  # A fixed order: train() skips the batches a resumed run already trained on.
    batches = tf.data.Dataset.from_tensor_slices(data).batch(batch_size, drop_remainder=True)
    return batches.repeat()
  return dataset_fn


# What cli_setup.train_config records of the model besides the training flags.
MODEL_SETTINGS = {"max_seq_length": SEQ_LENGTH, "bert_config": CONFIG}


def train_config(output_dir, **overrides):
  values = dict(output_dir=output_dir, num_train_steps=6, num_warmup_steps=1, learning_rate=1e-2,
                train_batch_size=8, save_checkpoints_steps=2, iterations_per_loop=2,
                keep_checkpoint_max=2, model_settings=MODEL_SETTINGS)
  values.update(overrides)
  return training_loop.TrainConfig(**values)


def train_and_predict(strategy, output_dir):
  """The scenario every strategy runs: 6 steps on 64 examples, then eval and predict 13."""
  result = training_loop.train(strategy, model_fn, loss_fn, dataset_fn_of(examples(64)),
                               train_config(output_dir))
  dataset = tf.data.Dataset.from_tensor_slices(examples(13, seed=3))
  predictions = evaluation.predict(strategy, result.model, predict_fn, dataset, batch_size=4)
  metrics = evaluation.evaluate(strategy, result.model, metric_fn, dataset, batch_size=4)
  weights = checkpoints.checkpoint_variables(result.model)["output_weights"].numpy()
  return result, {
      "replicas": strategy.num_replicas_in_sync, "metrics": result.metrics,
      "output_weights": weights.tolist(), "logits": predictions["logits"].tolist(),
      "first_id": predictions["first_id"].tolist(), "eval": metrics}


def checkpoint_values(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def copy_checkpoints(source_dir, target_dir, steps):
  """Copies model.ckpt-<step> files and writes a state file listing them (newest last)."""
  for step in steps:
    for path in tf.io.gfile.glob(os.path.join(source_dir, "model.ckpt-%d.*" % step)):
      tf.io.gfile.copy(path, os.path.join(target_dir, os.path.basename(path)))
  checkpoints._write_state_file(target_dir, [os.path.join(target_dir, "model.ckpt-%d" % step)
                                          for step in steps])



def warnings_text(caplog):
  return "\n".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def worker_strategy(strategy_name):
  """The strategy of a worker process: "mirrored" over two logical CPUs, or one from TF_CONFIG."""
  if strategy_name == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  return distribution.make_strategy(strategy_name)


ACCUMULATION_BATCH = 16


LOSS_FACTOR = 30.0  # Makes the gradient's global norm > 1, so that clipping matters.


def weighted_examples():
  """16 examples whose loss weights differ between micro-batches (0 to 3, mean 1.5 overall)."""
  data = examples(ACCUMULATION_BATCH, seed=5)
  data["scale"] = np.array([0, 1, 0, 0, 3, 3, 2, 1, 1, 1, 1, 3, 2, 3, 1, 2], np.float32)
  return data


def weighted_loss_fn(model, features, training):
  """A weighted mean (epsilon as the MLM loss) whose denominator varies between micro-batches."""
  log_probs = tf.nn.log_softmax(model(features, training=training), axis=-1)
  losses = -tf.gather(log_probs, features["label"], batch_dims=1) * LOSS_FACTOR
  return (distribution.replica_weighted_mean(losses, features["scale"], epsilon=1e-5),
          {"weight": distribution.replica_weighted_mean(features["scale"])})


def linear_adam():
  """The original's AdamWeightDecay with epsilon 1: the update is almost linear in the gradient
  (with the default epsilon one step is about sign(g) * lr and hides a wrong gradient scale)."""
  return optimization.AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.01, epsilon=1.0)


def accumulation_step(strategy, output_dir, init_checkpoint, accumulation_steps):
  """One update of the 16 weighted examples in `accumulation_steps` micro-batches."""
  result = training_loop.train(
      strategy, model_fn, weighted_loss_fn, dataset_fn_of(weighted_examples()),
      train_config(output_dir, num_train_steps=1, train_batch_size=ACCUMULATION_BATCH,
                   init_checkpoint=init_checkpoint,
                   gradient_accumulation_steps=accumulation_steps),
      optimizer_fn=linear_adam)
  return {name: variable.numpy().tolist()
          for name, variable in checkpoints.checkpoint_variables(result.model).items()}


if __name__ == "__main__":
  worker_strategy_name, worker_output_dir, worker_init_checkpoint = sys.argv[1:4]
  # One strategy for both: "mirrored" configures the logical devices once per process.
  the_strategy = worker_strategy(worker_strategy_name)
  scenario_dir, accumulation_dir = (os.path.join(worker_output_dir, name)
                                    for name in ("scenario", "accumulation"))
  for directory in (scenario_dir, accumulation_dir):  # Empty directories, as tmp_path gives.
    os.makedirs(directory, exist_ok=True)
  _, summary = train_and_predict(the_strategy, scenario_dir)
  print("RESULT " + json.dumps({"scenario": summary}), flush=True)
  # Gradient accumulation: 2 replicas x 2 micro-batches of 4.
  print("RESULT " + json.dumps({"accumulation": accumulation_step(
      the_strategy, accumulation_dir, worker_init_checkpoint, 2)}))
