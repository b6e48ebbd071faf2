"""The user documentation stands alone: nothing points outside the repository, docs/ links resolve,
and every built-in method is documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from verispec.reference import methods

ROOT = Path(__file__).resolve().parents[1]

# Built from parts so that this file does not match itself.
_DESIGN = "|".join(name + r"\.md" for name in ("ARCHITECTURE", "ALGORITHMS", "THEORY", "EMPIRICAL", "TESTING"))
POINTER = re.compile(_DESIGN + "|" + "shared" + r"/design|\.\./" + "shared")

#: Pages that other work in progress adds; a link to one of them is allowed while it is missing.
PENDING_PAGES = {"prove.md", "engine.md", "ems_sd.md", "verifiers_new.md"}

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"`[^`]*`")  # inline code is not a link


def _repository_files():
    """Tracked and untracked, not ignored, files (what a user would get)."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines() if line and (ROOT / line).is_file()]


def test_no_file_points_to_design_notes_outside_the_repository():
    offenders = []
    for path in _repository_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files
        for number, line in enumerate(text.splitlines(), 1):
            if POINTER.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "pointers to files that are not in the repository (use docs/...):\n" + "\n".join(offenders)


def test_the_pointer_pattern_is_live():
    assert POINTER.search("see " + "THEORY" + ".md, Trees") and POINTER.search("../" + "shared/x")
    assert not POINTER.search("see docs/theory.md")


@pytest.mark.parametrize("page", sorted([p.name for p in (ROOT / "docs").glob("*.md")]) + ["../README.md"])
def test_relative_links_resolve(page):
    source = (ROOT / "docs" / page).resolve()
    broken = []
    for target in LINK.findall(CODE.sub("", source.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        if not (source.parent / target).exists() and Path(target).name not in PENDING_PAGES:
            broken.append(target)
    assert not broken, f"{page}: broken links {broken}"


def test_every_built_in_method_is_documented():
    text = "".join((ROOT / "docs" / name).read_text(encoding="utf-8")
                   for name in ("algorithms.md", "verifiers_new.md") if (ROOT / "docs" / name).exists())
    missing = [name for name in methods.names() if f"`{name}`" not in text]
    assert not missing, f"methods without a section in docs/algorithms.md: {missing}"


def test_docs_say_what_check_does_not_prove():
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    assert "not a proof for all distributions" in testing.replace("\n", " ")
    assert "prove.md" in testing
