"""Device health in three steps: ``detect`` (the policy and the pure rules: history ->
verdicts), ``plan`` (pure sub-plans: what the node, its devices and pods should carry) and
``act`` (the health loop: the only code that writes Kubernetes, through k8s/)."""
