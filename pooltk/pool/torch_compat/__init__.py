"""The only home of torch's names: where this torch makes receive buffers (``layouts``), its stage
methods and attributes (``stage_api``), the one way a receive buffer is made (``placeholders``),
the one binder of wrappers on torch's methods (``bind``), torch 2.15's semantics (``per_receive``),
the private counts the holders' check reads (``tensor_counts``).
"""
