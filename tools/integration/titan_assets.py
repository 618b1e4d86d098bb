"""A local tokenizer and text dataset for torchtitan runs, generated at run time (nothing
downloaded).

torchtitan's wheel ships no test assets (its ``llama3_debugmodel`` points at the source tree's
``tests/assets``). This writes, under one folder:

- ``tokenizer/``: ``tokenizer.json`` (a byte-level BPE trained with ``tokenizers`` on the generated
  text, at most ``VOCAB`` entries so it fits the debug model's 2048-row embedding) and
  ``tokenizer_config.json`` naming its BOS/EOS tokens;
- ``data/train.jsonl``: ``ROWS`` lines ``{"text": ...}`` of pseudo-words from a fixed seed, read
  by torchtitan's ``c4_test`` loader through ``--dataloader.dataset_path``.

The same seed gives the same bytes, so every variant of a suite trains on the same tokens.

    python tools/integration/titan_assets.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB = 1024
"""Tokenizer vocabulary (<= the debug model's 2048 embedding rows)."""

ROWS = 2000
"""Text rows in the dataset (5 steps of 8 x 64 tokens use a small part of it)."""

SEED = 20261130
"""The generator's seed."""

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def _text(rng: random.Random) -> list[str]:
    syllables = [
        "ka",
        "lo",
        "mi",
        "ne",
        "tu",
        "ra",
        "si",
        "po",
        "ve",
        "da",
        "gri",
        "sto",
        "ul",
        "an",
        "er",
    ]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(600)]
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(40, 120))) + "." for _ in range(ROWS)
    ]


def write_assets(out: Path) -> Path:
    """Write tokenizer/ and data/train.jsonl under ``out``; returns ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rows = _text(random.Random(SEED))
    (out / "data").mkdir(parents=True, exist_ok=True)
    (out / "tokenizer").mkdir(parents=True, exist_ok=True)
    with open(out / "data" / "train.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps({"text": row}) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(rows, trainer=trainer)
    tok.save(str(out / "tokenizer" / "tokenizer.json"))
    (out / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps(
            {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True}
        )
    )
    return out


if __name__ == "__main__":
    print(write_assets(Path(sys.argv[1])))
