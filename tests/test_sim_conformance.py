"""Our descriptors and everything the simulator writes, held against agy's real schema."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf import json_format
from sim_support import REAL_FDS
from sim_support import real_class
from sim_support import real_pool
from sim_support import schema_problems

from agy_provider.sim import descriptors as pb
from agy_provider.sim.engine import Clock
from agy_provider.sim.engine import Simulator
from agy_provider.sim.scenario import load_scenario

pytestmark = pytest.mark.skipif(not REAL_FDS.exists(), reason="../shared/reference is absent")


def test_every_declared_field_matches_the_real_schema() -> None:
    pool = real_pool()
    for name, fields in pb.declared_fields().items():
        real = descriptor_pb2.DescriptorProto()
        pool.FindMessageTypeByName(name).CopyToProto(real)
        by_number = {f.number: f for f in real.field}
        for ours in fields:
            theirs = by_number.get(ours.number)
            assert theirs is not None, (
                f"{name}.{ours.name} ({ours.number}) is not in the real schema"
            )
            assert (ours.name, ours.type, ours.label, ours.type_name, ours.proto3_optional) == (
                theirs.name,
                theirs.type,
                theirs.label,
                theirs.type_name,
                theirs.proto3_optional,
            ), f"{name}.{ours.name}"


def test_every_declared_enum_value_matches_the_real_schema() -> None:
    pool = real_pool()
    checked = 0
    for file_name in ("agy_provider/sim/codeium_common.proto", "agy_provider/sim/cortex.proto"):
        file = pb.POOL.FindFileByName(file_name)
        enums = list(file.enum_types_by_name.values())
        for message in file.message_types_by_name.values():
            enums += list(message.enum_types)
        for enum in enums:
            real = pool.FindEnumTypeByName(enum.full_name)
            for value in enum.values:
                assert real.values_by_name[value.name].number == value.number, value.name
                checked += 1
    assert checked > 40


def _play(
    tmp_path: Path, scenario: str, prompts: list[str], answer: dict[str, Any] | None = None
) -> Path:
    sim = Simulator(load_scenario(scenario), tmp_path, clock=Clock(speed=50))
    conversation = sim.open()
    stop = threading.Event()

    def answerer() -> None:
        while not stop.is_set():
            waiting = sim._waiting
            if waiting is not None and answer is not None:
                sim.answer(waiting[0], waiting[1], answer)
            time.sleep(0.005)

    thread = threading.Thread(target=answerer, daemon=True)
    thread.start()
    for prompt in prompts:
        sim.run_turn(conversation, prompt)
    stop.set()
    conversation.writer.close()
    return conversation.writer.path


CASES = {
    "default": ("default", ["hi"], None),
    "tools": ("tools", ["look around"], None),
    "permission-allowed": ("permission", ["pwd"], {"permission": {"allow": True}}),
    "permission-denied": ("permission", ["pwd"], None),
    "permission-reask": ("permission-reask", ["pwd"], None),
    "question": (
        "question",
        ["help"],
        {
            "askQuestion": {
                "responses": [
                    {"question": "What would you like to focus on?", "selectedOptionIds": ["2"]}
                ]
            }
        },
    ),
    "quota-error": ("quota-error", ["hi"], None),
    "two-turn": ("two-turn", ["count", "again"], None),
    "subagent": ("subagent", ["research"], None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_everything_written_decodes_with_the_real_schema(tmp_path: Path, case: str) -> None:
    scenario, prompts, answer = CASES[case]
    path = _play(tmp_path, scenario, prompts, answer)
    RealStep = real_class("gemini_coder.Step")
    with sqlite3.connect(path) as db:
        steps = db.execute(
            "SELECT idx, step_type, status, error_details, step_payload FROM steps"
        ).fetchall()
        gens = db.execute("SELECT data, size FROM gen_metadata").fetchall()
        (blob,) = db.execute("SELECT data FROM trajectory_metadata_blob").fetchone()
    assert steps and (gens or scenario == "quota-error")
    for index, step_type, status, error_details, payload in steps:
        real = RealStep()
        real.ParseFromString(payload)
        assert schema_problems(real) == [], index
        assert (real.type, real.status) == (step_type, status)
        ours = pb.Step()
        ours.ParseFromString(payload)
        assert json_format.MessageToDict(
            ours, descriptor_pool=pb.POOL
        ) == json_format.MessageToDict(real, descriptor_pool=real_pool())
        if error_details is not None:
            details = real_class("exa.cortex_pb.CortexErrorDetails")()
            details.ParseFromString(error_details)
            assert schema_problems(details) == []
    for data, size in gens:
        record = real_class("exa.cortex_pb.CortexStepGeneratorMetadata")()
        record.ParseFromString(data)
        assert size == len(data) and schema_problems(record) == []
        assert record.chat_model.response_model and record.chat_model.model_display_name
    meta = real_class("exa.cortex_pb.CortexTrajectoryMetadata")()
    meta.ParseFromString(blob)
    assert schema_problems(meta) == []


def test_generic_step_embeds_the_legacy_run_command(tmp_path: Path) -> None:
    path = _play(tmp_path, "tools", ["look"])
    RealStep = real_class("gemini_coder.Step")
    with sqlite3.connect(path) as db:
        (payload,) = db.execute(
            "SELECT step_payload FROM steps WHERE step_type=132 LIMIT 1"
        ).fetchone()
    step = RealStep()
    step.ParseFromString(payload)
    assert step.generic.result.payload.type_url == "type.googleapis.com/gemini_coder.Step"
    inner = RealStep()
    assert step.generic.result.payload.Unpack(inner)
    assert inner.type == 21 and inner.run_command.exit_code == 0
    assert inner.run_command.combined_output.full == "README.md\npyproject.toml\nsrc\ntests\n"
    assert json_format.MessageToDict(inner)["runCommand"]["exitCode"] == 0
    assert dict(step.generic.args)["CommandLine"] == "ls -1"
