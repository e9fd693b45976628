"""The simulator's own protobuf descriptors for agy's `gemini_coder.Step` and what it carries.

Owns the message classes agy-sim writes and the language server renders, built at import time.

Names, numbers, types and labels follow the real schema (AGY-FORMATS §3, schema-summary.txt); we
declare only the fields and enum values the simulator uses. Everything is built here as
`FileDescriptorProto` objects in a private `DescriptorPool` (no protoc, no generated code), so the
real `.fds` never has to be present at runtime; the conformance tests hold these against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from agy_provider.sim.real_schema import load_descriptor_set

__all__ = [
    "ANY_TYPE_URL_STEP",
    "API_PROVIDER_GOOGLE_GEMINI",
    "POOL",
    "STEP_SOURCE",
    "STEP_STATUS",
    "STEP_TYPE",
    "STOP_REASON",
    "TRAJECTORY_SOURCE_CLI",
    "TRAJECTORY_SOURCE_SUBAGENT",
    "TRAJECTORY_TYPE_CASCADE",
    "AnyMessage",
    "CascadeUserInteraction",
    "CortexErrorDetails",
    "CortexStepGeneratorMetadata",
    "CortexStepMetadata",
    "CortexTrajectoryMetadata",
    "ModelUsageStats",
    "Step",
    "Timestamp",
    "declared_fields",
    "load_descriptor_set",
    "message_class",
    "model_enum_number",
]

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
}

# Each field: (number, name, type, flags). `type` is a scalar name, or "msg:.full.Name" /
# "enum:.full.Name". flags: "rep" (repeated), "opt" (proto3 `optional`), "oneof:<name>".
FieldSpec = tuple[int, str, str, str]

CORTEX = ".exa.cortex_pb."
COMMON = ".exa.codeium_common_pb."
TS = "msg:.google.protobuf.Timestamp"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _field(spec: FieldSpec, oneofs: list[str]) -> descriptor_pb2.FieldDescriptorProto:
    number, name, kind, flags = spec
    field = _F(name=name, number=number, json_name=_camel(name))
    field.label = _REP if "rep" in flags.split() else _OPT
    if kind.startswith("msg:"):
        field.type, field.type_name = _F.TYPE_MESSAGE, kind[4:]
    elif kind.startswith("enum:"):
        field.type, field.type_name = _F.TYPE_ENUM, kind[5:]
    else:
        field.type = _SCALARS[kind]
    for flag in flags.split():
        if flag == "opt":
            # proto3 `optional`: a synthetic oneof `_<name>`, declared after the real ones.
            field.proto3_optional = True
            oneofs.append("_" + name)
            field.oneof_index = len(oneofs) - 1
        elif flag.startswith("oneof:"):
            group = flag[6:]
            if group not in oneofs:
                oneofs.insert(0, group)
            field.oneof_index = oneofs.index(group)
    return field


def _message(
    name: str,
    fields: Sequence[FieldSpec],
    *,
    maps: Iterable[tuple[str, str]] = (),
    enums: Iterable[descriptor_pb2.EnumDescriptorProto] = (),
) -> descriptor_pb2.DescriptorProto:
    """A message; `maps` are (EntryName, value type) nested map entries with string keys."""
    message = descriptor_pb2.DescriptorProto(name=name)
    real_oneofs = [
        flag[6:] for *_, flags in fields for flag in flags.split() if flag.startswith("oneof:")
    ]
    oneofs: list[str] = list(dict.fromkeys(real_oneofs))
    message.field.extend(_field(spec, oneofs) for spec in fields)
    for group in oneofs:
        message.oneof_decl.add(name=group)
    for entry_name, value_kind in maps:
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.extend(
            [_field((1, "key", "string", ""), []), _field((2, "value", value_kind, ""), [])]
        )
    message.enum_type.extend(enums)
    return message


def _enum(name: str, values: Iterable[tuple[str, int]]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for value_name, number in values:
        enum.value.add(name=value_name, number=number)
    return enum


# --- enum values we use (real numbers) ------------------------------------------------------

STEP_TYPE: dict[str, int] = {
    "CORTEX_STEP_TYPE_UNSPECIFIED": 0,
    "CORTEX_STEP_TYPE_FINISH": 2,
    "CORTEX_STEP_TYPE_VIEW_FILE": 8,
    "CORTEX_STEP_TYPE_LIST_DIRECTORY": 9,
    "CORTEX_STEP_TYPE_USER_INPUT": 14,
    "CORTEX_STEP_TYPE_PLANNER_RESPONSE": 15,
    "CORTEX_STEP_TYPE_ERROR_MESSAGE": 17,
    "CORTEX_STEP_TYPE_RUN_COMMAND": 21,
    "CORTEX_STEP_TYPE_CHECKPOINT": 23,
    "CORTEX_STEP_TYPE_CONVERSATION_HISTORY": 98,
    "CORTEX_STEP_TYPE_SYSTEM_MESSAGE": 101,
    "CORTEX_STEP_TYPE_INVOKE_SUBAGENT": 127,
    "CORTEX_STEP_TYPE_GENERIC": 132,
    "CORTEX_STEP_TYPE_ASK_QUESTION": 138,
    "CORTEX_STEP_TYPE_MCP_TOOL": 38,
}
STEP_STATUS: dict[str, int] = {
    "CORTEX_STEP_STATUS_UNSPECIFIED": 0,
    "CORTEX_STEP_STATUS_PENDING": 1,
    "CORTEX_STEP_STATUS_RUNNING": 2,
    "CORTEX_STEP_STATUS_DONE": 3,
    "CORTEX_STEP_STATUS_CANCELED": 6,
    "CORTEX_STEP_STATUS_ERROR": 7,
    "CORTEX_STEP_STATUS_GENERATING": 8,
    "CORTEX_STEP_STATUS_WAITING": 9,
}
STEP_SOURCE: dict[str, int] = {
    "CORTEX_STEP_SOURCE_UNSPECIFIED": 0,
    "CORTEX_STEP_SOURCE_MODEL": 2,
    "CORTEX_STEP_SOURCE_USER_EXPLICIT": 4,
    "CORTEX_STEP_SOURCE_SYSTEM": 5,
}
STOP_REASON: dict[str, int] = {
    "STOP_REASON_UNSPECIFIED": 0,
    "STOP_REASON_STOP_PATTERN": 2,
    "STOP_REASON_MAX_TOKENS": 3,
    "STOP_REASON_FUNCTION_CALL": 10,
    "STOP_REASON_ERROR": 13,
    "STOP_REASON_CLIENT_CANCELED": 16,
}
API_PROVIDER_GOOGLE_GEMINI = 24
_API_PROVIDERS = {
    "API_PROVIDER_UNSPECIFIED": 0,
    "API_PROVIDER_GOOGLE_GEMINI": 24,
    "API_PROVIDER_ANTHROPIC_VERTEX": 26,
    "API_PROVIDER_OPENAI_VERTEX": 31,
}
TRAJECTORY_TYPE_CASCADE = 4
TRAJECTORY_SOURCE_CLI = 17
TRAJECTORY_SOURCE_SUBAGENT = 16

# agy's Model enum names models only by placeholder (MODEL_PLACEHOLDER_M<n> = 1000 + n); the slug
# and display name live in gen_metadata. These are the placeholders the simulator's catalogs use.
_MODEL_PLACEHOLDERS = (20, 36, 50, 71, 110, 120, 130, 140, 150, 160, 170, 180, 190, 299)


def model_enum_number(placeholder: int) -> int:
    """The Model enum number of `MODEL_PLACEHOLDER_M<placeholder>`."""
    return 1000 + placeholder


ANY_TYPE_URL_STEP = "type.googleapis.com/gemini_coder.Step"

# --- files ----------------------------------------------------------------------------------


def _common_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="agy_provider/sim/codeium_common.proto",
        package="exa.codeium_common_pb",
        syntax="proto3",
    )
    models = [("MODEL_UNSPECIFIED", 0)] + [
        (f"MODEL_PLACEHOLDER_M{n}", model_enum_number(n)) for n in _MODEL_PLACEHOLDERS
    ]
    f.enum_type.extend(
        [
            _enum("Model", models),
            _enum("APIProvider", _API_PROVIDERS.items()),
            _enum("StopReason", STOP_REASON.items()),
        ]
    )
    f.message_type.extend(
        [
            _message(
                "ChatToolCall",
                [
                    (1, "id", "string", ""),
                    (2, "name", "string", ""),
                    (3, "arguments_json", "string", ""),
                    (7, "thinking_signature", "bytes", ""),
                    (9, "original_name", "string", ""),
                ],
            ),
            _message(
                "ModelUsageStats",
                [
                    (1, "model", f"enum:{COMMON}Model", ""),
                    (2, "input_tokens", "uint64", ""),
                    (3, "output_tokens", "uint64", ""),
                    (4, "cache_write_tokens", "uint64", ""),
                    (5, "cache_read_tokens", "uint64", ""),
                    (6, "api_provider", f"enum:{COMMON}APIProvider", ""),
                    (7, "message_id", "string", ""),
                    (
                        8,
                        "response_header",
                        f"msg:{COMMON}ModelUsageStats.ResponseHeaderEntry",
                        "rep",
                    ),
                    (9, "thinking_output_tokens", "uint64", ""),
                    (10, "response_output_tokens", "uint64", ""),
                    (11, "response_id", "string", ""),
                ],
                maps=[("ResponseHeaderEntry", "string")],
            ),
            _message("ModelOrAlias", [(1, "model", f"enum:{COMMON}Model", "oneof:choice")]),
            _message("TextOrScopeItem", [(1, "text", "string", "oneof:chunk")]),
        ]
    )
    return f


def _cortex_messages() -> list[descriptor_pb2.DescriptorProto]:
    return [
        *_step_metadata_messages(),
        *_input_and_command_step_messages(),
        *_file_and_other_step_messages(),
        *_interaction_messages(),
        *_trajectory_messages(),
    ]


def _step_metadata_messages() -> list[descriptor_pb2.DescriptorProto]:
    """A step's metadata: its timestamps, status transitions, model usage and error details."""
    status = f"enum:{CORTEX}CortexStepStatus"
    usage = f"msg:{COMMON}ModelUsageStats"
    return [
        _message(
            "SourceTrajectoryStepInfo",
            [
                (1, "trajectory_id", "string", ""),
                (2, "step_index", "uint32", ""),
                (3, "metadata_index", "uint32", ""),
                (4, "cascade_id", "string", ""),
            ],
        ),
        _message("StatusTransition", [(1, "updated_status", status, ""), (2, "timestamp", TS, "")]),
        _message(
            "CortexStepInternalMetadata",
            [(1, "status_transitions", f"msg:{CORTEX}StatusTransition", "rep")],
        ),
        _message(
            "CortexStepMetadata",
            [
                (1, "created_at", TS, ""),
                (3, "source", f"enum:{CORTEX}CortexStepSource", ""),
                (4, "tool_call", f"msg:{COMMON}ChatToolCall", ""),
                (5, "arguments_order", "string", "rep"),
                (6, "viewable_at", TS, ""),
                (7, "finished_generating_at", TS, ""),
                (8, "completed_at", TS, ""),
                (9, "model_usage", usage, ""),
                (11, "generator_model", f"enum:{COMMON}Model", ""),
                (12, "execution_id", "string", ""),
                (13, "requested_model", f"msg:{COMMON}ModelOrAlias", ""),
                (20, "source_trajectory_step_info", f"msg:{CORTEX}SourceTrajectoryStepInfo", ""),
                (21, "step_generation_version", "uint32", ""),
                (22, "last_completed_chunk_at", TS, ""),
                (26, "internal_metadata", f"msg:{CORTEX}CortexStepInternalMetadata", ""),
                (30, "tool_summary", "string", ""),
                (31, "tool_action", "string", ""),
                (32, "started_at", TS, ""),
            ],
        ),
        _message(
            "CortexErrorDetails",
            [
                (1, "user_error_message", "string", ""),
                (2, "short_error", "string", ""),
                (3, "full_error", "string", ""),
                (7, "error_code", "uint32", ""),
                (9, "model_error_message", "string", ""),
            ],
        ),
    ]


