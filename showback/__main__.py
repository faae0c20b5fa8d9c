"""`python -m showback`: the showback report's command (showback/report.py)."""

import sys

from showback.report import main

main(sys.argv[1:])
