"""toolgym command line: `python run_agent.py --help`."""

import sys

from toolgym.cli import main

if __name__ == "__main__":
    sys.exit(main())
