"""Sphinx's settings for the course's documentation: Markdown pages read by MyST.

Built by `make docs` into docs/_build/html, and by `make test` (tests/test_docs.py) with warnings
as errors, so that a link between pages that does not resolve fails the build.
"""

project = "Self-attention in PyTorch"
author = "the course's instructors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# The grading service's lines for the Hub are a file of their own, which the tests start a Hub with;
# the pages show them, and Sphinx need not read it.
exclude_patterns = ["_build", "jupyterhub_config.py"]

# Every heading down to ### gets an anchor, so that [text](page.md#a-heading) is checked too.
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = project
# Room for the folder trees of "What is here" without a scroll bar on a wide screen.
html_theme_options = {"page_width": "1300px"}
