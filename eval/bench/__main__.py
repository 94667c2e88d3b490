"""``python -m constrained_grpo.eval.bench``: every speed benchmark (``make bench``)."""

import sys

from constrained_grpo.eval.bench import main

sys.exit(main())
