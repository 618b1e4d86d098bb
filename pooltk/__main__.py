import sys

from pooltk.cli import main

sys.exit(main())
