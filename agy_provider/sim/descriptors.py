"""The simulator's own protobuf descriptors for agy's `gemini_coder.Step` and what it carries.

Owns the message classes agy-sim writes and the language server renders, built at import time.

Names, numbers, types and labels follow the real schema (AGY-FORMATS §3, schema-summary.txt); we
declare only the fields and enum values the simulator uses. Everything is built here as
`FileDescriptorProto` objects in a private `DescriptorPool` (no protoc, no generated code), so the
real `.fds` never has to be present at runtime; the conformance tests hold these against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any

from google.protobuf import any_pb2
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf import timestamp_pb2

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

# Short package names the schema text below may use in "msg:" and "enum:" types.
_PACKAGES = {
    "COMMON.": ".exa.codeium_common_pb.",
    "CORTEX.": ".exa.cortex_pb.",
    "google.": ".google.protobuf.",
}


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


# --- the messages, as data -------------------------------------------------------------------
# One block per message: `message Name`, then a line per field `number name type [flags]` (as
# FieldSpec), `map EntryName value_type` for a nested string-keyed map entry and
# `enum Name VALUE=number ...` for a nested enum. `#` starts a comment.

_COMMON_MESSAGES = """
message ChatToolCall
  1 id string
  2 name string
  3 arguments_json string
  7 thinking_signature bytes
  9 original_name string

message ModelUsageStats
  1 model enum:COMMON.Model
  2 input_tokens uint64
  3 output_tokens uint64
  4 cache_write_tokens uint64
  5 cache_read_tokens uint64
  6 api_provider enum:COMMON.APIProvider
  7 message_id string
  8 response_header msg:COMMON.ModelUsageStats.ResponseHeaderEntry rep
  9 thinking_output_tokens uint64
  10 response_output_tokens uint64
  11 response_id string
  map ResponseHeaderEntry string

message ModelOrAlias
  1 model enum:COMMON.Model oneof:choice

message TextOrScopeItem
  1 text string oneof:chunk
"""

_CORTEX_MESSAGES = """
# A step's metadata: its timestamps, status transitions, model usage and error details.
message SourceTrajectoryStepInfo
  1 trajectory_id string
  2 step_index uint32
  3 metadata_index uint32
  4 cascade_id string

message StatusTransition
  1 updated_status enum:CORTEX.CortexStepStatus
  2 timestamp msg:google.Timestamp

message CortexStepInternalMetadata
  1 status_transitions msg:CORTEX.StatusTransition rep

message CortexStepMetadata
  1 created_at msg:google.Timestamp
  3 source enum:CORTEX.CortexStepSource
  4 tool_call msg:COMMON.ChatToolCall
  5 arguments_order string rep
  6 viewable_at msg:google.Timestamp
  7 finished_generating_at msg:google.Timestamp
  8 completed_at msg:google.Timestamp
  9 model_usage msg:COMMON.ModelUsageStats
  11 generator_model enum:COMMON.Model
  12 execution_id string
  13 requested_model msg:COMMON.ModelOrAlias
  20 source_trajectory_step_info msg:CORTEX.SourceTrajectoryStepInfo
  21 step_generation_version uint32
  22 last_completed_chunk_at msg:google.Timestamp
  26 internal_metadata msg:CORTEX.CortexStepInternalMetadata
  30 tool_summary string
  31 tool_action string
  32 started_at msg:google.Timestamp

message CortexErrorDetails
  1 user_error_message string
  2 short_error string
  3 full_error string
  7 error_code uint32
  9 model_error_message string

# The bodies of user input, planner response, generic and run-command steps.
message CortexStepUserInput
  1 query string
  2 user_response string
  3 items msg:COMMON.TextOrScopeItem rep

message CortexStepPlannerResponse
  1 response string
  3 thinking string
  6 message_id string
  7 tool_calls msg:COMMON.ChatToolCall rep
  8 modified_response string
  12 stop_reason enum:COMMON.StopReason

message GenericStepResult
  1 result string
  6 payload msg:google.Any
  7 full_output_uri string

message CortexStepGeneric
  1 args msg:CORTEX.CortexStepGeneric.ArgsEntry rep
  2 result msg:CORTEX.GenericStepResult
  map ArgsEntry string

message RunCommandOutput
  1 full string
  2 truncated string

