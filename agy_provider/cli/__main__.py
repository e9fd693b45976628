"""`python -m agy_provider.cli`: the same as the `agy-provider` command."""

import sys

from agy_provider.cli import main

sys.exit(main())
