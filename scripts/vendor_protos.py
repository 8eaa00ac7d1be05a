"""Writes the protos runstore serves but does not own into protos/, so grpcurl
works without reflection (docs/clients/grpcurl.md#without-reflection):

* ``google/rpc/{status,error_details,code}.proto``: copied from the installed
  googleapis-common-protos (the ErrorInfo in every runstore error);
* ``grpc/health/v1/health.proto``: printed from the descriptor of the installed
  grpcio-health-checking (the package ships the compiled module only).

``make vendor-protos`` runs it; ``--check`` says whether protos/ is up to date
(tests/server/test_grpcurl.py). ``make proto`` never compiles these: the
Python packages above already provide their modules.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.rpc import status_pb2
from grpc_health.v1 import health_pb2

ROOT = Path(__file__).resolve().parents[1] / "protos"
GOOGLE_RPC = ("status.proto", "error_details.proto", "code.proto")
HEALTH = Path("grpc/health/v1/health.proto")

_SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64: "fixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32: "fixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED32: "sfixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED64: "sfixed64",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT32: "sint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT64: "sint64",
}


def _type_name(field: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    if field.type in _SCALARS:
        return _SCALARS[field.type]
    name = field.type_name.lstrip(".")
    return name.removeprefix(package + ".")


def _message(message: descriptor_pb2.DescriptorProto, package: str, indent: str = "") -> list[str]:
    maps = {nested.name: nested for nested in message.nested_type if nested.options.map_entry}
    lines = [f"{indent}message {message.name} {{"]
    for enum in message.enum_type:
        lines.append(f"{indent}  enum {enum.name} {{")
        lines += [f"{indent}    {value.name} = {value.number};" for value in enum.value]
        lines.append(f"{indent}  }}")
    for nested in message.nested_type:
        if not nested.options.map_entry:
            lines += _message(nested, package, indent + "  ")
    for field in message.field:
        entry = maps.get(field.type_name.rsplit(".", 1)[-1]) if field.type_name else None
        if entry is not None:
            key, value = entry.field
            kind = f"map<{_type_name(key, package)}, {_type_name(value, package)}>"
        else:
            repeated = field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
            kind = ("repeated " if repeated else "") + _type_name(field, package)
        lines.append(f"{indent}  {kind} {field.name} = {field.number};")
    lines.append(f"{indent}}}")
    return lines


def _option_lines(options: descriptor_pb2.FileOptions) -> list[str]:
    lines = []
    for spec, value in options.ListFields():
        shown = ("true" if value else "false") if isinstance(value, bool) else f'"{value}"'
        lines.append(f"option {spec.name} = {shown};")
    return lines


def health_proto() -> str:
    """grpc.health.v1 as a .proto file, from the installed package's descriptor."""
    file = descriptor_pb2.FileDescriptorProto()
    health_pb2.DESCRIPTOR.CopyToProto(file)
    version = metadata.version("grpcio-health-checking")
    lines = [
        "// Copyright 2015 The gRPC Authors. Licensed under the Apache License, Version 2.0.",
        "//",
        "// The gRPC health checking protocol (grpc.health.v1), printed by",
        f"// scripts/vendor_protos.py from the descriptor of grpcio-health-checking {version}.",
        "// Do not edit: run `make vendor-protos`.",
        "",
        'syntax = "proto3";',
        "",
        f"package {file.package};",
        "",
        *_option_lines(file.options),
        "",
    ]
    for message in file.message_type:
        lines += [*_message(message, file.package), ""]
    for service in file.service:
        lines.append(f"service {service.name} {{")
        for method in service.method:
            request = ("stream " if method.client_streaming else "") + method.input_type.lstrip(
                "."
            ).removeprefix(file.package + ".")
            response = ("stream " if method.server_streaming else "") + method.output_type.lstrip(
                "."
            ).removeprefix(file.package + ".")
            lines.append(f"  rpc {method.name}({request}) returns ({response});")
        lines.append("}")
    return "\n".join(lines) + "\n"


def wanted() -> dict[Path, str]:
    """Every vendored file (relative to protos/) and the text it must have."""
    source = Path(status_pb2.__file__).parent
    files = {
        Path("google/rpc") / name: (source / name).read_text(encoding="utf-8")
        for name in GOOGLE_RPC
    }
    files[HEALTH] = health_proto()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether protos/ is current")
    args = parser.parse_args(argv)
    stale = []
    for relative, text in wanted().items():
        path = ROOT / relative
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if args.check:
            stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print(f"stale (run `make vendor-protos`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
