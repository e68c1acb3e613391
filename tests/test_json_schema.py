"""The exported JSON Schema: up to date, editor-friendly, and agreeing with the validator."""

from __future__ import annotations

import json
import tomllib

import jsonschema
import pytest
from titan.schemas.json_schema import json_schema

from tests.helpers import legacy_tomls, validate, write
from tests.reference import REPO, corpus_files

SHIPPED = REPO / "schemas" / "json" / "torchtitan-v0.2.2.schema.json"
SCHEMA = json_schema()
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def _walk(node, path=""):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}".lstrip("."))


def test_shipped_schema_is_up_to_date():
    # `make schema` rewrites it.
    assert json.loads(SHIPPED.read_text(encoding="utf-8")) == SCHEMA


def test_schema_is_draft7_without_references_and_documents_every_field():
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert "$ref" not in json.dumps(SCHEMA) and "$defs" not in SCHEMA
    leaves = 0
    for path, node in _walk(SCHEMA):
        if not path:
            continue
        assert node.get("description"), path
        if "properties" in node:
            assert node["additionalProperties"] is False, path
        else:
            leaves += 1
            assert "default" in node, path
    assert leaves == 149


def test_literal_fields_are_enums():
    mode = SCHEMA["properties"]["activation_checkpoint"]["properties"]["mode"]
    assert mode["enum"] == ["selective", "full", "memory_budget", "none"]
    assert mode["default"] == "selective"


def _errors(path) -> list[str]:
    with path.open("rb") as handle:
        return [e.message for e in VALIDATOR.iter_errors(tomllib.load(handle))]


def test_project_configs_without_extensions_satisfy_the_schema():
    plain = [
        p for p in legacy_tomls() if "custom_config_module" not in p.read_text(encoding="utf-8")
    ]
    assert len(plain) >= 15
    for path in plain:
        assert _errors(path) == [], path


def test_corpus_files_without_extensions_satisfy_the_schema():
    for path in corpus_files():
        text = path.read_text(encoding="utf-8")
        if "custom_config_module" in text or "hf_transformers" in text:
            continue
        assert _errors(path) == [], path


@pytest.mark.parametrize(
    "text",
    [
        "[training]\nstpes = 1\n",
        '[training]\nsteps = "10"\n',
        "[compile]\nbackend = 3\n",
        "[bogus]\n",
    ],
)
def test_schema_and_validator_both_reject(tmp_path, text):
    path = write(tmp_path, "bad.toml", text)
    assert _errors(path)
    assert validate(path).code == 1


def test_export_with_an_extension_adds_its_sections(tmp_path):
    target = tmp_path / "flux.schema.json"
    result = validate("--export-json-schema", target, "--extension", "flux")
    assert result.code == 0
    schema = json.loads(target.read_text(encoding="utf-8"))
    assert "encoder" in schema["properties"]
    assert "img_size" in schema["properties"]["training"]["properties"]
    flux = REPO / "legacy_configs" / "flux" / "flux_dev_model.toml"
    with flux.open("rb") as handle:
        assert list(jsonschema.Draft7Validator(schema).iter_errors(tomllib.load(handle))) == []


def test_export_to_an_unwritable_place_is_a_usage_error(tmp_path):
    result = validate("--export-json-schema", tmp_path / "missing" / "dir" / "x.json")
    assert result.code == 2 and "cannot write" in result.err
