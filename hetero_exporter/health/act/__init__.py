"""Acting: the health loop that writes what the plan wants to Kubernetes (remedy, remedy_cluster:
the only writers), the fleet budget's Lease slots, the loop's self-metrics and the dry-run report."""
