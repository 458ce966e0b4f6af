"""`python -m ledger.audit.verifier` (see `cli`)."""

import sys

from .cli import main

if __name__ == "__main__":  # not when a tool imports every module
    sys.exit(main())
