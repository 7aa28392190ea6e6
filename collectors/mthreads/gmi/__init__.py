"""Moore Threads ``mthreads-gmi``: parser, collector, fake."""