def _input_and_command_step_messages() -> list[descriptor_pb2.DescriptorProto]:
    """The bodies of user input, planner response, generic and run-command steps."""
    return [
        _message(
            "CortexStepUserInput",
            [
                (1, "query", "string", ""),
                (2, "user_response", "string", ""),
                (3, "items", f"msg:{COMMON}TextOrScopeItem", "rep"),
            ],
        ),
        _message(
            "CortexStepPlannerResponse",
            [
                (1, "response", "string", ""),
                (3, "thinking", "string", ""),
                (6, "message_id", "string", ""),
                (7, "tool_calls", f"msg:{COMMON}ChatToolCall", "rep"),
                (8, "modified_response", "string", ""),
                (12, "stop_reason", f"enum:{COMMON}StopReason", ""),
            ],
        ),
        _message(
            "GenericStepResult",
            [
                (1, "result", "string", ""),
                (6, "payload", "msg:.google.protobuf.Any", ""),
                (7, "full_output_uri", "string", ""),
            ],
        ),
        _message(
            "CortexStepGeneric",
            [
                (1, "args", f"msg:{CORTEX}CortexStepGeneric.ArgsEntry", "rep"),
                (2, "result", f"msg:{CORTEX}GenericStepResult", ""),
            ],
            maps=[("ArgsEntry", "string")],
        ),
        _message(
            "RunCommandOutput",
            [(1, "full", "string", ""), (2, "truncated", "string", "")],
        ),
        _message(
            "CortexStepRunCommand",
            [
                (2, "cwd", "string", ""),
                (6, "exit_code", "int32", "opt"),
                (11, "blocking", "bool", ""),
                (12, "wait_ms_before_async", "uint64", ""),
                (21, "combined_output", f"msg:{CORTEX}RunCommandOutput", ""),
                (23, "command_line", "string", ""),
                (25, "proposed_command_line", "string", ""),
                (31, "shell_name", "string", ""),
            ],
        ),
    ]


