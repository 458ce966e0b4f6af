"""`python -m ledger.audit.verifier` (see `cli`)."""

import sys

from .cli import main

sys.exit(main())
