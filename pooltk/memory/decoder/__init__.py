"""A decoder-only transformer from a Hugging Face config.json, split into pipeline stages, for the
replay."""
