"""AMD GPUs through the ``amd-smi`` command-line tool (ROCm 6+): parser, collector, fake."""
