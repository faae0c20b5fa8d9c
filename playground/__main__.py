"""`python -m playground`: the playground's command (playground/command.py)."""

import sys

from playground.command import main

main(sys.argv[1:])
