"""Schedule analysis from torch's own action orders: programs (:mod:`~pooltk.analysis.programs`)
and buffer lifetimes and live sets (:mod:`~pooltk.analysis.lifetimes`). Needs torch; no pandas
except where a function returns a DataFrame (imported inside it)."""
