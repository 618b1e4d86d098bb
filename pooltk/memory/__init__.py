"""Memory: the exact receive-buffer model (:mod:`pooltk.memory.model`) and the whole-stage estimate
by replay (:mod:`pooltk.memory.replay`), with config readers, a decoder for config.json models, and
verdicts."""
