"""`python -m numawatch` is the same as the `numawatch` console script."""

import sys

from numawatch.cli import main

sys.exit(main())
