"""`python -m llm_assets.cli`."""

from llm_assets.cli.commands import main

main()
