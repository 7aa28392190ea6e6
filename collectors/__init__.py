"""Vendor collectors, installed as ``hetero_exporter.collectors``.

Each module = thin I/O over a vendor binding or CLI + pure parsing/normalizing, exposing
``create(options)``; its fake backend for simulation lives beside it (``*_fake.py``).
Only a vendor's own module imports its binding, lazily, so a missing binding disables
that vendor only.
"""