def _file_and_other_step_messages() -> list[descriptor_pb2.DescriptorProto]:
    """The bodies of the file, error, checkpoint, system, question and MCP tool steps."""
    return [
        _message(
            "CortexStepViewFile",
            [
                (1, "absolute_path_uri", "string", ""),
                (2, "start_line", "uint32", ""),
                (3, "end_line", "uint32", ""),
                (4, "content", "string", ""),
                (11, "num_lines", "uint32", ""),
                (12, "num_bytes", "uint32", ""),
            ],
        ),
        _message(
            "ListDirectoryResult",
            [(1, "name", "string", ""), (2, "is_dir", "bool", ""), (4, "size_bytes", "uint64", "")],
        ),
        _message(
            "CortexStepListDirectory",
            [
                (1, "directory_path_uri", "string", ""),
                (3, "results", f"msg:{CORTEX}ListDirectoryResult", "rep"),
            ],
        ),
        _message(
            "CortexStepErrorMessage",
            [
                (3, "error", f"msg:{CORTEX}CortexErrorDetails", ""),
                (4, "should_show_model", "bool", ""),
                (5, "should_show_user", "bool", ""),
            ],
        ),
        _message(
            "CortexStepCheckpoint",
            [
                (4, "user_intent", "string", ""),
                (9, "intent_only", "bool", ""),
                (12, "included_step_index_end", "uint32", ""),
                (19, "user_requests", "string", "rep"),
                (24, "render_latest_checkpoint", "bool", ""),
                (25, "render_user_message_step_index", "int64", "opt"),
            ],
        ),
        _message(
            "CortexStepSystemMessage",
            [(1, "message", "string", ""), (3, "event_type", "string", "")],
        ),
        _message("CortexStepConversationHistory", [(1, "content", "string", "")]),
        # FINISH's body is not in the field guide; agy-sim writes it empty (1.3.x, unverified).
        _message("CortexStepFinish", []),
        _message("AskQuestionOption", [(1, "id", "string", ""), (2, "text", "string", "")]),
        _message(
            "AskQuestionEntry",
            [
                (1, "question", "string", ""),
                (2, "options", f"msg:{CORTEX}AskQuestionOption", "rep"),
                (3, "is_multi_select", "bool", ""),
                (4, "selected_option_ids", "string", "rep"),
                (5, "write_in_response", "string", ""),
            ],
        ),
        _message(
            "CortexStepAskQuestion", [(1, "questions", f"msg:{CORTEX}AskQuestionEntry", "rep")]
        ),
        _message("McpServerInfo", [(1, "name", "string", ""), (2, "version", "string", "")]),
        _message(
            "CortexStepMcpTool",
            [
                (1, "server_name", "string", ""),
                (2, "tool_call", f"msg:{COMMON}ChatToolCall", ""),
                (3, "result_string", "string", "oneof:result"),
                (4, "server_info", f"msg:{CORTEX}McpServerInfo", ""),
                (7, "user_rejected", "bool", ""),
            ],
        ),
    ]