message CortexStepRunCommand
  2 cwd string
  6 exit_code int32 opt
  11 blocking bool
  12 wait_ms_before_async uint64
  21 combined_output msg:CORTEX.RunCommandOutput
  23 command_line string
  25 proposed_command_line string
  31 shell_name string

# The bodies of the file, error, checkpoint, system, question and MCP tool steps.
message CortexStepViewFile
  1 absolute_path_uri string
  2 start_line uint32
  3 end_line uint32
  4 content string
  11 num_lines uint32
  12 num_bytes uint32

message ListDirectoryResult
  1 name string
  2 is_dir bool
  4 size_bytes uint64

message CortexStepListDirectory
  1 directory_path_uri string
  3 results msg:CORTEX.ListDirectoryResult rep

message CortexStepErrorMessage
  3 error msg:CORTEX.CortexErrorDetails
  4 should_show_model bool
  5 should_show_user bool

message CortexStepCheckpoint
  4 user_intent string
  9 intent_only bool
  12 included_step_index_end uint32
  19 user_requests string rep
  24 render_latest_checkpoint bool
  25 render_user_message_step_index int64 opt

message CortexStepSystemMessage
  1 message string
  3 event_type string

message CortexStepConversationHistory
  1 content string
# FINISH's body is not in the field guide; agy-sim writes it empty (1.3.x, unverified).
message CortexStepFinish

message AskQuestionOption
  1 id string
  2 text string

message AskQuestionEntry
  1 question string
  2 options msg:CORTEX.AskQuestionOption rep
  3 is_multi_select bool
  4 selected_option_ids string rep
  5 write_in_response string

message CortexStepAskQuestion
  1 questions msg:CORTEX.AskQuestionEntry rep

message McpServerInfo
  1 name string
  2 version string

message CortexStepMcpTool
  1 server_name string
  2 tool_call msg:COMMON.ChatToolCall
  3 result_string string oneof:result
  4 server_info msg:CORTEX.McpServerInfo
  7 user_rejected bool

# The permission and question interactions a WAITING step asks for, and their answers.
message PermissionResource
  1 action string
  2 target string

message PermissionInteractionSpec
  1 resource msg:CORTEX.PermissionResource
  2 suggested_persist_pattern string
  3 persist_suggestion_type enum:CORTEX.PermissionInteractionSpec.PersistSuggestionType
  5 action_description string opt
  enum PersistSuggestionType PERSIST_SUGGESTION_TYPE_UNSPECIFIED=0 PERSIST_SUGGESTION_TYPE_SUGGESTED=1

message AskQuestionInteractionSpec
  1 questions msg:CORTEX.AskQuestionEntry rep

message RequestedInteraction
  21 permission msg:CORTEX.PermissionInteractionSpec oneof:interaction
  22 ask_question msg:CORTEX.AskQuestionInteractionSpec oneof:interaction

message PermissionInteraction
  1 allow bool

message AskQuestionInteraction
  1 responses msg:CORTEX.AskQuestionEntry rep

message CascadeUserInteraction
  1 trajectory_id string
  2 step_index uint32
  21 permission msg:CORTEX.PermissionInteraction oneof:interaction
  22 ask_question msg:CORTEX.AskQuestionInteraction oneof:interaction
  24 timed_out bool

message CompletedInteraction
  1 request msg:CORTEX.RequestedInteraction
  2 response msg:CORTEX.CascadeUserInteraction

# Trajectory-level records: permission grants, generator metadata, trajectory metadata.
message PermissionGrant
  1 resource msg:CORTEX.PermissionResource
  2 allow bool

message TrajectoryPermissions
  2 permission_grants msg:CORTEX.PermissionGrant rep

message RetryInfo
  2 usage msg:COMMON.ModelUsageStats

message ChatModelMetadata
  3 model enum:COMMON.Model
  4 usage msg:COMMON.ModelUsageStats
  17 retry_infos msg:CORTEX.RetryInfo rep
  19 response_model string
  21 model_display_name string

message CortexStepGeneratorMetadata
  1 chat_model msg:CORTEX.ChatModelMetadata oneof:metadata
  2 step_indices uint32 rep
  4 execution_id string

message CortexTrajectoryMetadata
  2 created_at msg:google.Timestamp
  5 parent_conversation_id string
  6 root_conversation_id string
  7 workspace_uris string rep
