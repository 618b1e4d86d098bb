"""What crosses a stage boundary: one tensor (:class:`TensorSpec`) and one buffer set
(:class:`Boundary`)."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from pooltk.memory.errors import MemoryModelError, is_positive_int, positive_int
from pooltk.memory.units import DTYPE_ALIASES, DTYPE_BYTES, to_unit

__all__ = ["Boundary", "TensorSpec", "dtype_name", "harness_boundary"]


def dtype_name(dtype: Any, what: str = "dtype") -> str:
    """torch's name of ``dtype`` (``torch.bfloat16``, ``"bf16"`` and ``"BFloat16"`` are
    ``"bfloat16"``), else :class:`MemoryModelError` naming ``what``."""
    lowered = str(dtype).removeprefix("torch.").strip().lower()
    name = DTYPE_ALIASES.get(lowered, lowered)
    if name not in DTYPE_BYTES:
        raise MemoryModelError(
            what,
            found=repr(dtype),
            required=f"one of {', '.join(DTYPE_BYTES)} (or an alias: {', '.join(DTYPE_ALIASES)})",
            fix="use torch's dtype name, e.g. 'bfloat16' or 'float32'.",
        )
    return name


@dataclass(kw_only=True, slots=True, frozen=True)
class TensorSpec:
    """One tensor that crosses a stage boundary, per microbatch."""

    shape: tuple[int, ...]
    """Its shape for one microbatch, e.g. ``(rows_per_microbatch, seq_len, hidden)``. Every
    entry >= 1."""
    dtype: str = "bfloat16"
    """torch dtype name (``float32``, ``bfloat16``, ...) or a common alias (``bf16``, ``fp32``)."""
    name: str = ""
    """What the tensor is, for tables and provenance (``hidden_states``)."""

    def __post_init__(self) -> None:
        label = f"TensorSpec{f' {self.name!r}' if self.name else ''}"
        shape = tuple(self.shape) if isinstance(self.shape, (tuple, list)) else None
        if not shape or not all(is_positive_int(d) for d in shape):
            raise MemoryModelError(
                f"{label}.shape",
                found=repr(self.shape),
                required="a non-empty tuple of integers >= 1",
                fix="give the per-microbatch shape, e.g. (2, 2048, 7168); a zero or negative size "
                "is never a buffer.",
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype_name(self.dtype, f"{label}.dtype"))

    @property
    def numel(self) -> int:
        """Elements per microbatch."""
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of one buffer for one microbatch."""
        return self.numel * DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        """e.g. ``hidden_states bfloat16 (2, 2048, 7168) = 56.0 MiB``."""
        dims = ", ".join(map(str, self.shape))
        head = f"{self.name} " if self.name else ""
        return f"{head}{self.dtype} ({dims}) = {to_unit(self.nbytes, 'mib'):.1f} MiB"


def _tensor_specs(field: str, value: Any, required: str, fix: str) -> tuple[TensorSpec, ...]:
    """``value`` as a non-empty tuple of :class:`TensorSpec`, or a :class:`MemoryModelError` on
    ``Boundary.<field>``."""
    specs = tuple(value) if isinstance(value, (tuple, list)) else ()
    if not specs or not all(isinstance(t, TensorSpec) for t in specs):
        raise MemoryModelError(f"Boundary.{field}", found=repr(value), required=required, fix=fix)
    return specs


@dataclass(kw_only=True, slots=True, frozen=True)
class Boundary:
    """Every tensor that crosses one stage boundary for one microbatch: one receive-buffer set."""

    activations: tuple[TensorSpec, ...]
    """Forward: what stage ``b`` sends to stage ``b + 1``. At least one tensor."""
    grads: tuple[TensorSpec, ...] | None = None
    """Backward: what stage ``b + 1`` sends back to stage ``b``. ``None``: the gradients have
    the activations' shapes and dtypes (the usual case)."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "activations",
            _tensor_specs(
                "activations",
                self.activations,
                "a non-empty tuple of TensorSpec",
                "list the tensors one microbatch sends across the boundary, e.g. "
                "(TensorSpec(shape=(2, 2048, 7168)),).",
            ),
        )
        if self.grads is not None:
            object.__setattr__(
                self,
                "grads",
                _tensor_specs(
                    "grads",
                    self.grads,
                    "None (same as the activations) or a non-empty tuple of TensorSpec",
                    "leave grads=None unless the gradients differ from the activations.",
                ),
            )

    @property
    def grad_tensors(self) -> tuple[TensorSpec, ...]:
        """The gradient tensors, defaulting to the activations' specs."""
        return self.activations if self.grads is None else self.grads

    @property
    def forward_bytes(self) -> int:
        """Bytes of one forward (activation) receive-buffer set."""
        return sum(t.nbytes for t in self.activations)

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient receive-buffer set."""
        return sum(t.nbytes for t in self.grad_tensors)

    @classmethod
    def hidden_state(
        cls, *, rows: int, seq_len: int, hidden: int, dtype: str = "bfloat16"
    ) -> Boundary:
        """One ``(rows, seq_len, hidden)`` tensor each way: a plain transformer boundary."""
        return cls(
            activations=(
                TensorSpec(shape=(rows, seq_len, hidden), dtype=dtype, name="hidden_states"),
            )
        )

    @classmethod
    def opaque(cls, n_bytes: int, *, name: str = "boundary") -> Boundary:
        """A boundary known only by its bytes per set (modelled as one uint8 tensor each way)."""
        n = positive_int(
            "Boundary.opaque n_bytes", n_bytes, "give the bytes of one buffer set, >= 1."
        )
        return cls(activations=(TensorSpec(shape=(n,), dtype="uint8", name=name),))

    def describe(self) -> str:
        """One line listing the tensors and the set size."""
        parts = " + ".join(t.describe() for t in self.activations)
        text = f"{parts} -> {to_unit(self.forward_bytes, 'mib'):.1f} MiB per forward set"
        if self.grads is not None:
            text += f"; grads {to_unit(self.grad_bytes, 'mib'):.1f} MiB per set"
        return text


def harness_boundary(*, rows: int, seq_len: int, hidden: int, dtype: str = "float32") -> Boundary:
    """The parity harness's boundary: one ``(rows, seq_len, hidden)`` tensor each way."""
    return Boundary.hidden_state(rows=rows, seq_len=seq_len, hidden=hidden, dtype=dtype)
