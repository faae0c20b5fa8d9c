"""`python -m benchmark`: the benchmark's command (benchmark/run.py)."""

import sys

from benchmark.run import main

main(sys.argv[1:])
