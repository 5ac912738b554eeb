import sys

from autograder.commands.cli import main

sys.exit(main())
