"""Student-written text made inert before nbgrader, or a spreadsheet, shows it.

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
STORABLE = {"encoding": "utf-8", "errors": "backslashreplace"}
"""How pages, spreadsheets and logs made of student text are written: as UTF-8, with a backslash escape for a
character no file can hold (a student id is a folder's name, whose bytes Python reads as lone surrogates where
they are not UTF-8), so that such a name costs a character of the class's page, not the page."""


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


def markdown_html(source: str) -> str:
    """Markdown as HTML for a page of the grader's own (the TAs' grading guide): rendered and
    cleaned as :func:`safe_markdown` renders and cleans it, LaTeX left as text for MathJax."""
    html = MarkdownWithMath(renderer=_Renderer(escape=False)).render(source)
    return nh3.clean(html, url_schemes=URL_SCHEMES, link_rel=None)


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


INERT_MIME = ("image/png", "image/jpeg", "text/plain")
"""What of a rich output can be shown without running anything: images and text."""
MAX_OUTPUT_CHARS = 4 * 2**20


def _text(value) -> str | None:
    """A notebook's multiline string (a string or a list of strings), or None if it is neither."""
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        value = "".join(value)
    return value[:MAX_OUTPUT_CHARS] if isinstance(value, str) else None


def inert_outputs(outputs) -> list[dict]:
    """A demonstration cell's outputs with nothing active in them, for the TA who grades by hand:
    printed text, errors as text, and of displayed results only images (PNG, JPEG) and plain
    text. HTML, JavaScript, SVG, widgets and anything malformed are left out."""
    kept = []
    for output in outputs if isinstance(outputs, list) else []:
        kind = output.get("output_type") if isinstance(output, dict) else None
        if kind == "stream" and _text(output.get("text")) is not None:
            name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
            kept.append({"output_type": "stream", "name": name, "text": _text(output["text"])})
        elif kind == "error":
            text = f"{_text(output.get('ename')) or 'Error'}: {_text(output.get('evalue')) or ''}\n"
            kept.append({"output_type": "stream", "name": "stderr", "text": text})
        elif kind in ("display_data", "execute_result") and isinstance(output.get("data"), dict):
            data = {mime: _text(value) for mime, value in output["data"].items()
                    if mime in INERT_MIME and _text(value) is not None}
            if data:
                kept.append({"output_type": "display_data", "data": data, "metadata": {}})
    return kept


def spreadsheet_safe(text: str) -> str:
    """A cell that a spreadsheet opening the export will not run as a formula (a folder name
    such as ``=HYPERLINK(...)`` would otherwise be one)."""
    return "'" + text if text.startswith(("=", "+", "-", "@", "\t", "\r")) else text
