"""What adds facts to a snapshot beside the collectors: PCI presence (the bus, udev), the kernel
log (/dev/kmsg follower, cursor, boot id; rules from each vendor's spec) and attribution
(processes to containers and pods through cgroups). Each is a sampler enricher or feeds one;
none judges (health/ does) and none writes Kubernetes."""
