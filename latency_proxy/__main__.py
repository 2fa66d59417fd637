import sys

from latency_proxy.cli import main

sys.exit(main())
