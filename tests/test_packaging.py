"""The package's metadata, read as the build reads it on a fresh machine."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

from packaging.requirements import Requirement
from setuptools import Distribution
from setuptools.config.pyprojecttoml import apply_configuration

ROOT = Path(__file__).resolve().parents[1]


def test_the_metadata_uses_no_field_setuptools_has_deprecated():
    # A deprecated field is a build that stops working on a fresh machine once the
    # registry's newest setuptools removes it (the table form of `license` by 2027-02-18).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert dist.metadata.license_expression == "Apache-2.0"


def test_the_build_asks_for_a_setuptools_that_reads_that_metadata():
    # An older setuptools, picked by the build's isolated environment, would refuse the
    # licence as an SPDX expression.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = next(
        Requirement(r) for r in project["build-system"]["requires"] if r.startswith("setuptools")
    )
    assert not setuptools.specifier.contains("76.1.0")
    assert setuptools.specifier.contains("77.0.3")
