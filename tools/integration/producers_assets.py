"""A tiny model folder, tokenizer, dataset and recipe YAML for NeMo Automodel's own LLM recipe
(nothing downloaded).

Automodel's fine-tuning recipe (``nemo_automodel.recipes.llm.train_ft``) reads a model name or
folder for three things: the model config (``AutoConfig.from_pretrained``), the tokenizer
(``NeMoAutoTokenizer.from_pretrained``) and the pipeline's causal-mask collate wrapper. This writes,
under one folder:

- ``model/``: ``config.json`` of a tiny ``LlamaConfig`` (``LAYERS`` layers of width ``HIDDEN``, a
  ``VOCAB``-row embedding; no weights: the recipe builds the model from the config) and the
  tokenizer files (``tokenizer.json``: a word-level tokenizer trained with ``tokenizers`` on the
  generated text, wrapped by ``PreTrainedTokenizerFast`` so ``save_pretrained`` writes what
  ``from_pretrained`` reads);
- ``data/train.jsonl``: ``ROWS`` lines ``{"question": ..., "answer": ...}`` of pseudo-words from a
  fixed seed, each exactly ``WORDS_Q`` + ``WORDS_A`` words (one token each), read by Automodel's
  ``ColumnMappedTextInstructionDataset`` from a local path;
- per run, by :func:`write_recipe`: the recipe's own YAML: PP ``pp``, 1F1B, one-row microbatches
  (``LOCAL_BATCH`` of them a step), gloo, SGD, ``steps`` steps, no checkpoints, validation every
  ``VAL_EVERY`` steps, and
  the pool keys of one of :data:`POOLS`; its ``checkpoint_dir`` (where the recipe writes
  ``training.jsonl`` and ``validation.jsonl``) is the run's folder.

The same seed gives the same bytes, so the pooled and stock runs train on the same tokens.

    python tools/integration/producers_assets.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB = 256
"""Embedding rows of the tiny model (>= the tokenizer's vocabulary)."""

HIDDEN, LAYERS, HEADS = 64, 4, 4
"""Width, decoder layers (split over the pipeline stages) and attention heads of the tiny Llama."""

ROWS = 256
"""Question/answer rows in the dataset (more than ``steps`` x the local batch)."""

WORDS_Q, WORDS_A = 11, 4
"""Words per question and per answer: every row tokenizes to the same length (BOS + 15 + EOS)."""

SEED = 20261201
"""The generator's seed."""

LOCAL_BATCH = 8
"""Rows a step (one per microbatch: 8 microbatches over the pipeline)."""

VAL_EVERY, VAL_ROWS = 2, 16
"""Validation every this many steps (the recipe's ``val_every_steps``), on the first ``VAL_ROWS``
rows of the same file (its ``[val]`` log lines and ``validation.jsonl``)."""

BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"

POOLS: dict[str, dict] = {
    "stock": {"pp_recv_buffer_pool": False},
    "automodel_pool": {"pp_recv_buffer_pool": True, "pp_recv_buffer_pool_slack": 2},
    "pooltk": {
        "pp_recv_buffer_pool": True,
        "pp_recv_buffer_pool_slack": 2,
        "pooltk": {"grad_slack": 1},
    },
}
"""Pool name -> its ``distributed.pipeline`` keys, as a user writes them (Automodel's own keys, and
the ``pooltk`` block of :mod:`pooltk.integrations.automodel`)."""


def _rows(rng: random.Random) -> list[dict[str, str]]:
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
    words = sorted(
        {"".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(400)}
    )[: VOCAB - 8]
    return [
        {
            "question": " ".join(rng.choice(words) for _ in range(WORDS_Q)),
            "answer": " ".join(rng.choice(words) for _ in range(WORDS_A)),
        }
        for _ in range(ROWS)
    ]


def write_assets(out: Path) -> Path:
    """Write model/ (config and tokenizer) and data/train.jsonl under ``out``; returns ``out``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    rows = _rows(random.Random(SEED))
    (out / "data").mkdir(parents=True, exist_ok=True)
    (out / "model").mkdir(parents=True, exist_ok=True)
    with open(out / "data" / "train.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(
        vocab_size=VOCAB, special_tokens=[PAD, BOS, EOS, UNK], show_progress=False
    )
    tok.train_from_iterator((f"{r['question']} {r['answer']}" for r in rows), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}",
        pair=f"{BOS} $A $B {EOS}",
        special_tokens=[(BOS, tok.token_to_id(BOS)), (EOS, tok.token_to_id(EOS))],
    )
    if tok.get_vocab_size() > VOCAB:
        raise RuntimeError(
            f"producers_assets: tokenizer has {tok.get_vocab_size()} entries, "
            f"more than VOCAB={VOCAB}"
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
    fast.save_pretrained(str(out / "model"))
    LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=64,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS),
        pad_token_id=tok.token_to_id(PAD),
        tie_word_embeddings=False,
        torch_dtype="float32",
    ).save_pretrained(str(out / "model"))
    return out


def recipe(pool: str, assets: Path, run_dir: Path, *, pp: int, steps: int) -> dict:
    """The recipe config with the pool keys of ``pool`` (a :data:`POOLS` name), as a dict (the
    YAML)."""
    dataset = {
        "_target_": "nemo_automodel.components.datasets.llm.column_mapped_text_instruction_dataset."
        "ColumnMappedTextInstructionDataset",
        "path_or_dataset_id": str(assets / "data" / "train.jsonl"),
        "column_mapping": {"question": "question", "answer": "answer"},
        "answer_only_loss_mask": True,
    }
    collate = {"_target_": "nemo_automodel.components.datasets.utils.default_collater"}
    loader = "torchdata.stateful_dataloader.StatefulDataLoader"
    return {
        "step_scheduler": {
            "global_batch_size": LOCAL_BATCH,
            "local_batch_size": LOCAL_BATCH,
            "max_steps": steps,
            "ckpt_every_steps": 10**6,
            "val_every_steps": VAL_EVERY,
            "num_epochs": 1,
        },
        "dist_env": {"backend": "gloo", "timeout_minutes": 2},
        "seed": 42,
        "model": {
            "_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_config",
            "config": {
                "_target_": "transformers.AutoConfig.from_pretrained",
                "pretrained_model_name_or_path": str(assets / "model"),
            },
            "torch_dtype": "float32",
        },
        "checkpoint": {"enabled": False, "checkpoint_dir": str(run_dir)},
        "distributed": {
            "strategy": "fsdp2",
            "dp_size": None,
            "tp_size": 1,
            "cp_size": 1,
            "pp_size": pp,
            "pipeline": {"pp_schedule": "1f1b", "pp_microbatch_size": 1, **POOLS[pool]},
        },
        "loss_fn": {"_target_": "nemo_automodel.components.loss.masked_ce.MaskedCrossEntropy"},
        "dataset": dataset,
        "dataloader": {"_target_": loader, "collate_fn": collate, "shuffle": False},
        "validation_dataset": {**dataset, "limit_dataset_samples": VAL_ROWS},
        "validation_dataloader": {"_target_": loader, "collate_fn": collate},
        "optimizer": {"_target_": "torch.optim.SGD", "lr": 0.1},
    }


def write_recipe(pool: str, assets: Path, run_dir: Path, *, pp: int, steps: int) -> Path:
    """Write ``run_dir/recipe.yaml`` with the pool keys of ``pool`` (JSON text, which YAML reads);
    returns its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "recipe.yaml"
    path.write_text(json.dumps(recipe(pool, assets, run_dir, pp=pp, steps=steps), indent=2) + "\n")
    return path


if __name__ == "__main__":
    print(write_assets(Path(sys.argv[1])))
