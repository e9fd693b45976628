"""Loading agy's real schema (a `FileDescriptorSet` file, AGY-FORMATS §5) into a pool of its own,
for the conformance tests and benchmarks that hold the simulator's descriptors against it.
"""

from __future__ import annotations

import os

from google.protobuf import any_pb2
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import timestamp_pb2

__all__ = ["load_descriptor_set"]


def load_descriptor_set(path: str | os.PathLike[str]) -> descriptor_pool.DescriptorPool:
    """A pool holding a `FileDescriptorSet` file, such as agy's real schema (AGY-FORMATS §5).

    The well-known types the set imports come from the `protobuf` package first (unless the set
    carries its own copy), then every file of the set in order. For conformance tests and
    benchmarks; the simulator itself never reads the real schema.
    """
    from google.protobuf import duration_pb2
    from google.protobuf import empty_pb2
    from google.protobuf import field_mask_pb2
    from google.protobuf import struct_pb2
    from google.protobuf import wrappers_pb2

    with open(path, "rb") as handle:
        fds = descriptor_pb2.FileDescriptorSet.FromString(handle.read())
    names = {f.name for f in fds.file}
    pool = descriptor_pool.DescriptorPool()
    for module in (
        descriptor_pb2,
        any_pb2,
        timestamp_pb2,
        duration_pb2,
        struct_pb2,
        empty_pb2,
        wrappers_pb2,
        field_mask_pb2,
    ):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        if proto.name not in names:
            pool.Add(proto)
    for proto in fds.file:
        pool.Add(proto)
    return pool
