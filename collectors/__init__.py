"""Vendor packages, installed as ``hetero_exporter.collectors``: one package per vendor.

Each package's ``__init__.py`` declares its ``SPEC`` (hetero_exporter.model.spec.VendorSpec);
each tool has ``parse.py`` (pure), ``collector.py`` (quality table + hooks over the SDK or the
binding) and ``fake.py`` (the simulated backend). Only a vendor's own package imports its
binding, lazily, so a missing binding disables that vendor only; vendor packages do not import
each other (import-linter), except Hygon's hy-smi, a fork of rocm-smi read by AMD's parser.

``BUILTIN`` is the one static table of the built-in vendors (hetero_exporter.vendors reads it).
"""

BUILTIN = ("nvidia", "amd", "hygon", "ascend", "cambricon", "metax", "iluvatar", "mthreads", "enflame", "kunlunxin")
