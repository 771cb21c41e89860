"""One-off probes and secondary benchmarks: each measures one question about the testbed or the simulator;
their findings, with the commands, are on the topic pages under docs/results/. Run from the repository root."""
