"""Request limits in rows and token positions, and serving's edge cases, as TF Serving meets them.

A classifier and a SQuAD export, each with small `export.RequestLimits`, are served by
`tests/cpp_serving_client.py` (TF's C++ SavedModel loader in a fresh process, as in
test_serving.py): a request over a limit fails with InvalidArgument naming the input, a request
at the limit is answered, and so is every warmup request written with the export. The expected
messages and sizes are counted by hand from the texts below.
"""

import numpy as np
import pytest

from conftest import shared_path
from test_serving import ids_inputs, run_cpp_client, texts_input, tiny_config, warmup_requests
import classifier
import classifier_data
import export
import modeling
import multiple_choice
import squad
import squad_data
import tokenization

pytestmark = [pytest.mark.slow, pytest.mark.serving]

CLASSIFIER_LENGTH = 16  # --max_seq_length of the classifier: buckets 4, 8, 12, 16.
CLASSIFIER_LIMITS = export.RequestLimits(max_rows=4, max_tokens=48)  # 3 rows of 16, 12 of 4.
SQUAD_LENGTH = 48
SQUAD_LIMITS = export.RequestLimits(max_rows=4, max_tokens=96)  # 2 windows of 48.
# Limits at a bucket of a longer model, whose warmup texts of bucket 48 must not tokenize past 48
# positions (a word can be several tokens: "river." is two), nor multiple choice's pairs past 48
# (each row counts twice there: 2 x 48 = 96).
LONG_CLASSIFIER_LENGTH, LONG_CLASSIFIER_LIMITS = 128, export.RequestLimits(8, 48)
CHOICE_LENGTH, CHOICE_LIMITS = 64, export.RequestLimits(8, 96)
# 20 words of one sub-token each: [CLS] + 20 + [SEP] is cut to 16 positions.
LONG = "the cat sat on the mat and the dog ran to the park with a red ball in its big mouth"
# "Why?" is 2 sub-tokens, so a window holds 48 - 2 - 3 = 43 context tokens; 100 tokens every 16
# give windows at 0, 16, 32, 48 and 64 (the last ends at 100): 5 windows of 48 positions.
LONG_CONTEXT = " ".join(["the"] * 100)


def ids(rows: int, length: int) -> dict:
  """token_ids inputs of [rows, length]: [CLS] (id 101) then [SEP] (102), zero-padded."""
  input_ids = np.zeros([rows, length], np.int32)
  input_ids[:, :2] = [101, 102]
  return {"signature": "token_ids",
          "inputs": ids_inputs({"input_ids": input_ids, "input_mask": (input_ids > 0) * 1,
                                "segment_ids": np.zeros_like(input_ids)})}


def texts(**inputs) -> dict:
  return {"signature": "serving_default",
          "inputs": {name: texts_input(value) for name, value in inputs.items()}}


# (request, the InvalidArgument message it must give, or None where it must be answered).
CLASSIFIER_REQUESTS = {
    # Bytes 0xff 0xfe (as cpp_serving_client decodes these lone surrogates): not UTF-8, which
    # --do_predict refuses in a file too.
    "text not UTF-8": (texts(text_a=["good", "\udcff\udcfe bad"]),
                       "text_a row 1 is not valid UTF-8"),
    "text rows over": (texts(text_a=["a"] * 5),
                       "text_a has 5 rows: at most 4 rows per request (`max_request_rows`)"),
    "text rows at": (texts(text_a=["a"] * 4), None),
    "text tokens over": (texts(text_a=[LONG] * 4),
                         "text_a: 4 rows of 16 token positions, 64 in all: at most 48 per "
                         "request (`max_request_tokens`)"),
    "text tokens at": (texts(text_a=[LONG] * 3), None),
    "ids rows over": (ids(5, 4), "input_ids has 5 rows: at most 4 rows per request "
                                 "(`max_request_rows`)"),
    "ids tokens over": (ids(4, 16), "input_ids has shape [4 16], 64 token positions: at most 48 "
                                    "per request (`max_request_tokens`)"),
    "ids tokens at": (ids(3, 16), None),
    "ids rows and tokens at": (ids(4, 12), None),
}
SQUAD_REQUESTS = {
    "rows over": (texts(question=["Why?"] * 5, context=["a b"] * 5),
                  "context has 5 rows: at most 4 rows per request (`max_request_rows`)"),
    "tokens over": (texts(question=["Why?"], context=[LONG_CONTEXT]),
                    "context + question: 5 windows of 48 token positions, 240 in all: at most "
                    "96 per request (`max_request_tokens`)"),
    "tokens at": (texts(question=["Why?", "Who?"], context=[LONG, "a cat"]), None),
    "empty context": (texts(question=["Who sat on the mat?", "Why?", "Who?"],
                            context=[LONG, "", " \t "]), None),
}


def bad_rank(name: str, shape: list) -> dict:
  """A token_ids request whose input `name` has `shape`, the others [2, 4]."""
  request = ids(2, 4)
  request["inputs"][name]["value"] = np.ones(shape, np.int32).tolist()
  return request


