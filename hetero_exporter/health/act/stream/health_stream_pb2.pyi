import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_STATE_UNSPECIFIED: _ClassVar[DeviceState]
    DEVICE_STATE_OK: _ClassVar[DeviceState]
    DEVICE_STATE_DEGRADED: _ClassVar[DeviceState]
    DEVICE_STATE_FAILED: _ClassVar[DeviceState]
    DEVICE_STATE_UNKNOWN: _ClassVar[DeviceState]
    DEVICE_STATE_RECOVERING: _ClassVar[DeviceState]

class Severity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEVERITY_UNSPECIFIED: _ClassVar[Severity]
    SEVERITY_INFO: _ClassVar[Severity]
    SEVERITY_WARNING: _ClassVar[Severity]
    SEVERITY_CRITICAL: _ClassVar[Severity]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_NONE: _ClassVar[Action]
    ACTION_RESTART_APP: _ClassVar[Action]
    ACTION_RESET_DEVICE: _ClassVar[Action]
    ACTION_REBOOT_NODE: _ClassVar[Action]
    ACTION_CONTACT_SUPPORT: _ClassVar[Action]
    ACTION_ISOLATE_DEVICE: _ClassVar[Action]
DEVICE_STATE_UNSPECIFIED: DeviceState
DEVICE_STATE_OK: DeviceState
DEVICE_STATE_DEGRADED: DeviceState
DEVICE_STATE_FAILED: DeviceState
DEVICE_STATE_UNKNOWN: DeviceState
DEVICE_STATE_RECOVERING: DeviceState
SEVERITY_UNSPECIFIED: Severity
SEVERITY_INFO: Severity
SEVERITY_WARNING: Severity
SEVERITY_CRITICAL: Severity
ACTION_UNSPECIFIED: Action
ACTION_NONE: Action
ACTION_RESTART_APP: Action
ACTION_RESET_DEVICE: Action
ACTION_REBOOT_NODE: Action
ACTION_CONTACT_SUPPORT: Action
ACTION_ISOLATE_DEVICE: Action

class WatchDeviceHealthRequest(_message.Message):
    __slots__ = ("vendors",)
    VENDORS_FIELD_NUMBER: _ClassVar[int]
    vendors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, vendors: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchDeviceEventsRequest(_message.Message):
    __slots__ = ("vendors",)
    VENDORS_FIELD_NUMBER: _ClassVar[int]
    vendors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, vendors: _Optional[_Iterable[str]] = ...) -> None: ...

class DeviceIdentity(_message.Message):
    __slots__ = ("uuid", "vendor", "kind", "index", "pci_address", "model", "parent")
    UUID_FIELD_NUMBER: _ClassVar[int]
    VENDOR_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PCI_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    vendor: str
    kind: str
    index: int
    pci_address: str
    model: str
    parent: str
    def __init__(self, uuid: _Optional[str] = ..., vendor: _Optional[str] = ..., kind: _Optional[str] = ..., index: _Optional[int] = ..., pci_address: _Optional[str] = ..., model: _Optional[str] = ..., parent: _Optional[str] = ...) -> None: ...

class Reason(_message.Message):
    __slots__ = ("code", "fault_class", "action", "severity", "message", "first_seen", "last_seen", "count", "source")
    CODE_FIELD_NUMBER: _ClassVar[int]
    FAULT_CLASS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    code: str
    fault_class: str
    action: Action
    severity: Severity
    message: str
    first_seen: _timestamp_pb2.Timestamp
    last_seen: _timestamp_pb2.Timestamp
    count: int
    source: str
    def __init__(self, code: _Optional[str] = ..., fault_class: _Optional[str] = ..., action: _Optional[_Union[Action, str]] = ..., severity: _Optional[_Union[Severity, str]] = ..., message: _Optional[str] = ..., first_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ..., source: _Optional[str] = ...) -> None: ...

class QualitySummary(_message.Message):
    __slots__ = ("readings", "ok", "stale", "error", "unsupported", "oldest_age_seconds", "collector_ok")
    READINGS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COLLECTOR_OK_FIELD_NUMBER: _ClassVar[int]
    readings: int
    ok: int
    stale: int
    error: int
    unsupported: int
    oldest_age_seconds: float
    collector_ok: bool
    def __init__(self, readings: _Optional[int] = ..., ok: _Optional[int] = ..., stale: _Optional[int] = ..., error: _Optional[int] = ..., unsupported: _Optional[int] = ..., oldest_age_seconds: _Optional[float] = ..., collector_ok: _Optional[bool] = ...) -> None: ...

class DeviceHealth(_message.Message):
    __slots__ = ("device", "state", "reasons", "quality", "since", "observed")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    device: DeviceIdentity
    state: DeviceState
    reasons: _containers.RepeatedCompositeFieldContainer[Reason]
    quality: QualitySummary
    since: _timestamp_pb2.Timestamp
    observed: _timestamp_pb2.Timestamp
    def __init__(self, device: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., state: _Optional[_Union[DeviceState, str]] = ..., reasons: _Optional[_Iterable[_Union[Reason, _Mapping]]] = ..., quality: _Optional[_Union[QualitySummary, _Mapping]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., observed: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeviceHealthUpdate(_message.Message):
    __slots__ = ("node", "observed", "full", "devices", "removed", "more")
    NODE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    node: str
    observed: _timestamp_pb2.Timestamp
    full: bool
    devices: _containers.RepeatedCompositeFieldContainer[DeviceHealth]
    removed: _containers.RepeatedCompositeFieldContainer[DeviceIdentity]
    more: bool
    def __init__(self, node: _Optional[str] = ..., observed: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., full: _Optional[bool] = ..., devices: _Optional[_Iterable[_Union[DeviceHealth, _Mapping]]] = ..., removed: _Optional[_Iterable[_Union[DeviceIdentity, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class DeviceEvent(_message.Message):
    __slots__ = ("node", "kind", "episode_id", "device", "reason", "state", "time", "opened", "message", "replay")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[DeviceEvent.Kind]
        KIND_OPENED: _ClassVar[DeviceEvent.Kind]
        KIND_RECOVERED: _ClassVar[DeviceEvent.Kind]
    KIND_UNSPECIFIED: DeviceEvent.Kind
    KIND_OPENED: DeviceEvent.Kind
    KIND_RECOVERED: DeviceEvent.Kind
    NODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    OPENED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    node: str
    kind: DeviceEvent.Kind
    episode_id: str
    device: DeviceIdentity
    reason: Reason
    state: DeviceState
    time: _timestamp_pb2.Timestamp
    opened: _timestamp_pb2.Timestamp
    message: str
    replay: bool
    def __init__(self, node: _Optional[str] = ..., kind: _Optional[_Union[DeviceEvent.Kind, str]] = ..., episode_id: _Optional[str] = ..., device: _Optional[_Union[DeviceIdentity, _Mapping]] = ..., reason: _Optional[_Union[Reason, _Mapping]] = ..., state: _Optional[_Union[DeviceState, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., opened: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ..., replay: _Optional[bool] = ...) -> None: ...
