import sys

from ascend_spec.cli import main

sys.exit(main())