def _interaction_messages() -> list[descriptor_pb2.DescriptorProto]:
    """The permission and question interactions a WAITING step asks for, and their answers."""
    return [
        _message("PermissionResource", [(1, "action", "string", ""), (2, "target", "string", "")]),
        _message(
            "PermissionInteractionSpec",
            [
                (1, "resource", f"msg:{CORTEX}PermissionResource", ""),
                (2, "suggested_persist_pattern", "string", ""),
                (
                    3,
                    "persist_suggestion_type",
                    f"enum:{CORTEX}PermissionInteractionSpec.PersistSuggestionType",
                    "",
                ),
                (5, "action_description", "string", "opt"),
            ],
            enums=[
                _enum(
                    "PersistSuggestionType",
                    [
                        ("PERSIST_SUGGESTION_TYPE_UNSPECIFIED", 0),
                        ("PERSIST_SUGGESTION_TYPE_SUGGESTED", 1),
                    ],
                )
            ],
        ),
        _message(
            "AskQuestionInteractionSpec", [(1, "questions", f"msg:{CORTEX}AskQuestionEntry", "rep")]
        ),
        _message(
            "RequestedInteraction",
            [
                (21, "permission", f"msg:{CORTEX}PermissionInteractionSpec", "oneof:interaction"),
                (
                    22,
                    "ask_question",
                    f"msg:{CORTEX}AskQuestionInteractionSpec",
                    "oneof:interaction",
                ),
            ],
        ),
        _message("PermissionInteraction", [(1, "allow", "bool", "")]),
        _message(
            "AskQuestionInteraction", [(1, "responses", f"msg:{CORTEX}AskQuestionEntry", "rep")]
        ),
        _message(
            "CascadeUserInteraction",
            [
                (1, "trajectory_id", "string", ""),
                (2, "step_index", "uint32", ""),
                (21, "permission", f"msg:{CORTEX}PermissionInteraction", "oneof:interaction"),
                (22, "ask_question", f"msg:{CORTEX}AskQuestionInteraction", "oneof:interaction"),
                (24, "timed_out", "bool", ""),
            ],
        ),
        _message(
            "CompletedInteraction",
            [
                (1, "request", f"msg:{CORTEX}RequestedInteraction", ""),
                (2, "response", f"msg:{CORTEX}CascadeUserInteraction", ""),
            ],
        ),
    ]


