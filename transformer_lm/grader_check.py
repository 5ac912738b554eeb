"""*Check with the grader*, in JupyterLab's menu File > Save and Export Notebook As.

An nbconvert exporter (the entry point ``check_with_grader`` of ``nbconvert.exporters``).
JupyterLab saves the notebook, then asks the student's own Jupyter server to export it in a new
tab; this exporter sends the notebook to the course's grading service (``autograder serve``) as
the student, with the server's JupyterHub token, and answers with a page that takes the student
to the check's result, which the service's page shows as it comes.

The service's address, as the student's server reaches it, is in the environment variable
``COURSE_CHECK_URL`` (the Hub's ``c.Spawner.environment``; see the README). Nothing here grades:
the hidden checks run only in the service.
"""

from __future__ import annotations

import html
import json
import os
import urllib.error
import urllib.request

from nbconvert.exporters import Exporter

SERVICE_URL = "COURSE_CHECK_URL"
TIMEOUT_S = 30


class CheckExporter(Exporter):
    """Sends the notebook to the grading service; its "output" is a page about the check."""

    export_from_notebook = "Check with the grader"
    output_mimetype = "text/html"

    def _file_extension_default(self):
        return ".html"

    def from_notebook_node(self, nb, resources=None, **kw):
        nb_copy, resources = super().from_notebook_node(nb, resources, **kw)
        filename = resources.get("metadata", {}).get("name", "notebook") + ".ipynb"
        return send(nb_copy, filename), resources


def send(notebook, filename: str) -> str:
    """Sends ``notebook`` and returns the page the student sees next."""
    base, token = os.environ.get(SERVICE_URL), os.environ.get("JUPYTERHUB_API_TOKEN")
    if not base or not token:
        return page("Checks are not set up here",
                    f"This Jupyter server is not connected to the course's grading service ({SERVICE_URL} or "
                    "JUPYTERHUB_API_TOKEN is not set). Ask your instructor; meanwhile, run the visible checks in "
                    "the notebook.")
    body = json.dumps({"filename": filename, "notebook": notebook}).encode()
    request = urllib.request.Request(base.rstrip("/") + "/api/requests", data=body, method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            answer = json.loads(error.read())
        except ValueError:
            answer = {"message": f"The grading service answered {error.code} {error.reason}."}
    except (OSError, ValueError) as error:
        return page("The grading service did not answer",
                    f"Your notebook is saved, but the grading service did not answer ({error}). Try again in a "
                    "minute; if it goes on, tell your instructor.")
    if answer.get("url"):
        url = html.escape(answer["url"], quote=True)
        return page("Checking your notebook", f"Sent {filename} to the grader.",
                    head=f'<meta http-equiv="refresh" content="0; url={url}">',
                    link=f'<p><a href="{url}">See the check of {html.escape(filename)}</a></p>')
    return page("The check was not sent", str(answer.get("message") or answer))


def page(title: str, text: str, head: str = "", link: str = "") -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8">{head}<title>{html.escape(title)}</title></head>'
            f'<body style="font-family: system-ui, sans-serif; max-width: 50rem; margin: 2rem auto">'
            f'<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{link}</body></html>')
