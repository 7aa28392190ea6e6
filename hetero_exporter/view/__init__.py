"""``hetero-exporter top``: a live view of every accelerator on the node (frame: what is shown;
render: how, with rich; keys: the keyboard; live: the refresh loop)."""