def _trajectory_messages() -> list[descriptor_pb2.DescriptorProto]:
    """Trajectory-level records: permission grants, generator metadata, trajectory metadata."""
    usage = f"msg:{COMMON}ModelUsageStats"
    return [
        _message(
            "PermissionGrant",
            [(1, "resource", f"msg:{CORTEX}PermissionResource", ""), (2, "allow", "bool", "")],
        ),
        _message(
            "TrajectoryPermissions",
            [(2, "permission_grants", f"msg:{CORTEX}PermissionGrant", "rep")],
        ),
        _message("RetryInfo", [(2, "usage", usage, "")]),
        _message(
            "ChatModelMetadata",
            [
                (3, "model", f"enum:{COMMON}Model", ""),
                (4, "usage", usage, ""),
                (17, "retry_infos", f"msg:{CORTEX}RetryInfo", "rep"),
                (19, "response_model", "string", ""),
                (21, "model_display_name", "string", ""),
            ],
        ),
        _message(
            "CortexStepGeneratorMetadata",
            [
                (1, "chat_model", f"msg:{CORTEX}ChatModelMetadata", "oneof:metadata"),
                (2, "step_indices", "uint32", "rep"),
                (4, "execution_id", "string", ""),
            ],
        ),
        _message(
            "CortexTrajectoryMetadata",
            [
                (2, "created_at", TS, ""),
                (5, "parent_conversation_id", "string", ""),
                (6, "root_conversation_id", "string", ""),
                (7, "workspace_uris", "string", "rep"),
            ],
        ),
    ]


