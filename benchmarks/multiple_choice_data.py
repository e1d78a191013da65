"""A 4-way multiple-choice set built from SQuAD (no SWAG copy is available offline).

For each question whose first answer lies inside one sentence of a paragraph of at least
`num_endings` sentences, the context is the question and the endings are that sentence and other
sentences of the same paragraph drawn at random (all shuffled, seeded). Sentences end after `.`,
`!` or `?` followed by whitespace and an upper-case letter, digit or quote. Used by
prove_multiple_choice.py and bench_finetune.py.
"""
import json
import random
import re

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])")


def sentence_spans(text: str) -> list[tuple[int, int]]:
  """(start, end) character spans of the text's sentences."""
  spans, start = [], 0
  for match in SENTENCE_END.finditer(text):
    spans.append((start, match.start()))
    start = match.end()
  spans.append((start, len(text)))
  return [(s, e) for s, e in spans if text[s:e].strip()]


def build_examples(articles: list, num_endings: int, rng: random.Random) -> list[dict]:
  """JSON Lines records {"context": question, "endings": sentences, "label": index}."""
  records = []
  for article in articles:
    for paragraph in article["paragraphs"]:
      context = paragraph["context"]
      spans = sentence_spans(context)
      if len(spans) < num_endings:
        continue
      for qa in paragraph["qas"]:
        answer = qa["answers"][0]
        start, end = answer["answer_start"], answer["answer_start"] + len(answer["text"])
        inside = [i for i, (s, e) in enumerate(spans) if s <= start and end <= e]
        if not inside:  # The answer crosses a sentence boundary.
          continue
        others = [i for i in range(len(spans)) if i != inside[0]]
        chosen = [inside[0]] + rng.sample(others, num_endings - 1)
        rng.shuffle(chosen)
        records.append({"context": qa["question"],
                        "endings": [context[spans[i][0]:spans[i][1]] for i in chosen],
                        "label": chosen.index(inside[0])})
  return records


def split(articles: list, eval_articles: list[str], num_train: int, num_endings: int,
          seed: int) -> tuple[list[dict], list[dict]]:
  """(train, dev) records: dev from the named articles, train num_train questions of the others
  (shuffled)."""
  rng = random.Random(seed)
  held_out = [a for a in articles if a["title"] in eval_articles]
  if len(held_out) != len(eval_articles):
    raise ValueError("not all of %s are articles of the SQuAD file" % ", ".join(eval_articles))
  train = build_examples([a for a in articles if a["title"] not in eval_articles], num_endings,
                         rng)
  rng.shuffle(train)
  return train[:num_train], build_examples(held_out, num_endings, rng)


def write_jsonl(path: str, records: list[dict]) -> None:
  with open(path, "w", encoding="utf-8") as writer:
    writer.writelines(json.dumps(record) + "\n" for record in records)
