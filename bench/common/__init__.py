"""What the suites share: throwaway databases (databases), server and worker processes
(processes), who used the CPU (cpu), percentiles (latency), machine facts (machine),
`--out` and the marked sections (output), plots, py-spy profiles (pyspy) and the
synthetic agent states every suite sends (agent_states)."""
