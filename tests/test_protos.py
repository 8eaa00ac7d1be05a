"""The protos as other languages and the generated Python package see them."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from google.protobuf.descriptor import FileDescriptor

import runstore.v1
from runstore.contract import errors
from runstore.v1 import error_reason_pb2, types_pb2

PROTO_DIR = Path(__file__).resolve().parents[1] / "protos" / "runstore" / "v1"
# The generated module of every .proto file: importing it fails if one is missing.
FILES: list[FileDescriptor] = [
    importlib.import_module(f"runstore.v1.{path.stem}_pb2").DESCRIPTOR
    for path in sorted(PROTO_DIR.glob("*.proto"))
]

REASON_VALUES = set(error_reason_pb2.ErrorReason.keys())


def test_every_registered_reason_is_an_error_reason_value() -> None:
    """A reason added to runstore.contract.errors needs its ErrorReason value."""
    missing = sorted(set(errors.error_classes()) - REASON_VALUES)
    assert missing == [], f"add these to protos/runstore/v1/error_reason.proto: {missing}"


def test_the_zero_value_is_no_reason() -> None:
    assert error_reason_pb2.ErrorReason.Name(0) == "ERROR_REASON_UNSPECIFIED"
    assert errors.error_class_for("ERROR_REASON_UNSPECIFIED") is None


def _value_comments() -> dict[str, str]:
    """Each ErrorReason value's leading comment, joined into one line."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in (PROTO_DIR / "error_reason.proto").read_text().splitlines():
        line = line.strip()
        if line.startswith("//"):
            pending.append(line.removeprefix("//").strip())
        elif match := re.fullmatch(r"([A-Z_]+) = \d+;", line):
            comments[match.group(1)] = " ".join(pending)
            pending = []
        else:
            pending = []
    return comments


@pytest.mark.parametrize("reason", sorted(errors.error_classes()))
def test_each_value_comment_states_the_code_and_permanence_of_its_class(reason: str) -> None:
    cls = errors.error_classes()[reason]
    comment = _value_comments()[reason]
    if comment.startswith("Never sent by a server"):
        return
    stated = re.match(r"(?P<codes>[^;]+); (?P<permanence>not permanent|permanent)[.;]", comment)
    assert stated is not None, comment
    assert cls.code in re.findall(r"[A-Z_]{4,}", stated["codes"]), comment
    assert stated["permanence"] == ("permanent" if cls.permanent else "not permanent"), comment


@pytest.mark.parametrize("file", FILES, ids=lambda f: f.name)
def test_every_file_declares_the_package_options_of_every_language(file: FileDescriptor) -> None:
    options = file.GetOptions()
    outer = "".join(part.capitalize() for part in Path(file.name).stem.split("_")) + "Proto"
    assert options.go_package == "github.com/runstore/runstore/gen/go/runstore/v1;runstorev1"
    assert options.java_package == "com.runstore.v1"
    assert options.java_multiple_files
    assert options.java_outer_classname == outer
    assert options.csharp_namespace == "Runstore.V1"
    assert options.php_namespace == "Runstore\\V1"
    assert options.ruby_package == "Runstore::V1"
    assert options.objc_class_prefix == "RXX"


def test_the_package_re_exports_every_message_enum_and_service() -> None:
    expected: set[str] = set()
    for file in FILES:
        expected |= set(file.message_types_by_name) | set(file.enum_types_by_name)
        for service in file.services_by_name:
            expected |= {f"{service}Stub", f"{service}Servicer", f"add_{service}Servicer_to_server"}
    assert set(runstore.v1.__all__) == expected
    assert runstore.v1.ErrorReason is error_reason_pb2.ErrorReason
    assert runstore.v1.RunRecord is types_pb2.RunRecord
