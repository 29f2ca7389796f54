"""The kubelet's pod-resources API (``v1.PodResourcesLister``, GA since Kubernetes 1.28): its messages and calls.

The messages are those of ``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``, transcribed in
``podresources_v1.proto`` next to this module. They are encoded and decoded here, by hand, rather than through
``protoc``-generated modules: the API is ten small messages, and a generated module ties numawatch to the protobuf
runtime version it was generated for (protobuf refuses gencode newer than its runtime), while this code needs
nothing but grpcio. The decoder follows the protobuf wire format's rules: fields in any order, unknown fields (a
newer kubelet's) skipped, the last value of a scalar field kept, repeated numbers packed or not, strings valid
UTF-8. What the values mean is judged by the pod_resources source, not here.

Every call has a deadline (``DEADLINE_SECONDS``); an answer is bounded in size (``MAX_MESSAGE_BYTES``). grpcio is
imported by the first ``Client``, made once the socket is there: importing it costs about 21.5 MB of resident memory,
which a node without the socket (the pod_resources source down) does not pay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import grpc

SERVICE = "v1.PodResourcesLister"
LIST = f"/{SERVICE}/List"
GET_ALLOCATABLE = f"/{SERVICE}/GetAllocatableResources"
GET = f"/{SERVICE}/Get"

# The kubelet answers from memory in milliseconds; a second is a kubelet that is stuck, and an evaluation waits no
# longer than that per call.
DEADLINE_SECONDS = 1.0
# The kubelet's own server caps messages at 16 MiB (podresources.DefaultMaxMsgSize); 860 containers answer in
# well under 1 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_MAX_FIELD = (1 << 29) - 1


class WireError(ValueError):
    """An answer that is not a valid encoding of the message it should be; the message says where."""


# --------------------------------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class Devices:
    """``ContainerDevices``: devices of one resource, with the NUMA nodes of their ``TopologyInfo`` (None: the
    message has no topology)."""

    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] | None


@dataclass(frozen=True)
class Memory:
    """``ContainerMemory``: memory or huge pages of one type on the NUMA nodes of its topology."""

    memory_type: str
    size: int
    numa_nodes: tuple[int, ...] | None


@dataclass(frozen=True)
class Container:
    """``ContainerResources`` (its DRA ``dynamic_resources`` are not read)."""

    name: str
    devices: tuple[Devices, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[Memory, ...] = ()


@dataclass(frozen=True)
class Pod:
    """``PodResources``."""

    name: str
    namespace: str
    containers: tuple[Container, ...] = ()


@dataclass(frozen=True)
class Allocatable:
    """``AllocatableResourcesResponse``: what the kubelet may hand out."""

    devices: tuple[Devices, ...] = ()
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[Memory, ...] = ()


# --------------------------------------------------------------------------------------------------- encoding
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values are ten bytes of two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string_field(number: int, value: str) -> bytes:
    if not value:
        return b""  # proto3 leaves a default value out
    data = value.encode("utf-8")
    return _varint(number << 3 | _BYTES) + _varint(len(data)) + data


def encode_get_request(pod_name: str, pod_namespace: str) -> bytes:
    """``GetPodResourcesRequest``."""
    return _string_field(1, pod_name) + _string_field(2, pod_namespace)


def encode_empty() -> bytes:
    """``ListPodResourcesRequest`` and ``AllocatableResourcesRequest``: no fields."""
    return b""


# --------------------------------------------------------------------------------------------------- decoding
@dataclass
class _Fields:
    """One message's fields as the wire lists them: number -> values (ints for varints, bytes for the rest)."""

    values: dict[int, list[Any]] = field(default_factory=dict)


def _read_varint(data: bytes, at: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= len(data):
            raise WireError(f"{where}: truncated varint")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >> 64:
                raise WireError(f"{where}: varint longer than 64 bits")
            return result, at
        shift += 7
        if shift >= 70:
            raise WireError(f"{where}: varint longer than 10 bytes")


def _fields(data: bytes, where: str) -> _Fields:
    fields = _Fields()
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at, where)
        number, wire = key >> 3, key & 7
        if number < 1 or number > _MAX_FIELD:
            raise WireError(f"{where}: field number {number} out of range")
        value: Any
        if wire == _VARINT:
            value, at = _read_varint(data, at, where)
        elif wire == _BYTES:
            length, at = _read_varint(data, at, where)
            if at + length > len(data):
                raise WireError(f"{where}: field {number} runs past the end of the message")
            value, at = data[at : at + length], at + length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if at + size > len(data):
                raise WireError(f"{where}: field {number} runs past the end of the message")
            value, at = data[at : at + size], at + size
        else:  # groups (3, 4) are gone from proto3; 6 and 7 do not exist
            raise WireError(f"{where}: field {number} has wire type {wire}, which no proto3 message uses")
        fields.values.setdefault(number, []).append((wire, value))
    return fields


