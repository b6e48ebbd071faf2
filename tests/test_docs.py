"""The user documentation stands alone: nothing points outside the repository, docs/ links resolve,
every built-in method is documented, the README stays a short first page whose test command is the
one CI runs, and every results file is listed, cited and present."""

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
PENDING_PAGES = {"prove.md", "engine.md", "ems_sd.md", "multi_draft_verifiers.md"}

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


@pytest.mark.parametrize("page", sorted([p.name for p in (ROOT / "docs").glob("*.md")])
                         + ["../README.md", "../benchmarks/results/README.md"])
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
                   for name in ("algorithms.md", "multi_draft_verifiers.md") if (ROOT / "docs" / name).exists())
    missing = [name for name in methods.names() if f"`{name}`" not in text]
    assert not missing, f"methods without a section in docs/algorithms.md: {missing}"


def test_docs_say_what_check_does_not_prove():
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    assert "not a proof for all distributions" in testing.replace("\n", " ")
    assert "prove.md" in testing


RESULTS = ROOT / "benchmarks" / "results"
README_MAX_LINES = 200
#: A results path cited in prose; templates such as bench_real_<device>.json do not match.
CITED_RESULT = re.compile(r"benchmarks/results/([A-Za-z0-9_.-]+\.(?:json|png|md))")
RESULT_NAME = re.compile(r"[A-Za-z0-9_.-]+\.(?:json|png)")


def _user_docs() -> str:
    """README.md and docs/*.md, the pages a user reads."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def _results_files():
    """Every results file but the folder's README (a plot counts: it is named, not implied by its JSON)."""
    return sorted(path.name for path in RESULTS.iterdir() if path.is_file() and path.name != "README.md")


def _named(name: str, text: str) -> bool:
    return bool(re.search(r"(?<![A-Za-z0-9_])" + re.escape(name), text))


def test_readme_is_a_short_first_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).splitlines()
    assert block[0].startswith("python3 -m pip install -e . && verispec ")
    test_command = block[1].split("   #", 1)[0].strip()
    assert test_command.endswith("python3 -m pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in [line.strip() for line in ci]


def test_every_results_file_is_listed_and_cited():
    listing = (RESULTS / "README.md").read_text(encoding="utf-8")
    docs = _user_docs()
    unlisted = [name for name in _results_files() if not _named(name, listing)]
    uncited = [name for name in _results_files() if not _named(name, docs)]
    assert not unlisted, f"not in benchmarks/results/README.md: {unlisted}"
    assert not uncited, f"cited by no page of README.md or docs/ (cite it or remove it): {uncited}"


def test_every_cited_results_path_exists():
    missing = sorted({name for name in CITED_RESULT.findall(_user_docs()) if not (RESULTS / name).is_file()})
    assert not missing, f"README.md or docs/ cite results files that do not exist: {missing}"


def test_the_results_listing_names_only_existing_files():
    listing = (RESULTS / "README.md").read_text(encoding="utf-8")
    missing = sorted({name for name in RESULT_NAME.findall(listing) if not (RESULTS / name).is_file()})
    assert not missing, f"benchmarks/results/README.md lists files that do not exist: {missing}"


def test_the_results_checks_are_live():
    assert _named("x_y.png", "see `benchmarks/results/x_y.png`")
    assert not _named("x_y.png", "see `benchmarks/results/x_y.json` and `.png`")  # a plot is cited by its name
    assert not _named("x_y.json", "see x_y_z.json") and not _named("y.json", "x_y.json")
    assert CITED_RESULT.findall("`benchmarks/results/a_b.json`, benchmarks/results/bench_<device>.json") == ["a_b.json"]
