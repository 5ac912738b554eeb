"""Student-written markdown made inert (`autograder.reading.sanitize`), judged by what nbgrader shows:
the HTML that nbconvert's markdown renderer (formgrader's and the feedback's) makes of it."""

from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from autograder.reading.sanitize import neutralize_student_markdown, safe_markdown

ACTIVE_TAGS = {"script", "style", "iframe", "frame", "object", "embed", "form", "input", "button", "link", "meta",
               "base", "svg", "math"}


class Rendered(HTMLParser):
    """The tags, ``(tag, attribute, value)`` triples and text of markdown as nbgrader renders it."""

    def __init__(self, markdown):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []
        self.feed(markdown2html_mistune(markdown))

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, name, value or "") for name, value in attrs]

    def handle_data(self, data):
        self.text.append(data)

    def active(self):
        """What could run or load something: active tags, handlers, styles, addresses with other schemes."""
        return ([t for t in self.tags if t in ACTIVE_TAGS]
                + [a for a in self.attrs if a[1].startswith("on") or a[1] == "style"]
                + [a for a in self.attrs if a[1] in ("href", "src", "action", "formaction")
                   and urlsplit(a[2]).scheme.lower() not in ("", "http", "https", "mailto")])


HOSTILE = {
    "script": "<script>alert('owned')</script>",
    "onerror": "<img src=x onerror=\"alert('owned')\">",
    "svg onload": "<svg onload=alert(1)><circle/></svg>",
    "javascript link": "[x](javascript:alert(1))",
    "javascript link, entity": "[x](java&#115;cript:alert(1))",
    "javascript link, backslash": "[x](javascript\\:alert(1))",
    "javascript reference": "[x][r]\n\n[r]: javascript:alert(1)",
    "javascript html link": "<a href=\"javascript:alert(1)\">x</a>",
    "data link": "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "data image": "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "iframe": "<iframe src=\"https://evil.example/\"></iframe>",
    "form": "<form action=\"https://evil.example/\"><input name=q><button>go</button></form>",
    "style tag": "<style>@import url(https://evil.example/x.css);</style>",
    "style attribute": "<p style=\"background: url(https://evil.example/x.png)\">text</p>",
    "mermaid block": "```mermaid\n</pre><script>alert(1)</script>\n```",
}


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE.keys())
def test_active_content_does_not_survive(source):
    rendered = Rendered(safe_markdown(source))
    assert not rendered.active(), rendered.active()
    assert "alert" not in "".join(value for _, _, value in rendered.attrs)


KEPT = {
    "plain text": "Each row of the weights sums to one, so a context vector is an average.\n\n- rows\n- columns\n",
    "latex": "Scaling by $1/\\sqrt{d_k}$ keeps $x^2$ small:\n\n$$\\mathrm{softmax}(QK^T/\\sqrt{d_k})V$$\n",
    "https link": "See [the paper](https://arxiv.org/abs/1706.03762) or <https://example.com>.",
    "mailto link": "Questions to [the TA](mailto:ta@example.com).",
    "grader message": "[failed] 0/1 points. Expected a < b, got <function f at 0x7f> and tensor([[1., 2.]])",
}


@pytest.mark.parametrize("source", KEPT.values(), ids=KEPT.keys())
def test_ordinary_text_latex_and_links_stay_as_written(source):
    assert safe_markdown(source) == source


def test_text_latex_and_links_survive_beside_hostile_content():
    source = ("The mask hides the future: $A_{ij} = -\\infty$ for $j > i$.\n\n"
              "<script>alert('owned')</script><img src=x onerror=alert(1)>\n\n"
              "[bad](javascript:alert(1)) and [good](https://example.com/a?b=1&c=2)\n")
    rendered = Rendered(safe_markdown(source))
    assert not rendered.active()
    text = "".join(rendered.text)
    assert "The mask hides the future: $A_{ij} = -\\infty$ for $j > i$." in text and "bad" in text and "good" in text
    assert ("a", "href", "https://example.com/a?b=1&c=2") in rendered.attrs


def test_only_cells_the_student_wrote_or_changed_are_cleaned():
    release = [{"cell_type": "markdown", "source": ["Released <b>question</b>"]}]
    cells = [{"cell_type": "markdown", "source": ["Released <b>question</b>"]},
             {"cell_type": "markdown", "source": "Answer <script>alert(1)</script>",
              "attachments": {"a.png": {"image/png": "AA=="}}},
             {"cell_type": "code", "source": "x = '<script>'", "outputs": []}]
    neutralize_student_markdown(cells, release)
    assert cells[0]["source"] == ["Released <b>question</b>"]
    assert "attachments" not in cells[1] and not Rendered(cells[1]["source"]).active()
    assert "Answer" in "".join(Rendered(cells[1]["source"]).text)
    assert cells[2]["source"] == "x = '<script>'"
