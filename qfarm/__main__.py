import sys

from qfarm.cli import main

sys.exit(main())
