"""Old import path of the table loader; everything lives in `llm_assets.data.tables`."""

from __future__ import annotations

from llm_assets.data.tables import InputError, load_table

read_table = load_table
"""Alias of `llm_assets.data.tables.load_table` (text exactly as written, nulls as nulls)."""

__all__ = ["InputError", "read_table"]
