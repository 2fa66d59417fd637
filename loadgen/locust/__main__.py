"""`python -m loadgen.locust ARGS`: Locust itself, with the ready locustfile."""

from loadgen.commands.extras import LOCUST, require

require("locust", LOCUST, "loadgen.locust")

from loadgen.locust.engine import main  # noqa: E402  (needs the extra checked above)

main()
