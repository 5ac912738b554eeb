"""Student-written text made inert before nbgrader shows it.

nbgrader's formgrader and feedback pages turn markdown cells and grade comments into HTML
with nbconvert's renderer and no sanitizer, and that renderer lets through raw HTML, any
link address (also ``java&#115;cript:`` or ``javascript\\:``) and the body of a ``mermaid``
code block. So the text is rendered here with that same renderer and the HTML is cleaned
by nh3 (ammonia, an allow-list sanitizer): no script, style, event handler, frame, form or
object, and links and images only to http(s), mailto or relative addresses. Text that the
cleaner finds nothing to remove from stays as written (markdown, LaTeX and links as the
student wrote them); other text is replaced by its cleaned rendering.
"""

from __future__ import annotations

import nh3
from mistune import HTMLRenderer
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

URL_SCHEMES = {"http", "https", "mailto"}


class _Renderer(IPythonRenderer):
    """nbconvert's renderer, except that an image address stays as written, ``attachment:``
    ones included: a student's attachments are dropped, and the cleaner judges the address."""

    def image(self, text: str, url: str, title: str | None = None) -> str:
        return HTMLRenderer.image(self, text, url, title)


def safe_markdown(source: str) -> str:
    """Markdown whose rendering by nbgrader holds no active content.

    If the cleaner leaves the rendering as it is, byte for byte, nbgrader renders the source
    to HTML the cleaner has passed, so it is kept. Otherwise the cleaned HTML takes its place,
    on one line in a ``<div>``: markdown passes an HTML block through untouched up to a blank
    line, and a newline is the same character to HTML written as ``&#10;``. LaTeX is left as
    text either way, for MathJax to typeset. No ``rel`` is added to links, so an ordinary
    link leaves the rendering unchanged.
    """
    html = MarkdownWithMath(renderer=_Renderer(escape=False)).render(source)
    cleaned = nh3.clean(html, url_schemes=URL_SCHEMES, link_rel=None)
    if cleaned == html:
        return source
    return "<div>" + cleaned.translate({ord("\n"): "&#10;", ord("\r"): "&#13;"}) + "</div>"


def neutralize_student_markdown(cells: list[dict], release_cells: list[dict]) -> None:
    """Applies :func:`safe_markdown` to every markdown cell that is not a release cell as
    released (so the student wrote or changed it), and drops its attachments."""
    released = {"".join(c["source"]) if isinstance(c.get("source"), list) else c.get("source", "")
                for c in release_cells if c.get("cell_type") == "markdown"}
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        source = "".join(cell["source"]) if isinstance(cell.get("source"), list) else cell.get("source", "")
        if source not in released:
            cell["source"] = safe_markdown(source)
            cell.pop("attachments", None)
