from loadgen.sim.cli import main

main()
