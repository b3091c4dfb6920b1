"""`python -m ctxobs push FILE` — the same as the `ctxobs` console script."""

import sys

from ctxobs.cli import main

sys.exit(main())
