"""Device health: rules (pure: history -> verdicts), fault tables (data), remedy (writes Kubernetes through k8s/)."""
