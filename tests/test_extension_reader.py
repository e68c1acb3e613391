"""Tests for titan.schemas.extension_reader: static reading of custom config modules, and --allow-import."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal, Optional

import pytest
from titan.schemas.extension_reader import (
    KNOWN_EXTENSIONS,
    ExtensionError,
    find_module_source,
    import_extension,
    known_extension,
    read_extension,
    read_extension_source,
)
from titan.schemas.spec import MISSING, SectionSpec

REPO = Path(__file__).resolve().parents[1]

# The "Sections added by the shipped custom config modules" table of schema_v022.md.
REFERENCE: dict[str, dict[str, list[tuple[str, Any, Any]]]] = {
    "flux": {
        "training": [
            ("classifier_free_guidance_prob", float, 0.0),
            ("img_size", int, 256),
            ("test_mode", bool, False),
        ],
        "encoder": [
            ("t5_encoder", str, "google/t5-v1_1-small"),
            ("clip_encoder", str, "openai/clip-vit-large-patch14"),
            (
                "autoencoder_path",
                str,
                "torchtitan/experiments/flux/assets/autoencoder/ae.safetensors",
            ),
            ("max_t5_encoding_len", int, 256),
        ],
        "validation": [
            ("enable_classifier_free_guidance", bool, False),
            ("classifier_free_guidance_scale", float, 5.0),
            ("denoising_steps", int, 50),
            ("eval_freq", int, 100),
            ("save_img_count", int, 1),
            ("save_img_folder", str, "img"),
            ("all_timesteps", bool, False),
        ],
        "inference": [
            ("save_img_folder", str, "inference_results"),
            ("prompts_path", str, "./torchtitan/experiments/flux/inference/prompts.txt"),
            ("local_batch_size", int, 2),
            ("img_size", int, 256),
        ],
    },
    "ft": {
        "fault_tolerance": [
            ("sync_steps", int, 5),
            ("should_quantize", bool, False),
            ("fragment_sync_delay", int, 0),
            ("fragment_update_alpha", float, 0.0),
            ("module_fqns_per_model_fragment", list[list[str]], []),
            ("num_fragments", int, 1),
        ],
    },
    "vlm": {
        "data": [
            ("max_images_per_batch", int, 10),
            ("max_patches_per_image", int, 256),
            ("patch_size", int, 16),
            ("spatial_merge_size", int, 1),
            ("packing_buffer_size", int, 0),
        ],
    },
    "transformers_modeling_backend": {"hf_transformers": [("model", str, "")]},
    "simple_fsdp": {
        "compile": [
            (
                "graph_passes",
                Literal["auto_bucketing", "transformer_block_bucketing"] | None,
                None,
            )
        ],
    },
    "compiler_toolkit": {
        "compile": [("joint_passes", list[str], []), ("passes", list[str], [])],
    },
    "autoparallel": {
        "experimental": [
            ("comms_bucket_reorder_strategy", str, "aten"),
            ("autop_force_bf16", bool, False),
        ],
    },
    "extended_job_config_example": {
        "custom_config": [("how_is_your_day", str, "good"), ("num_days", int, 7)],
        "training": [("steps", int, 99), ("my_custom_steps", int, 32)],
    },
}


def shape(section: SectionSpec) -> list[tuple[str, Any, Any]]:
    """Names, types and defaults of a section; nested sections recursively."""
    return [
        (
            f.name,
            shape(f.annotation) if isinstance(f.annotation, SectionSpec) else f.annotation,
            f.default,
        )
        for f in section.fields
    ]


def write(root: Path, relative: str, source: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


# --- built-in known modules -------------------------------------------------------------------


def test_known_extension_names_match_the_reference():
    assert sorted(KNOWN_EXTENSIONS.values()) == sorted(REFERENCE)
    assert KNOWN_EXTENSIONS["torchtitan.components.ft.config"] == "ft"
    assert KNOWN_EXTENSIONS["torchtitan.models.flux.job_config"] == "flux"


@pytest.mark.parametrize("short", sorted(REFERENCE))
def test_built_in_module_matches_reference_table(short):
    spec = known_extension(short)
    assert spec is not None
    assert spec.origin == "built-in"
    assert spec.notes == ()
    assert KNOWN_EXTENSIONS[spec.module] == short
    sections = {f.name: f for f in spec.root.fields}
    assert list(sections) == list(REFERENCE[short])
    for name, expected in REFERENCE[short].items():
        section = sections[name].annotation
        assert isinstance(section, SectionSpec)
        assert sections[name].default is MISSING  # a section: the builder knows its defaults
        assert shape(section) == expected
        # Every field carries its one-sentence --help text and its source line.
        for f in (*section.fields, sections[name]):
            assert f.doc and f.doc[0].isupper() and f.doc.endswith("."), (name, f.name)
            assert not re.search(r"[.;!?]\s+[A-Z]", f.doc), f"{f.name}: one sentence, {f.doc!r}"
            assert f.line


@pytest.mark.parametrize("module", sorted(KNOWN_EXTENSIONS))
def test_built_in_found_by_module_path_before_search_dirs(module, tmp_path):
    # A same-named file on the search path does not shadow the built-in copy.
    write(tmp_path, module.replace(".", "/") + ".py", "JobConfig = 1\n")
    by_path = read_extension(module, search_dirs=[tmp_path])
    assert by_path == known_extension(KNOWN_EXTENSIONS[module]) == known_extension(module)
    assert by_path.module == module


def test_unknown_short_name_is_none():
    assert known_extension("llama3") is None


@pytest.mark.parametrize("short", sorted(REFERENCE))
def test_built_in_files_import_cleanly_and_agree_with_static_read(short):
    imported = import_extension(f"titan.schemas.known_extensions.{short}", search_dirs=[])
    assert imported.origin == str(REPO / "schemas" / "known_extensions" / f"{short}.py")
    assert imported.root == known_extension(short).root  # docs and lines included


def test_reader_does_not_import_torch():
    code = (
        "import sys\n"
        "from titan.schemas.extension_reader import known_extension, read_extension\n"
        "assert known_extension('flux') is not None\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


# --- a user module read statically -------------------------------------------------------------

USER_MODULE = '''\
import typing as t
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional

DEFAULT_LAYERS = 5
NEG = -3
Mode = Literal["fast", "slow"]


@dataclass
class Encoder:
    """Encoder settings."""

    required: int
    name: str = "t5"
    """Which encoder to use."""
    layers: int = DEFAULT_LAYERS
    """Number of layers."""
    path: str | None = None
    kind: Literal["a", "b", 3] = "a"
    ratios: list[float] = field(default_factory=lambda: [0.5, -1.5])
    """Ratios, one per stage."""
    names: list[str] = field(default_factory=list)
    table: dict[str, int] = field(default_factory=dict)
    offset: int = NEG
    scale: t.Optional[float] = field(default=-2.5)
    mode: Mode = "fast"
    pair: "tuple[int, ...]" = (1, 2)
    tagged: Annotated[int, "meta"] = 0
    legacy: Optional[int] = None
    counter: t.ClassVar[int] = 0


@dataclass
class JobConfig:
    """My extension."""

    encoder: Encoder = field(default_factory=Encoder)
    """Encoder options."""
    comm: int = 3
'''


def test_user_module_static_read(tmp_path):
    path = write(tmp_path, "myext.py", USER_MODULE)
    spec = read_extension("myext", search_dirs=[tmp_path])
    assert spec.origin == str(path)
    assert spec.module == "myext"
    assert spec.notes == ()
    root = spec.root
    assert (root.name, root.doc) == ("JobConfig", "My extension.")
    assert root.field("encoder").doc == "Encoder options."
    assert root.field("comm").default == 3
    encoder = root.field("encoder").annotation
    assert isinstance(encoder, SectionSpec)
    assert (encoder.name, encoder.doc) == ("Encoder", "Encoder settings.")
    assert shape(encoder) == [
        ("required", int, MISSING),
        ("name", str, "t5"),
        ("layers", int, 5),
        ("path", str | None, None),
        ("kind", Literal["a", "b", 3], "a"),
        ("ratios", list[float], [0.5, -1.5]),
        ("names", list[str], []),
        ("table", dict[str, int], {}),
        ("offset", int, -3),
        ("scale", float | None, -2.5),
        ("mode", Literal["fast", "slow"], "fast"),
        ("pair", tuple[int, ...], (1, 2)),
        ("tagged", int, 0),
        ("legacy", int | None, None),
    ]  # the ClassVar is not a field
    assert encoder.field("name").doc == "Which encoder to use."
    assert encoder.field("layers").doc == "Number of layers."
    assert encoder.field("path").doc is None
    assert encoder.field("ratios").doc == "Ratios, one per stage."
    source_lines = USER_MODULE.splitlines()
    assert source_lines[encoder.field("ratios").line - 1].strip().startswith("ratios:")


def test_unresolvable_annotation_and_default_become_any_and_missing_with_notes(tmp_path):
    write(
        tmp_path,
        "odd.py",
        """\
        import dataclasses
        import typing
        from torch import Tensor

        def make():
            return 1

        @dataclasses.dataclass
        class Inner:
            x: int = 0

        @dataclasses.dataclass(frozen=True)
        class JobConfig:
            weights: Tensor = None
            count: int = make()
            factory: list = dataclasses.field(default_factory=make)
            nonsense: int[str] = 0
            missing_attr: typing.Nope = 0
            bad_string: "list[" = 0
            inners: list[Inner] = dataclasses.field(default_factory=list)
        """,
    )
    spec = read_extension("odd", search_dirs=[tmp_path])
    assert shape(spec.root) == [
        ("weights", Any, None),
        ("count", int, MISSING),
        ("factory", list, MISSING),
        ("nonsense", Any, 0),
        ("missing_attr", Any, 0),
        ("bad_string", Any, 0),
        ("inners", Any, []),  # a section inside a generic is no table the legacy merge knows
    ]
    assert any("weights" in note and "`Tensor`" in note for note in spec.notes)
    assert any("count" in note and "`make()`" in note for note in spec.notes)
    for name in ("factory", "nonsense", "missing_attr", "bad_string", "inners"):
        assert any(f"JobConfig.{name}:" in note for note in spec.notes), name
    assert len(spec.notes) == 7


def test_inheritance_within_module_and_from_builtin_schema(tmp_path):
    write(
        tmp_path,
        "inherit.py",
        """\
        from dataclasses import dataclass, field
        from torchtitan.config.job_config import FaultTolerance as BaseFaultTolerance
        from somewhere.other import Mystery

        @dataclass
        class Base:
            a: int = 1
            b: str = "x"

        @dataclass
        class Child(Base):
            c: bool = True
            a: int = 2

        @dataclass
        class FaultTolerance(BaseFaultTolerance):
            sync_steps: int = 5

        @dataclass
        class Odd(Mystery):
            z: int = 0

        @dataclass
        class JobConfig:
            child: Child = field(default_factory=Child)
            fault_tolerance: FaultTolerance = field(default_factory=FaultTolerance)
            odd: Odd = field(default_factory=Odd)
        """,
    )
    spec = read_extension("inherit", search_dirs=[tmp_path])
    root = spec.root
    # Inherited fields first; a redefinition keeps the base's slot with the new default.
    assert shape(root.field("child").annotation) == [
        ("a", int, 2),
        ("b", str, "x"),
        ("c", bool, True),
    ]
    # A built-in section base adds nothing and says nothing: the merge supplies its fields.
    assert shape(root.field("fault_tolerance").annotation) == [("sync_steps", int, 5)]
    assert shape(root.field("odd").annotation) == [("z", int, 0)]
    assert len(spec.notes) == 1 and "`Mystery`" in spec.notes[0]


def test_package_reexporting_job_config_from_submodule(tmp_path):
    write(tmp_path, "mypkg/__init__.py", "from .config import JobConfig\n")
    write(tmp_path, "mypkg/config/__init__.py", "from .job_config import JobConfig  # noqa\n")
    write(
        tmp_path,
        "mypkg/config/job_config.py",
        """\
        from dataclasses import dataclass, field
        from ..shared import Shared

        @dataclass
        class Extra:
            n: int = 4

        @dataclass
        class JobConfig:
            extra: Extra = field(default_factory=Extra)
            shared: Shared = field(default_factory=Shared)
        """,
    )
    write(
        tmp_path,
        "mypkg/shared.py",
        """\
        from dataclasses import dataclass
        @dataclass
        class Shared:
            flag: bool = False
        """,
    )
    expected = [("extra", [("n", int, 4)], MISSING), ("shared", [("flag", bool, False)], MISSING)]
    for module in ("mypkg", "mypkg.config"):
        spec = read_extension(module, search_dirs=[tmp_path])
        assert shape(spec.root) == expected
        assert spec.notes == ()


def test_absolute_reexport_and_alias(tmp_path):
    write(tmp_path, "top/__init__.py", "")
    write(
        tmp_path,
        "top/impl.py",
        """\
        from dataclasses import dataclass
        @dataclass
        class MyConfig:
            x: int = 1
        """,
    )
    write(tmp_path, "top/alias.py", "from top.impl import MyConfig as _C\nJobConfig = _C\n")
    spec = read_extension_source(tmp_path / "top/alias.py", module="top.alias")
    assert spec.root.name == "MyConfig"
    assert shape(spec.root) == [("x", int, 1)]


def test_future_annotations_is_readable_but_noted(tmp_path):
    write(
        tmp_path,
        "future.py",
        """\
        from __future__ import annotations
        from dataclasses import dataclass

        @dataclass
        class JobConfig:
            x: int | None = None
        """,
    )
    spec = read_extension("future", search_dirs=[tmp_path])
    assert shape(spec.root) == [("x", int | None, None)]
    assert len(spec.notes) == 1 and "__future__" in spec.notes[0]


# --- errors ------------------------------------------------------------------------------------


def test_missing_job_config_is_an_error(tmp_path):
    write(
        tmp_path,
        "nojob.py",
        "from dataclasses import dataclass\n@dataclass\nclass Other:\n    x: int = 1\n",
    )
    with pytest.raises(ExtensionError, match="has no attribute 'JobConfig'"):
        read_extension("nojob", search_dirs=[tmp_path])


def test_job_config_that_is_not_a_dataclass_is_an_error(tmp_path):
    write(tmp_path, "plain.py", "class JobConfig:\n    x: int = 1\n")
    with pytest.raises(ExtensionError, match="not a dataclass"):
        read_extension("plain", search_dirs=[tmp_path])


def test_reexport_from_missing_module_asks_for_module_path(tmp_path):
    write(tmp_path, "lost.py", "from elsewhere.cfg import JobConfig\n")
    with pytest.raises(ExtensionError, match="--module-path"):
        read_extension("lost", search_dirs=[tmp_path])


def test_syntax_error_reports_file_and_line(tmp_path):
    path = write(tmp_path, "broken.py", "from dataclasses import dataclass\n\nclass JobConfig(:\n")
    with pytest.raises(ExtensionError) as info:
        read_extension("broken", search_dirs=[tmp_path])
    assert f"{path}:3" in str(info.value)


def test_module_not_found_says_how_to_fix(tmp_path):
    with pytest.raises(ExtensionError) as info:
        read_extension("no.such.module", search_dirs=[tmp_path])
    message = str(info.value)
    assert "no/such/module.py" in message
    assert "--module-path" in message and "--extension" in message and "flux" in message


# --- find_module_source ------------------------------------------------------------------------


def test_find_module_source_forms(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    module_file = write(second, "a/b.py", "")
    assert find_module_source("a.b", search_dirs=[first, second]) == module_file
    package_init = write(first, "a/b/__init__.py", "")
    # Earlier directories win; within one, a package shadows a module (Python's order).
    assert find_module_source("a.b", search_dirs=[first, second]) == package_init
    write(first, "a/b.py", "")
    assert find_module_source("a.b", search_dirs=[first]) == package_init
    assert find_module_source("a", search_dirs=[first]) is None  # no a/__init__.py or a.py
    assert find_module_source("a.c", search_dirs=[first, second]) is None
    assert find_module_source("not-valid..name", search_dirs=[first]) is None


# --- --allow-import ----------------------------------------------------------------------------


def test_import_extension_agrees_with_static_read(tmp_path, fresh_module_name):
    write(tmp_path, f"{fresh_module_name}/__init__.py", "from .job_config import JobConfig\n")
    write(tmp_path, f"{fresh_module_name}/job_config.py", USER_MODULE)
    path_before = list(sys.path)
    imported = import_extension(fresh_module_name, search_dirs=[tmp_path])
    assert sys.path == path_before
    static = read_extension(fresh_module_name, search_dirs=[tmp_path])
    assert imported.origin == str(tmp_path / fresh_module_name / "__init__.py")
    assert imported.module == fresh_module_name
    assert shape(imported.root) == shape(static.root)
    assert imported.root == static.root  # docs and lines come from the source


def test_import_extension_wraps_errors_from_user_code(tmp_path, fresh_module_name):
    write(tmp_path, f"{fresh_module_name}.py", "raise RuntimeError('no GPU here')\n")
    path_before = list(sys.path)
    with pytest.raises(ExtensionError, match="RuntimeError: no GPU here") as info:
        import_extension(fresh_module_name, search_dirs=[tmp_path])
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert sys.path == path_before


def test_import_extension_without_job_config(tmp_path, fresh_module_name):
    write(tmp_path, f"{fresh_module_name}.py", "X = 1\n")
    with pytest.raises(ExtensionError, match="has no attribute 'JobConfig'"):
        import_extension(fresh_module_name, search_dirs=[tmp_path])


def test_import_extension_refuses_a_module_python_already_loaded_elsewhere(tmp_path):
    # `json` is loaded before any custom module: a json.py beside the TOML can never be the one
    # imported, and silently using the standard library's would validate against nothing.
    write(tmp_path, "json.py", USER_MODULE)
    with pytest.raises(ExtensionError, match="had already loaded") as info:
        import_extension("json", search_dirs=[tmp_path])
    assert str(tmp_path / "json.py") in str(info.value)


# --- fork modules: torchtitan's own classes, types as written ----------------------------------


def test_a_fork_section_named_after_its_torchtitan_base_extends_that_section(tmp_path):
    # A fork's shape (`class Parallelism(Parallelism)`): the statement rebinds the name it
    # subclasses, so its base is the class imported before it, not the class itself.
    write(
        tmp_path,
        "fork_parallel.py",
        """\
        from dataclasses import dataclass, field
        from typing import Literal, Optional

        from torchtitan.config.job_config import Parallelism
        from torchtitan.config import Training as T
        from torchtitan.config import JobConfig as BaseJobConfig


        @dataclass
        class Parallelism(Parallelism):
            fsdp_groups: tuple[str, ...] = ("dp",)
            \"\"\"Process groups FSDP shards over.\"\"\"
            ranks_per_group: dict[str, int] = field(default_factory=dict)
            overlap: Literal["none", "comm", "all"] = "comm"
            micro_splits: list[tuple[int, ...]] = field(default_factory=list)
            hybrid_shard: int | None = None
            offload: Optional[str] = None
            plans: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)


        @dataclass
        class Training(T):
            npu_warmup: int = 0


        @dataclass
        class JobConfig(BaseJobConfig):
            parallelism: Parallelism = field(default_factory=Parallelism)
            training: Training = field(default_factory=Training)
        """,
    )
    spec = read_extension("fork_parallel", search_dirs=[tmp_path])
    assert spec.notes == ()
    assert shape(spec.root.field("parallelism").annotation) == [
        ("fsdp_groups", tuple[str, ...], ("dp",)),
        ("ranks_per_group", dict[str, int], {}),
        ("overlap", Literal["none", "comm", "all"], "comm"),
        ("micro_splits", list[tuple[int, ...]], []),
        ("hybrid_shard", int | None, None),
        ("offload", Optional[str], None),  # noqa: UP045 - as the module writes it
        ("plans", dict[str, list[tuple[int, ...]]], {}),
    ]
    assert shape(spec.root.field("training").annotation) == [("npu_warmup", int, 0)]


def test_torchtitan_classes_through_a_module_attribute_are_their_sections(tmp_path):
    write(
        tmp_path,
        "fork_attr.py",
        """\
        from dataclasses import dataclass, field

        import torchtitan.config.job_config as jc
        import torchtitan.config_manager


        @dataclass
        class Checkpoint(jc.Checkpoint):
            npu_async_upload: bool = False


        @dataclass
        class Comm(torchtitan.config_manager.Comm):
            hccl_timeout_seconds: int = 600


        @dataclass
        class JobConfig:
            checkpoint: Checkpoint = field(default_factory=Checkpoint)
            comm: Comm = field(default_factory=Comm)
        """,
    )
    spec = read_extension("fork_attr", search_dirs=[tmp_path])
    assert spec.notes == ()
    assert shape(spec.root.field("checkpoint").annotation) == [("npu_async_upload", bool, False)]
    assert shape(spec.root.field("comm").annotation) == [("hccl_timeout_seconds", int, 600)]


def test_a_torchtitan_class_as_a_field_type_is_that_whole_section(tmp_path):
    # The shape of torchtitan's RL experiment: a new section holds a whole [parallelism] of its
    # own (`parallelism: Parallelism = field(default_factory=Parallelism)`).
    write(
        tmp_path,
        "rl_job.py",
        """\
        from dataclasses import dataclass, field

        from torchtitan.config.job_config import JobConfig as BaseJobConfig, Parallelism
        import torchtitan.config.job_config as jc


        @dataclass
        class Generation:
            dtype: str = "bfloat16"
            parallelism: Parallelism = field(default_factory=Parallelism)
            \"\"\"Parallelism of the generation engine.\"\"\"
            checkpoint: jc.Checkpoint = field(default_factory=jc.Checkpoint)


        @dataclass
        class JobConfig(BaseJobConfig):
            generation: Generation = field(default_factory=Generation)
        """,
    )
    from titan.schemas.legacy_spec import LEGACY_SPEC

    spec = read_extension("rl_job", search_dirs=[tmp_path])
    assert spec.notes == ()
    generation = spec.root.field("generation").annotation
    assert generation.field("parallelism").annotation == LEGACY_SPEC.field("parallelism").annotation
    assert generation.field("checkpoint").annotation == LEGACY_SPEC.field("checkpoint").annotation
    job = write(
        tmp_path,
        "rl.toml",
        """\
        [job]
        custom_config_module = "rl_job"

        [generation.parallelism]
        tensor_parallel_degree = 2
        data_parallel_shard_degre = 4
        """,
    )
    from titan.schemas.toml_check import CheckOptions, check_file

    found = check_file(str(job), CheckOptions()).diagnostics
    assert [(d.code, d.path) for d in found] == [
        ("unknown-key", "generation.parallelism.data_parallel_shard_degre")
    ]


def test_a_base_in_another_fork_module_through_an_attribute(tmp_path):
    # A fork layering its configs: `class Model(base.Model)` over its own base module.
    write(
        tmp_path,
        "forkcfg/base.py",
        """\
        from dataclasses import dataclass


        @dataclass
        class Model:
            moe_top_k: int = 2
        """,
    )
    write(tmp_path, "forkcfg/__init__.py", "")
    write(
        tmp_path,
        "forkcfg/job.py",
        """\
        from dataclasses import dataclass, field

        import forkcfg.base as base


        @dataclass
        class Model(base.Model):
            multiple_of: int | None = 256


        @dataclass
        class JobConfig:
            model: Model = field(default_factory=Model)
        """,
    )
    spec = read_extension("forkcfg.job", search_dirs=[tmp_path])
    assert spec.notes == ()
    assert shape(spec.root.field("model").annotation) == [
        ("moe_top_k", int, 2),
        ("multiple_of", int | None, 256),
    ]


def test_a_fork_tuple_field_migrates_as_written(tmp_path):
    import io

    from titan.cli import migrate as cli

    write(
        tmp_path,
        "fork_tuple.py",
        """\
        from dataclasses import dataclass, field


        @dataclass
        class Infra:
            zones: tuple[str, ...] = ("a",)


        @dataclass
        class JobConfig:
            infra: Infra = field(default_factory=Infra)
        """,
    )
    job = write(
        tmp_path,
        "job.toml",
        '[job]\ncustom_config_module = "fork_tuple"\n\n[infra]\nzones = ["a", "b"]\n',
    )
    out, err = io.StringIO(), io.StringIO()
    assert cli.run([str(job)], stdout=out, stderr=err) == 0, err.getvalue()
    assert "zones: tuple[str, ...] = " in out.getvalue()
    assert 'zones=("a", "b")' in out.getvalue()
