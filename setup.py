"""The package list, which pyproject.toml cannot compute: the top-level ``schemas/`` and
``migrate/`` folders install as ``titan.schemas`` and ``titan.migrate`` (package-dir), so titan
claims no generic top-level import name that a user's own package could carry."""

from setuptools import find_packages, setup

FOLDERS = {"titan.schemas": "schemas", "titan.migrate": "migrate"}

packages = find_packages(include=["titan", "titan.*"])
for name, folder in FOLDERS.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
packages.append("titan.schemas.json")  # data only: the exported JSON Schema

setup(
    packages=packages,
    package_dir=FOLDERS,
    package_data={"titan.schemas.json": ["*.json"]},
)
