"""The docs site: every page builds with no broken link, the reference pages come from
the code, and every shell or TOML example is run by a test or marked illustrative."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mqgather.collector_config import CollectorSpec
from mqgather.config import AggregateSpec, LegSpec, QueueDefinition, parse_config

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
#: A comment on the line before a code block: why it is not run here.
MARK = re.compile(r"<!-- (illustrative|run by (?P<by>[^>]*?)) -->\n$")
BLOCK = re.compile(r"(?m)^```(?P<lang>toml|sh|bash|shell)\n(?P<body>.*?)^```", re.S)


def _blocks():
    for page in sorted(DOCS.rglob("*.md")):
        if page.parent.name == "reference":
            continue  # generated from the code
        text = page.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].splitlines(keepends=True)[-1:] or [""]
            yield page.relative_to(ROOT), line, match["lang"], match["body"], before[0]


BLOCKS = list(_blocks())


@pytest.mark.parametrize(("page", "line", "lang", "body", "before"), BLOCKS,
                         ids=[f"{b[0]}:{b[1]}" for b in BLOCKS])  # fmt: skip
def test_every_example_is_run_or_marked_illustrative(page, line, lang, body, before):
    mark = MARK.search(before)
    if lang == "toml" and mark is None:
        # A TOML example is a configuration: it must load as one.
        parse_config(tomllib.loads(body), f"{page}:{line}")
        return
    assert mark, f"{page}:{line}: a {lang} example neither run nor marked <!-- illustrative -->"
    for named in re.findall(r"[\w./-]+\.py|\.ci/run", mark["by"] or ""):
        assert (ROOT / named).exists(), f"{page}:{line} names {named}, which does not exist"


def test_the_reference_pages_are_what_the_code_gives_now():
    checked = subprocess.run([sys.executable, str(DOCS / "generate.py"), "--check"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_site_builds_strictly_from_generated_reference_pages(tmp_path):
    reference = (DOCS / "reference" / "configuration.md").read_text()
    for model in (AggregateSpec, LegSpec, QueueDefinition, CollectorSpec):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description to show"
            if name != "name":
                assert f"| `{name}` |" in reference, name
    commands = (DOCS / "reference" / "cli.md").read_text()
    assert "## `mqgather rerequest`" in commands and "## `mqgather queues setup`" in commands
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "guides" / "configuration" / "index.html").exists()


def test_the_readme_is_short_and_links_into_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link
