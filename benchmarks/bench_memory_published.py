"""The whole-stage estimate against a published per-stage table: torchtitan, Llama-3-8B pruned to \
16 layers, PP2.

Run: ``.venv/bin/python benchmarks/bench_memory_published.py [--microbatches 2,4,8,16]
[--ranks 0,1]``

Published (discuss.pytorch.org/t/221886, "Question about GPU memory usage when using pipeline
parallelism training under larger micro batch count", 2025): torchtitan v0.1.0 with FSDP2 + PP 1F1B,
4 GPUs as DP2 x PP2, llama3-8b pruned to 16 layers,
``--training.seq_len 4096 --activation_checkpoint.mode full --training.local_batch_size 16``, torch
2.9.0.dev20250725; peak memory as torch's max reserved (GB as the log prints it; torchtitan's memory
line prints GiB), rank 0 = stage 0 and rank 2 = stage 1:

    microbatches   stage 0   stage 1
               2     35.75     40.30
               4     35.80     42.27
               8     35.94     48.27
              16     36.20     65.47

The poster found each microbatch's LM-head output (4096 x 128256) kept until the step ends (the
schedule's output chunks: ``return_outputs`` was torch's default, True). Read here: microbatches of
one 4096-token row (torchtitan's default ``pipeline_parallel_microbatch_size`` 1, and the output
shape the poster names), so the microbatch count is the local batch (16 in the command shown).
Replayed: the same decoder widths (hidden 4096, 32 heads, 8 kv heads, FFN 14336, vocabulary 128256,
bf16), 16 layers split 8 + 8, M microbatches of 1 x 4096 tokens, full activation checkpointing,
AdamW, outputs returned. Not replayed: FSDP2 over the DP pair. Its float32 master weights, gradients
and Adam states sharded over 2 ranks hold the bytes that unsharded bf16 ones hold (4 / 2 = 2 bytes a
parameter, 8 / 2 = 4 for the states), but its per-layer bf16 all-gather copies and the allocator's
reserve are not modelled. So the printed comparison is the change with M on each stage, where those
terms cancel, beside the absolute figures.
"""

from __future__ import annotations

import argparse

from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.model import PipelineShape
from pooltk.memory.replay.run import Training, replay_rank

PUBLISHED = {2: (35.75, 40.30), 4: (35.80, 42.27), 8: (35.94, 48.27), 16: (36.20, 65.47)}
"""microbatches -> (stage 0, stage 1) max reserved, as the thread prints it (torchtitan prints GiB,
labelled GB)."""

LLAMA3_8B_16 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "rope_theta": 500000.0,
}
"""Llama-3-8B's widths (torchtitan's llama3 8B flavor), pruned to 16 layers as in the thread."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", default="2,4,8,16")
    parser.add_argument("--ranks", default="0,1")
    args = parser.parse_args()
    cfg = decoder_config(LLAMA3_8B_16)
    ms = [int(x) for x in args.microbatches.split(",")]
    ranks = [int(x) for x in args.ranks.split(",")]
    got: dict[tuple[int, int], float] = {}
    print(
        f"{'M':>3} {'stage':>5} {'published GB':>12} {'replayed GiB':>12} "
        f"{'kept outputs GiB':>16}  peak at"
    )
    for m in ms:
        builder = decoder_builder(cfg, rows=1, seq_len=4096, checkpointing=True, split="automodel")
        for rank in ranks:
            r = replay_rank(
                builder,
                PipelineShape(pp=2, n_microbatches=m),
                rank,
                variant="stock",
                training=Training(return_outputs=True),
            )
            got[(m, rank)] = r.peak.bytes / 2**30
            print(
                f"{m:>3} {rank:>5} {PUBLISHED[m][rank]:>12.2f} {got[(m, rank)]:>12.2f} "
                f"{r.at_peak['kept_outputs'] / 2**30:>16.2f}  {r.peak.describe()}",
                flush=True,
            )
    print()
    print("change with M from the smallest M, per stage (GB published, GiB replayed):")
    first = ms[0]
    for rank in ranks:
        for m in ms[1:]:
            print(
                f"  stage {rank}: M {first} -> {m}: "
                f"published {PUBLISHED[m][rank] - PUBLISHED[first][rank]:+.2f}, "
                f"replayed {got[(m, rank)] - got[(first, rank)]:+.2f}"
            )


if __name__ == "__main__":
    main()
