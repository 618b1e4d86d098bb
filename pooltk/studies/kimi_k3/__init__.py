"""The Kimi-K3 on GB200 study (NVIDIA-NeMo/Automodel PR #3780): pipeline presets with provenance
(:mod:`~pooltk.studies.kimi_k3.presets`) and the claims ledger over the published figures
(:mod:`~pooltk.studies.kimi_k3.claims`)."""
