"""*Check with the grader*: JupyterLab sends the notebook a student works on to the grading service.

Two small pieces, with no JavaScript to build:

- an nbconvert exporter, ``check_with_grader`` (an entry point of ``nbconvert.exporters``), so
  that JupyterLab lists it under File > Save and Export Notebook As (as *Check_with_grader*) and
  a toolbar button can name it (see docs/service.md); JupyterLab saves the notebook, then opens
  ``nbconvert/check_with_grader/<path>`` of the student's own Jupyter server in a new tab;
- a Jupyter server extension (enabled by ``jupyter-config/transformer_lm.json``, which installing
  the package puts in place) whose handler answers that address: it sends the saved notebook to
  the course's grading service (``autograder serve``) as the student, with the server's JupyterHub
  token, and redirects the tab to the check's page, which shows the result as it comes. (Left to
  nbconvert, the page would arrive as a download.)

The service's address, as the student's server reaches it, is in the environment variable
``COURSE_CHECK_URL`` (the Hub's ``c.Spawner.environment``; see docs/service.md). Nothing here grades:
the hidden checks run only in the service.
"""

from __future__ import annotations

import html
import json
import os
import urllib.error
import urllib.request

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from nbconvert.exporters import Exporter
from tornado import web

SERVICE_URL = "COURSE_CHECK_URL"
FORMAT = "check_with_grader"
TIMEOUT_S = 30
NOT_CONNECTED = ("Your course has not connected this Jupyter to its grading service, so this button cannot check "
                 "your notebook here. Your notebook is saved and nothing was sent. Run the test cell under each "
                 "answer instead: each one checks that answer and names the likely mistake. If your course says "
                 "this button should work, tell your instructor or TA that the Check with the grader button says "
                 "it is not connected.")
"""What a student reads when the button is pressed where no grading service is connected (on their
own machine, say): in their words, with nothing of how a server is configured."""


class CheckExporter(Exporter):
    """Sends the notebook to the grading service; its "output" is a page about the check."""

    export_from_notebook = "Check with the grader"
    output_mimetype = "text/html"

    def _file_extension_default(self):
        return ".html"

    def from_notebook_node(self, nb, resources=None, **kw):
        nb_copy, resources = super().from_notebook_node(nb, resources, **kw)
        filename = resources.get("metadata", {}).get("name", "notebook") + ".ipynb"
        return answer_page(send(nb_copy, filename), filename), resources


class CheckHandler(JupyterHandler):
    """``GET nbconvert/check_with_grader/<path>``: sends the saved notebook, then shows its check."""

    @web.authenticated
    async def get(self, path: str) -> None:
        self.check_xsrf_cookie()  # as nbconvert's own handler: no other site may spend a student's checks
        model = await self.contents_manager.get(path=path.strip("/"), content=True, type="notebook")
        answer = send(model["content"], model["name"])
        if answer.get("url"):
            return self.redirect(answer["url"])
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(answer_page(answer, model["name"]))


def _jupyter_server_extension_points():
    return [{"module": "transformer_lm.grader_check"}]


def _load_jupyter_server_extension(server_app) -> None:
    web_app = server_app.web_app
    pattern = url_path_join(web_app.settings["base_url"], rf"nbconvert/{FORMAT}/(.+\.ipynb)")
    web_app.add_handlers(".*$", [(pattern, CheckHandler)])  # ahead of nbconvert's own handler


def send(notebook, filename: str) -> dict:
    """Sends ``notebook``; returns the service's answer (with the check's ``url`` when it was
    recorded), or ``{"title", "message"}`` when it never reached the service."""
    base, token = os.environ.get(SERVICE_URL), os.environ.get("JUPYTERHUB_API_TOKEN")
    if not base or not token:
        return {"title": "Checks are not set up here", "message": NOT_CONNECTED}
    body = json.dumps({"filename": filename, "notebook": notebook}).encode()
    request = urllib.request.Request(base.rstrip("/") + "/api/requests", data=body, method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            return json.loads(error.read())
        except ValueError:
            return {"message": f"The grading service answered {error.code} {error.reason}."}
    except (OSError, ValueError) as error:
        return {"title": "The grading service did not answer",
                "message": f"Your notebook is saved, but the grading service did not answer ({error}). Try again "
                           "in a minute; if it goes on, tell your instructor."}


def answer_page(answer: dict, filename: str) -> str:
    """A page about a check: a link to its result, or why there is none."""
    if answer.get("url"):
        url = html.escape(answer["url"], quote=True)
        return page("Checking your notebook", f"Sent {filename} to the grader.",
                    head=f'<meta http-equiv="refresh" content="0; url={url}">',
                    link=f'<p><a href="{url}">See the check of {html.escape(filename)}</a></p>')
    return page(answer.get("title", "The check was not sent"), str(answer.get("message") or answer))


def page(title: str, text: str, head: str = "", link: str = "") -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8">{head}<title>{html.escape(title)}</title></head>'
            f'<body style="font-family: system-ui, sans-serif; max-width: 50rem; margin: 2rem auto">'
            f'<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{link}</body></html>')
