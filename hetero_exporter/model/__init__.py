"""The floor of hetero-exporter: the normalized, vendor-neutral model and what every layer shares.

Every collector turns vendor output into these frozen dataclasses; everything downstream
(Prometheus exposition, health rules, the node annotation, the scorer) reads only these.
Nothing here imports anything else of the project.

- ``types``: the dataclasses (schema version 1) and the closed vocabularies (kinds, methods,
  statuses, health states, link types, actions, severities);
- ``codec``: the JSON codec and the compact form of the node annotation;
- ``fields``: reading field names and their base units;
- ``spec``: ``VendorSpec``, what a vendor package declares.

The names of ``types`` and ``codec`` are re-exported here: ``from hetero_exporter.model import
DeviceSample, snapshot_to_json``.
"""

from hetero_exporter.model.codec import (  # noqa: F401
    to_dict,
    from_dict,
    snapshot_to_json,
    check_schema,
    snapshot_from_json,
    snapshot_from_doc,
    compact_document,
    compact_json,
    COMPACT_READINGS,
)
from hetero_exporter.model.types import (  # noqa: F401
    SchemaError,
    Quality,
    Reading,
    DeviceIdentity,
    Fault,
    Health,
    ProcessSample,
    Allocation,
    Link,
    Profile,
    DeviceSample,
    CollectorStatus,
    SourceStatus,
    NodeSnapshot,
    ContainerEnergy,
    EnergySplit,
    SCHEMA_VERSION,
    KINDS,
    METHODS,
    STATUSES,
    HEALTH_STATES,
    RECOVERING,
    HOST_LINK_TYPES,
    LINK_TYPES,
    ATTRIBUTION_METHODS,
    ACTIONS,
    SEVERITIES,
)
