"""`python -m rearrival`: the CLI, for subprocesses started by this interpreter."""

from rearrival.cli import main

main()
