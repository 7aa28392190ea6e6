"""What a vendor package builds on: the collector contract, VendorSpec, the CLI runner, shared
parsers, the fault ledger, the detail-call schedule and the fake-tool harness."""
