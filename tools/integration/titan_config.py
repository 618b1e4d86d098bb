"""torchtitan config registry for the CPU integration runs:
``--module tools.integration.titan_config``.

torchtitan resolves ``--module`` as a fully qualified module and ``--config`` as a function in it
that returns a ``Trainer.Config``. ``llama3_cpu_sdpa`` is torchtitan's own ``llama3_debugmodel``
(6 layers, dim 256, vocab 2048) with three changes a CPU run needs and nothing else:

- every layer's inner attention is ``ScaledDotProductAttention`` (torchtitan's maskless causal
  SDPA, which its trainer supports by passing no masks); FlexAttention has no CPU backward and
  ``model_registry(attn_backend="sdpa")`` refuses SDPA for language models;
- CUDA graphs off (``training.disable_cuda_graphs``);
- no validation pass and no checkpoint unless asked on the command line.

Tokenizer and dataset come from ``--hf_assets_path`` and ``--dataloader.dataset_path``
(``tools/integration/titan_assets.py`` generates both); schedule, batch and steps are the
command line's (see ``titan_suite.py``).
"""

from __future__ import annotations


def llama3_cpu_sdpa():
    """torchtitan's llama3 debug model with SDPA attention, for CPU/gloo."""
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    for layer in config.model_spec.model.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    config.training.disable_cuda_graphs = True
    config.validator.enable = False
    config.checkpoint.enable = False
    return config