"""

_TRAJECTORY_MESSAGES = """
message Step
  1 type enum:CORTEX.CortexStepType
  4 status enum:CORTEX.CortexStepStatus
  5 metadata msg:CORTEX.CortexStepMetadata
  12 finish msg:CORTEX.CortexStepFinish oneof:step
  14 view_file msg:CORTEX.CortexStepViewFile oneof:step
  15 list_directory msg:CORTEX.CortexStepListDirectory oneof:step
  19 user_input msg:CORTEX.CortexStepUserInput oneof:step
  20 planner_response msg:CORTEX.CortexStepPlannerResponse oneof:step
  24 error_message msg:CORTEX.CortexStepErrorMessage oneof:step
  28 run_command msg:CORTEX.CortexStepRunCommand oneof:step
  30 checkpoint msg:CORTEX.CortexStepCheckpoint oneof:step
  31 error msg:CORTEX.CortexErrorDetails
  47 mcp_tool msg:CORTEX.CortexStepMcpTool oneof:step
  56 requested_interaction msg:CORTEX.RequestedInteraction
  111 conversation_history msg:CORTEX.CortexStepConversationHistory oneof:step
  114 system_message msg:CORTEX.CortexStepSystemMessage oneof:step
  133 permissions msg:CORTEX.TrajectoryPermissions
  140 generic msg:CORTEX.CortexStepGeneric oneof:step
  147 completed_interactions msg:CORTEX.CompletedInteraction rep
  154 ask_question msg:CORTEX.CortexStepAskQuestion oneof:step
"""


def _kind(text: str) -> str:
    for short, full in _PACKAGES.items():
        text = text.replace(":" + short, ":" + full)
    return text


def _messages(schema: str) -> list[descriptor_pb2.DescriptorProto]:
    """The messages a schema text above declares, in order."""
    blocks: list[tuple[str, list[FieldSpec], list[tuple[str, str]], list[Any]]] = []
    for line in schema.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "message":
            blocks.append((words[1], [], [], []))
        elif words[0] == "map":
            blocks[-1][2].append((words[1], _kind(words[2])))
        elif words[0] == "enum":
            values = [(value, int(number)) for value, number in (w.split("=") for w in words[2:])]
            blocks[-1][3].append(_enum(words[1], values))
        else:
            number, name, kind, *flags = words
            blocks[-1][1].append((int(number), name, _kind(kind), " ".join(flags)))
    return [_message(name, fields, maps=maps, enums=enums) for name, fields, maps, enums in blocks]


def _file(
    name: str, package: str, dependency: Sequence[str], enums: Iterable[tuple[str, Any]]
) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name=f"agy_provider/sim/{name}.proto",
        package=package,
        syntax="proto3",
        dependency=list(dependency),
    )
    f.enum_type.extend(_enum(enum, values) for enum, values in enums)
    return f


def _common_file() -> descriptor_pb2.FileDescriptorProto:
    models = [("MODEL_UNSPECIFIED", 0)] + [
        (f"MODEL_PLACEHOLDER_M{n}", model_enum_number(n)) for n in _MODEL_PLACEHOLDERS
    ]
    enums = [
        ("Model", models),
        ("APIProvider", _API_PROVIDERS.items()),
        ("StopReason", STOP_REASON.items()),
    ]
    f = _file("codeium_common", "exa.codeium_common_pb", [], enums)
    f.message_type.extend(_messages(_COMMON_MESSAGES))
    return f


def _cortex_file() -> descriptor_pb2.FileDescriptorProto:
    deps = [
        "google/protobuf/any.proto",
        "google/protobuf/timestamp.proto",
        "agy_provider/sim/codeium_common.proto",
    ]
    enums = [
        ("CortexStepType", STEP_TYPE.items()),
        ("CortexStepStatus", STEP_STATUS.items()),
        ("CortexStepSource", STEP_SOURCE.items()),
    ]
    f = _file("cortex", "exa.cortex_pb", deps, enums)
    f.message_type.extend(_messages(_CORTEX_MESSAGES))
    return f


def _trajectory_file() -> descriptor_pb2.FileDescriptorProto:
    f = _file("trajectory", "gemini_coder", ["agy_provider/sim/cortex.proto"], [])
    f.message_type.extend(_messages(_TRAJECTORY_MESSAGES))
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
