"""Run the command line with `python -m narrator`."""

from narrator.cli import main

main()
