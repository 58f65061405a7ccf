"""The local learning workload: a small decoder-only language model trained on this machine's CPUs under
conditions of replicas, local steps, outer optimizer and injected faults, measured as observations that
calibrate the catalog's learning model (README.md beside this file)."""
