"""``efsmi``: parser, collector and fake of Enflame's management tool."""
