"""Detection: the policy (thresholds, classes, debounce) and the rules that turn a device's
history and this snapshot into verdicts (pure; no Kubernetes, no I/O beyond the policy file)."""
