# The grading service's lines of jupyterhub_config.py (docs/service.md, "Checks before the deadline").
# Add them to the Hub's own configuration; set the three names below to your course.
COURSE = "/srv/course"                            # the course folder: nbgrader_config.py, release/, hidden checks
AUTOGRADER = "/srv/course/.venv/bin/autograder"   # the autograder command of the course's environment
SERVICE_PORT = 10101                              # a free port on the Hub's machine

c = get_config()  # noqa: F821 - injected by JupyterHub

# The service: started (and restarted, should it die) by the Hub, which tells it where to listen.
c.JupyterHub.services = [{
    "name": "autograder",
    "url": f"http://127.0.0.1:{SERVICE_PORT}",
    "command": [AUTOGRADER, "serve", "--course", COURSE],
    "cwd": COURSE,
    "oauth_no_confirm": True,
}]
# Students may use the service, in the browser and from their own JupyterLab server, whose
# token sends the notebook ("Check with the grader").
c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "access:services!service=autograder"]}]
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "access:services!service=autograder"]
c.Spawner.environment.update({"COURSE_CHECK_URL": f"http://127.0.0.1:{SERVICE_PORT}/services/autograder/"})
