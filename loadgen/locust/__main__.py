"""`python -m loadgen.locust ARGS`: Locust itself, with the ready locustfile."""

from loadgen.locust.engine import main

main()
