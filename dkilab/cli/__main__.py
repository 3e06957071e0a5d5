"""`python -m dkilab.cli`."""
import sys

from dkilab.cli import main

sys.exit(main())
