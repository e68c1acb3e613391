"""The legacy schema equals the v0.2.2 reference table, and the generated spec equals the models."""

from __future__ import annotations

import re
import typing

import pytest
from pydantic import BaseModel
from titan.schemas.legacy import JobConfig, Section
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec
from titan.schemas.spec_codegen import annotation_source, spec_from_model

from tests.reference import reference_keys


def _leaves(model: type[BaseModel], prefix: str = "") -> dict[str, typing.Any]:
    out = {}
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, Section):
            out.update(_leaves(info.annotation, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = info
    return out


def _normalise(type_text: str) -> str:
    return type_text.replace(" ", "").replace("'", '"')


LEAVES = _leaves(JobConfig)


def test_eighteen_sections_and_149_leaves():
    assert len(JobConfig.model_fields) == 18
    assert len(LEAVES) == 149


def test_every_reference_key_exists_with_the_same_type_and_default():
    reference = reference_keys()
    assert set(LEAVES) == set(reference)
    for path, ref in reference.items():
        info = LEAVES[path]
        assert _normalise(annotation_source(info.annotation)) == _normalise(ref.type), path
        default = info.default_factory() if info.default_factory else info.default
        assert default == ref.default and type(default) is type(ref.default), path


def test_literal_choices_match_the_reference():
    for path, ref in reference_keys().items():
        if "Literal" not in ref.type:
            continue
        annotation = LEAVES[path].annotation
        args = typing.get_args(annotation)
        literal = annotation if typing.get_origin(annotation) is typing.Literal else args[0]
        choices = typing.get_args(literal)
        assert choices, path
        for choice in choices:
            assert f'"{choice}"' in ref.type, (path, choice)


@pytest.mark.parametrize("path", sorted(LEAVES))
def test_every_field_has_one_sentence_of_documentation(path):
    doc = LEAVES[path].description
    assert doc and doc.endswith(".") and doc[0].isupper(), path
    assert not re.search(r"[.;!?]\s+[A-Z]", doc), f"{path}: one sentence, got {doc!r}"


def test_unknown_keys_are_forbidden_at_every_level():
    def models(model):
        yield model
        for info in model.model_fields.values():
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
                yield from models(info.annotation)

    for model in models(JobConfig):
        assert model.model_config.get("extra") == "forbid", model.__name__
        assert model.model_config.get("strict") is True, model.__name__


def test_generated_spec_is_up_to_date():
    # `make schema` regenerates schemas/legacy_spec.py from schemas/legacy.py.
    assert LEGACY_SPEC == spec_from_model(JobConfig)


def test_generated_spec_sections_mirror_the_models():
    def count(spec: SectionSpec) -> int:
        return sum(
            count(f.annotation) if isinstance(f.annotation, SectionSpec) else 1 for f in spec.fields
        )

    assert count(LEGACY_SPEC) == 149
