"""amdsmi: see collector.py."""
