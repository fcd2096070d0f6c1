import sys

from dnnprof.cli.main import main

sys.exit(main())