def _typed(fields: _Fields, number: int, wire: int, what: str, where: str) -> list[Any]:
    values = []
    for got, value in fields.values.get(number, ()):
        if got != wire:
            raise WireError(f"{where}: {what} (field {number}) has wire type {got}, expected {wire}")
        values.append(value)
    return values


def _string(fields: _Fields, number: int, what: str, where: str) -> str:
    values = _typed(fields, number, _BYTES, what, where)
    if not values:
        return ""
    try:
        return bytes(values[-1]).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f"{where}: {what} is not valid UTF-8") from None


def _strings(fields: _Fields, number: int, what: str, where: str) -> tuple[str, ...]:
    out = []
    for index, value in enumerate(_typed(fields, number, _BYTES, what, where)):
        try:
            out.append(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            raise WireError(f"{where}: {what}[{index}] is not valid UTF-8") from None
    return tuple(out)


def _int64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def _int64s(fields: _Fields, number: int, what: str, where: str) -> tuple[int, ...]:
    """A ``repeated int64``: packed (one length-delimited run, proto3's default) or one varint per value."""
    out: list[int] = []
    for wire, value in fields.values.get(number, ()):
        if wire == _VARINT:
            out.append(_int64(value))
        elif wire == _BYTES:
            at = 0
            while at < len(value):
                number_read, at = _read_varint(value, at, f"{where}: {what}")
                out.append(_int64(number_read))
        else:
            raise WireError(f"{where}: {what} (field {number}) has wire type {wire}, expected a varint")
    return tuple(out)


def _uint64(fields: _Fields, number: int, what: str, where: str) -> int:
    values = _typed(fields, number, _VARINT, what, where)
    return values[-1] if values else 0


_M = TypeVar("_M")


def _messages(
    fields: _Fields, number: int, what: str, where: str, decode: Callable[[bytes, str], _M]
) -> tuple[_M, ...]:
    return tuple(
        decode(bytes(value), f"{where}.{what}[{index}]")
        for index, value in enumerate(_typed(fields, number, _BYTES, what, where))
    )


def _message(fields: _Fields, number: int, what: str, where: str) -> bytes | None:
    """A singular message field: its occurrences merge, which for the wire is their concatenation."""
    values = _typed(fields, number, _BYTES, what, where)
    return b"".join(bytes(value) for value in values) if values else None


def _topology(data: bytes | None, where: str) -> tuple[int, ...] | None:
    if data is None:
        return None
    nodes = _fields(data, where)
    ids = []
    for index, node in enumerate(_typed(nodes, 1, _BYTES, "nodes", where)):
        numa = _fields(bytes(node), f"{where}.nodes[{index}]")
        values = _typed(numa, 1, _VARINT, "ID", f"{where}.nodes[{index}]")
        ids.append(_int64(values[-1]) if values else 0)
    return tuple(ids)


def _devices(data: bytes, where: str) -> Devices:
    fields = _fields(data, where)
    return Devices(
        resource_name=_string(fields, 1, "resource_name", where),
        device_ids=_strings(fields, 2, "device_ids", where),
        numa_nodes=_topology(_message(fields, 3, "topology", where), f"{where}.topology"),
    )


def _memory(data: bytes, where: str) -> Memory:
    fields = _fields(data, where)
    return Memory(
        memory_type=_string(fields, 1, "memory_type", where),
        size=_uint64(fields, 2, "size", where),
        numa_nodes=_topology(_message(fields, 3, "topology", where), f"{where}.topology"),
    )


def _container(data: bytes, where: str) -> Container:
    fields = _fields(data, where)
    return Container(
        name=_string(fields, 1, "name", where),
        devices=_messages(fields, 2, "devices", where, _devices),
        cpu_ids=_int64s(fields, 3, "cpu_ids", where),
        memory=_messages(fields, 4, "memory", where, _memory),
    )


def _pod(data: bytes, where: str) -> Pod:
    fields = _fields(data, where)
    return Pod(
        name=_string(fields, 1, "name", where),
        namespace=_string(fields, 2, "namespace", where),
        containers=_messages(fields, 3, "containers", where, _container),
    )


def pod_messages(data: bytes) -> tuple[bytes, ...]:
    """``ListPodResourcesResponse`` cut into its pods' ``PodResources`` messages, undecoded (``decode_pod``): a
    reader that decoded one before (the same bytes) may keep what it made of it."""
    return tuple(bytes(value) for value in _typed(_fields(data, "List"), 1, _BYTES, "pod_resources", "List"))


def decode_pod(data: bytes, where: str = "PodResources") -> Pod:
    """One ``PodResources`` message."""
    return _pod(data, where)


def decode_get_response(data: bytes) -> Pod | None:
    """``GetPodResourcesResponse``: its pod (None when the answer has none)."""
    body = _message(_fields(data, "Get"), 1, "pod_resources", "Get")
    return None if body is None else _pod(body, "Get.pod_resources")


def decode_allocatable_response(data: bytes) -> Allocatable:
    """``AllocatableResourcesResponse``."""
    fields = _fields(data, "GetAllocatableResources")
    where = "GetAllocatableResources"
    return Allocatable(
        devices=_messages(fields, 1, "devices", where, _devices),
        cpu_ids=_int64s(fields, 2, "cpu_ids", where),
        memory=_messages(fields, 3, "memory", where, _memory),
    )


def _undecoded(data: bytes) -> bytes:
    """grpcio's response deserializer: the bytes as they came (decoded by the caller, where a WireError is the
    answer's fault and not the transport's)."""
    return data


# --------------------------------------------------------------------------------------------------- calls
class Unreachable(Exception):
    """The kubelet did not answer: no socket, refused, timed out. The message is one line; ``code`` is the gRPC
    status (None when there was none)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class Unsupported(Exception):
    """The kubelet answered that it does not serve this call (an older kubelet, or a feature gate off)."""


# What grpcio says of a kubelet that does not answer, in a few words (its own details hold addresses and errnos), by
# the name of its status code.
_STATUS_WORDS = {
    "UNAVAILABLE": "the kubelet's socket refused the connection",
    "DEADLINE_EXCEEDED": f"no answer within {DEADLINE_SECONDS:g} s",
    "RESOURCE_EXHAUSTED": f"an answer larger than {MAX_MESSAGE_BYTES} bytes",
    "PERMISSION_DENIED": "permission denied",
    "UNAUTHENTICATED": "permission denied",
}


class Client:
    """One connection to the kubelet's pod-resources socket (a channel per reading: ``with Client(...)``)."""

    def __init__(self, target: str, deadline: float = DEADLINE_SECONDS) -> None:
        import grpc  # here, not at the top: see the module docstring

        self._deadline = deadline
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", 4096),
                ("grpc.enable_retries", 0),
                # The socket's peer is the kubelet, whatever the unix: target's authority would make of it.
                ("grpc.default_authority", "localhost"),
            ],
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self._channel.close()

    def _call(self, method: str, request: bytes, what: str) -> bytes:
        import grpc  # imported by __init__ already: a lookup in sys.modules

        call = self._channel.unary_unary(method, request_serializer=None, response_deserializer=_undecoded)
        try:
            answer: bytes = call(request, timeout=self._deadline, wait_for_ready=False)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise Unsupported(f"the kubelet does not serve {what}") from None
            name = code.name if code is not None else "UNKNOWN"
            words = _STATUS_WORDS.get(name) if code is not None else None
            raise Unreachable(f"{what}: {words or f'gRPC status {name}'}", code) from None
        return answer

    def list(self) -> bytes:
        """``List``'s answer, undecoded (``pod_messages``)."""
        return self._call(LIST, encode_empty(), "List")

    def allocatable(self) -> bytes:
        """``GetAllocatableResources``' answer, undecoded (``decode_allocatable_response``)."""
        return self._call(GET_ALLOCATABLE, encode_empty(), "GetAllocatableResources")

    def get(self, pod_name: str, pod_namespace: str) -> Pod | None:
        """The kubelet's Get (feature gate KubeletPodResourcesGet): ``Unsupported`` where it answers
        Unimplemented (before 1.27). A kubelet with the gate off answers an error of its own: also
        ``Unsupported``, as nothing else about the call can fail once List answered."""
        try:
            answer = self._call(GET, encode_get_request(pod_name, pod_namespace), "Get")
        except Unreachable as error:
            if error.code is not None and error.code.name == "UNKNOWN":
                raise Unsupported("the kubelet refuses Get (feature gate KubeletPodResourcesGet off)") from None
            raise
        return decode_get_response(answer)
