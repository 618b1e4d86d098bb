"""Studies of published runs: their presets, published figures and claims, with the data shipped
as package data (read with :mod:`importlib.resources`)."""