def _cortex_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="agy_provider/sim/cortex.proto",
        package="exa.cortex_pb",
        syntax="proto3",
        dependency=[
            "google/protobuf/any.proto",
            "google/protobuf/timestamp.proto",
            "agy_provider/sim/codeium_common.proto",
        ],
    )
    f.enum_type.extend(
        [
            _enum("CortexStepType", STEP_TYPE.items()),
            _enum("CortexStepStatus", STEP_STATUS.items()),
            _enum("CortexStepSource", STEP_SOURCE.items()),
        ]
    )
    f.message_type.extend(_cortex_messages())
    return f


def _trajectory_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="agy_provider/sim/trajectory.proto",
        package="gemini_coder",
        syntax="proto3",
        dependency=["agy_provider/sim/cortex.proto"],
    )
    step = "oneof:step"
    f.message_type.append(
        _message(
            "Step",
            [
                (1, "type", f"enum:{CORTEX}CortexStepType", ""),
                (4, "status", f"enum:{CORTEX}CortexStepStatus", ""),
                (5, "metadata", f"msg:{CORTEX}CortexStepMetadata", ""),
                (12, "finish", f"msg:{CORTEX}CortexStepFinish", step),
                (14, "view_file", f"msg:{CORTEX}CortexStepViewFile", step),
                (15, "list_directory", f"msg:{CORTEX}CortexStepListDirectory", step),
                (19, "user_input", f"msg:{CORTEX}CortexStepUserInput", step),
                (20, "planner_response", f"msg:{CORTEX}CortexStepPlannerResponse", step),
                (24, "error_message", f"msg:{CORTEX}CortexStepErrorMessage", step),
                (28, "run_command", f"msg:{CORTEX}CortexStepRunCommand", step),
                (30, "checkpoint", f"msg:{CORTEX}CortexStepCheckpoint", step),
                (31, "error", f"msg:{CORTEX}CortexErrorDetails", ""),
                (47, "mcp_tool", f"msg:{CORTEX}CortexStepMcpTool", step),
                (56, "requested_interaction", f"msg:{CORTEX}RequestedInteraction", ""),
                (111, "conversation_history", f"msg:{CORTEX}CortexStepConversationHistory", step),
                (114, "system_message", f"msg:{CORTEX}CortexStepSystemMessage", step),
                (133, "permissions", f"msg:{CORTEX}TrajectoryPermissions", ""),
                (140, "generic", f"msg:{CORTEX}CortexStepGeneric", step),
                (147, "completed_interactions", f"msg:{CORTEX}CompletedInteraction", "rep"),
                (154, "ask_question", f"msg:{CORTEX}CortexStepAskQuestion", step),
            ],
        )
    )
    return f


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in (any_pb2, timestamp_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    for proto in (_common_file(), _cortex_file(), _trajectory_file()):
        pool.Add(proto)
    return pool


POOL = _build_pool()


def message_class(full_name: str) -> Any:
    """The message class for `full_name` (e.g. `exa.cortex_pb.CortexStepMetadata`) in our pool."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def declared_fields() -> dict[str, list[descriptor_pb2.FieldDescriptorProto]]:
    """Every message we declare (full name) with its field protos; for conformance tests."""
    out: dict[str, list[descriptor_pb2.FieldDescriptorProto]] = {}
    for proto in (_common_file(), _cortex_file(), _trajectory_file()):

        def walk(prefix: str, messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
            for message in messages:
                name = f"{prefix}.{message.name}"
                out[name] = list(message.field)
                walk(name, message.nested_type)

        walk(proto.package, proto.message_type)
    return out


Step: Any = message_class("gemini_coder.Step")
CortexStepMetadata: Any = message_class("exa.cortex_pb.CortexStepMetadata")
CortexErrorDetails: Any = message_class("exa.cortex_pb.CortexErrorDetails")
CortexStepGeneratorMetadata: Any = message_class("exa.cortex_pb.CortexStepGeneratorMetadata")
CortexTrajectoryMetadata: Any = message_class("exa.cortex_pb.CortexTrajectoryMetadata")
CascadeUserInteraction: Any = message_class("exa.cortex_pb.CascadeUserInteraction")
ModelUsageStats: Any = message_class("exa.codeium_common_pb.ModelUsageStats")
AnyMessage: Any = message_class("google.protobuf.Any")
Timestamp: Any = message_class("google.protobuf.Timestamp")
