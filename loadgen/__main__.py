"""`python -m loadgen` and the `loadgen` script."""

import sys

from loadgen.commands.extras import LOADGEN, require

require("loadgen", LOADGEN, "loadgen")

from loadgen.commands.cli import main  # noqa: E402  (needs the extra checked above)

if __name__ == "__main__":
    sys.exit(main())