RANK_REQUESTS = {
    "input_ids of rank 1": (bad_rank("input_ids", [5]), "input_ids has shape [5]: it must have 2 "
                                                        "dimensions ([batch, length])"),
    "input_ids of rank 3": (bad_rank("input_ids", [1, 2, 4]),
                            "input_ids has shape [1 2 4]: it must have 2 dimensions"),
    "segment_ids of rank 1": (bad_rank("segment_ids", [4]),
                              "segment_ids has shape [4]: it must have 2 dimensions"),
    "text_a of rank 2": (texts(text_a=[["good"], ["bad"]]),
                         "text_a has shape [2 1]: it must have 1 dimension ([batch])"),
    "text_a of rank 0": ({"signature": "serving_default",
                          "inputs": {"text_a": {"dtype": "string", "value": "good"}}},
                         "text_a has shape []: it must have 1 dimension ([batch])"),
}
# Multiple choice's endings are [batch, endings], its token_ids [batch, endings, length].
CHOICE_RANK_REQUESTS = {
    "endings of rank 1": (texts(context=["a cat", "a dog"], endings=["sat", "ran"]),
                          "endings has shape [2]: it must have 2 dimensions ([batch, endings])"),
    "context of rank 2": (texts(context=[["a cat"]], endings=[["sat", "ran"]]),
                          "context has shape [1 1]: it must have 1 dimension ([batch])"),
    "input_ids of rank 2": ({"signature": "token_ids", "inputs": ids_inputs(
        {"input_ids": np.ones([2, 4], np.int32), "input_mask": np.ones([1, 2, 4], np.int32),
         "segment_ids": np.zeros([1, 2, 4], np.int32)})},
                            "input_ids has shape [2 4]: it must have 3 dimensions "
                            "([batch, endings, length])"),
    "endings at their rank": (texts(context=["a cat"], endings=[["sat", ""]]), None),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """Both exports, and the C++ loader's answers to every request above and to their warmups."""
  root = tmp_path_factory.mktemp("limits")
  tokenizer = tokenization.FullTokenizer(shared_path("fixtures", "uncased_vocab", "vocab.txt"),
                                         do_lower_case=True)
  config = tiny_config(len(tokenizer.vocab))
  processor = classifier_data.get_processor("sst-2")
  task = classifier.ClassifierTask(config, processor, tokenizer, None, str(root / "c"),
                                   CLASSIFIER_LENGTH)
  classifier_path = task.export(task.build_model(), str(root / "c"), limits=CLASSIFIER_LIMITS)
  options = squad_data.SquadOptions(max_seq_length=SQUAD_LENGTH, doc_stride=16, max_query_length=12,
                                    n_best_size=20, max_answer_length=10)
  squad_task = squad.SquadTask(config, tokenizer, options, str(root / "s"))
  squad_path = squad_task.export(squad_task.build_model(), str(root / "s"), limits=SQUAD_LIMITS)
  long_config = modeling.BertConfig.from_dict(dict(config.to_dict(), max_position_embeddings=128))
  long_task = classifier.ClassifierTask(long_config, processor, tokenizer, None, str(root / "l"),
                                        LONG_CLASSIFIER_LENGTH)
  long_path = long_task.export(long_task.build_model(), str(root / "l"),
                               limits=LONG_CLASSIFIER_LIMITS)
  choice_task = multiple_choice.MultipleChoiceTask(long_config, tokenizer, str(root),
                                                   str(root / "m"), CHOICE_LENGTH)
  choice_path = choice_task.export(choice_task.build_model(), str(root / "m"),
                                   limits=CHOICE_LIMITS)
  jobs = {"classifier": (classifier_path, {**CLASSIFIER_REQUESTS, **RANK_REQUESTS}),
          "squad": (squad_path, SQUAD_REQUESTS), "long classifier": (long_path, {}),
          "multiple choice": (choice_path, CHOICE_RANK_REQUESTS)}
  warmups = {name: warmup_requests(path) for name, (path, _) in jobs.items()}
  results = run_cpp_client(str(root), [
      {"saved_model": path, "requests": [request for request, _ in requests.values()] +
       warmups[name]} for name, (path, requests) in jobs.items()])
  answers = {}
  for (name, (_, requests)), job in zip(jobs.items(), results["jobs"]):
    answers[name] = dict(zip(requests, job["results"]))
    answers[name + " warmup"] = list(zip(warmups[name], job["results"][len(requests):]))
  return answers


@pytest.mark.parametrize("export_name, requests", [("classifier", CLASSIFIER_REQUESTS),
                                                   ("classifier", RANK_REQUESTS),
                                                   ("squad", SQUAD_REQUESTS),
                                                   ("multiple choice", CHOICE_RANK_REQUESTS)])
def test_requests_over_a_limit_fail_naming_the_input_and_at_it_are_answered(served, export_name,
                                                                            requests):
  for case, (_, message) in requests.items():
    answer = served[export_name][case]
    if message is None:
      assert "error" not in answer, (case, answer)
    else:
      assert answer.get("error", "").startswith("InvalidArgumentError: "), (case, answer)
      assert message in answer["error"], (case, answer["error"])


def test_warmup_requests_stay_within_the_limits(served):
  """Every warmup request is answered, and holds at most the export's rows (ids: positions)."""
  for name, limits in (("classifier", CLASSIFIER_LIMITS), ("squad", SQUAD_LIMITS),
                       ("long classifier", LONG_CLASSIFIER_LIMITS),
                       ("multiple choice", CHOICE_LIMITS)):
    warmup = served[name + " warmup"]
    assert len(warmup) > 4
    for request, answer in warmup:
      assert "error" not in answer, (name, request, answer)
      values = [np.array(spec["value"], dtype=object) for spec in request["inputs"].values()]
      assert all(len(value) <= limits.max_rows for value in values)
      if request["signature"] == "token_ids":
        assert values[0].size <= limits.max_tokens


def test_squad_export_answers_an_empty_context_with_the_lowest_score(served):
  """No context, no answer: "" at offsets -1, scored below every answer (the lowest float32)."""
  answer = served["squad"]["empty context"]
  assert answer["answer"][1:] == ["", ""]
  assert answer["answer_start"][1:] == [-1, -1] and answer["answer_end"][1:] == [-1, -1]
  lowest = float(np.finfo(np.float32).min)
  assert answer["score"][1:] == [lowest, lowest]
  assert answer["score"][0] > lowest

