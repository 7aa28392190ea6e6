"""Scheduler-side scoring over the model, and the scheduler extender HTTP service."""
