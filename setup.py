"""The package list, which pyproject.toml cannot compute: the top-level ``schemas/`` and
``migrate/`` folders install as ``titan.schemas`` and ``titan.migrate`` (package-dir), so titan
claims no generic top-level import name that a user's own package could carry."""

from setuptools import find_packages, setup

FOLDERS = {"titan.schemas": "schemas", "titan.migrate": "migrate"}
# Data only: the tokenizer and documents the debug configs name (tests/assets/...), so they run
# from a wheel as from a checkout (titan.components.local_paths finds them).
ASSETS = {"titan.assets": "tests/assets"}

packages = find_packages(include=["titan", "titan.*"])
for name, folder in FOLDERS.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
packages.append("titan.schemas.json")  # data only: the exported JSON Schema
packages += list(ASSETS)

setup(
    packages=packages,
    package_dir={**FOLDERS, **ASSETS},
    package_data={
        "titan.schemas.json": ["*.json"],
        "titan.assets": ["tokenizer/*.json", "c4_test/*.jsonl"],
    },
)
