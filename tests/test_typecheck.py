"""The fast checker accepts exactly what pydantic's strict mode accepts, for every legacy field."""

from __future__ import annotations

import typing

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, TypeAdapter, ValidationError
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec
from titan.schemas.typecheck import matches, type_name, value_name


def _annotations(spec: SectionSpec) -> list[typing.Any]:
    out = []
    for field in spec.fields:
        if isinstance(field.annotation, SectionSpec):
            out += _annotations(field.annotation)
        else:
            out.append(field.annotation)
    return out


ANNOTATIONS = sorted(set(map(repr, _annotations(LEGACY_SPEC))))
BY_REPR = {repr(a): a for a in _annotations(LEGACY_SPEC)}
# Extension modules may use a few more shapes than the base schema.
EXTRA = [dict[str, int], list[list[str]], typing.Literal["a", "b"] | None, list[float]]
ADAPTERS = {
    key: TypeAdapter(annotation, config=ConfigDict(strict=True))
    for key, annotation in [*BY_REPR.items(), *((repr(a), a) for a in EXTRA)]
}
CHOICES = ["selective", "full", "fused", "for-loop", "float32", "bfloat16", "triton", "default"]

scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(CHOICES),
)
toml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _pydantic_accepts(key: str, value: typing.Any) -> bool:
    try:
        ADAPTERS[key].validate_python(value)
    except ValidationError:
        return False
    return True


@settings(max_examples=3000)
@given(key=st.sampled_from(sorted(ADAPTERS)), value=toml_values)
def test_matches_agrees_with_pydantic_strict(key, value):
    annotation = {**BY_REPR, **{repr(a): a for a in EXTRA}}[key]
    assert matches(value, annotation) == _pydantic_accepts(key, value), (annotation, value)


def test_ints_are_numbers_but_bools_are_not():
    assert matches(1, float) and not matches(True, float) and not matches(True, int)
    assert not matches("10", int) and not matches(1.0, int)


def test_booleans_are_not_integer_choices():
    # pydantic lets True stand for 1 in Literal[1]; TOML `true` is not the number 1.
    assert not matches(True, typing.Literal[1, 2]) and matches(1, typing.Literal[1, 2])


def test_tuples_accept_toml_arrays():
    # Deliberately looser than pydantic strict mode: TOML has no tuples, only arrays.
    assert matches([1, 2], tuple[int, ...]) and matches([1, "a"], tuple[int, str])
    assert not matches([1, 2], tuple[int, str]) and not matches(["a"], tuple[int, ...])


def test_names_read_well():
    assert type_name(list[str]) == "a list of strings"
    assert type_name(int | None) == "an integer"
    assert type_name(typing.Literal["a", "b"]) == 'one of "a", "b"'
    assert value_name("10") == 'string "10"'
    assert value_name(True) == "boolean true"
