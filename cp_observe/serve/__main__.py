"""``python -m cp_observe.serve``: run the scoring service (the same as ``cp-observe serve``)."""

from __future__ import annotations

import sys

from cp_observe.serve._cli import main

if __name__ == "__main__":
    sys.exit(main())
