"""The `llm-assets` command line: `commands` (the click group), `inputs` (what the commands read
and check before anything is sent) and `reports` (what they print)."""

from llm_assets.cli.commands import main

__all__ = ["main"]
