"""The documentation: a short README that points into docs/, a site that Sphinx builds from MyST
Markdown with warnings as errors, so that a link between its pages that does not resolve fails
the build (and so `make test`)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_MOST_LINES = 200
BUILD_S = 120


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    """``sphinx-build -W --keep-going -b html`` of ``source`` into ``out``, as `make docs` runs it."""
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(source), str(out)], capture_output=True, text=True, timeout=BUILD_S)


def copy_of_docs(tmp_path: Path) -> Path:
    copy = tmp_path / "docs"
    shutil.copytree(DOCS, copy, ignore=shutil.ignore_patterns("_build"))
    return copy


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    built = build(DOCS, tmp_path / "html")
    assert built.returncode == 0, f"the documentation does not build:\n{built.stdout[-3000:]}{built.stderr[-3000:]}"
    pages = {path.stem for path in DOCS.glob("*.md")}
    assert pages <= {path.stem for path in (tmp_path / "html").glob("*.html")}, "a page was not built"
    for name in ("threat-model", "grading", "service", "containers", "benchmarks", "adding-an-assignment",
                 "student-kit", "layout"):
        assert name in pages, f"docs/{name}.md is missing"


def test_a_broken_link_between_pages_fails_the_build(tmp_path):
    """The check can fail: a link to a page that does not exist, and one to a heading a page does not
    have, each make the build fail and are named."""
    for link, named in (("[gone](no-such-page.md)", "no-such-page.md"),
                        ("[gone](grading.md#no-such-heading)", "no-such-heading")):
        docs = copy_of_docs(tmp_path / named)
        with (docs / "index.md").open("a") as index:
            index.write(f"\nA link that goes nowhere: {link}.\n")
        built = build(docs, tmp_path / named / "html")
        assert built.returncode != 0, f"a broken link ({link}) built without an error"
        assert named in built.stderr, built.stderr[-3000:]


def test_the_readme_is_short_and_its_links_lead_to_files():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines, more than {README_MOST_LINES}"
    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    relative = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    assert relative, "the README links to no page of docs/"
    missing = [t for t in relative if not (REPO / t.split("#", 1)[0]).exists()]
    assert not missing, f"the README links to files that do not exist: {missing}"
    pages = {path.relative_to(REPO).as_posix() for path in DOCS.glob("*.md") if path.name != "index.md"}
    unlinked = pages - {t.split("#", 1)[0] for t in relative}
    assert not unlinked, f"the README links to no {sorted(unlinked)}"
