"""The grader's settings, read from the course's ``nbgrader_config.py``.

``autograder grade`` and ``nbgrader autograde`` read the same file, so they grade with the same
settings: workers, time and memory limits, where hidden checks live, the similarity report's
public code and threshold, and the gradebook. Set them there as ``c.Autograder.<name> = ...``;
the command line's options override them for one run. The course id and the gradebook come
from nbgrader's own ``c.CourseDirectory`` settings unless set here.
"""

from __future__ import annotations

import os
from pathlib import Path

from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Config, Configurable, PyFileConfigLoader

from autograder.reading.errors import GradingError

CONFIG_FILE = "nbgrader_config.py"


class Autograder(Configurable):
    """What ``c.Autograder`` may set in ``nbgrader_config.py``."""

    workers = Int(os.cpu_count() or 1, help="Submissions graded side by side, each in a warm sandbox.").tag(config=True)
    cell_timeout = Float(30.0, help="Seconds allowed to each cell and each check.").tag(config=True)
    total_timeout = Float(240.0, help="Seconds allowed to one submission in all.").tag(config=True)
    memory_bytes = Int(4 * 2**30, help="Address space of each process of a run (RLIMIT_AS).").tag(config=True)
    unsafe_no_sandbox = Bool(False, help="Run student code without bubblewrap: only where a container is "
                                         "itself the wall.").tag(config=True)
    checks_dir = Unicode("autograder/checks", help="The hidden checks' folder, relative to the course folder: "
                                                   "<checks_dir>/<assignment>.py.").tag(config=True)
    similarity_corpus = Unicode("autograder/similarity_corpus", help="Known public implementations of the "
                                "answers, relative to the course folder: <similarity_corpus>/<assignment>/<answer "
                                "cell's grade_id>/*.py. The similarity report compares every answer with "
                                "them.").tag(config=True)
    similarity_threshold = Float(0.5, help="The similarity from which the similarity report lists a pair of answers: "
                                           "the share of their fingerprints they have in common, 0 to 1."
                                 ).tag(config=True)
    course_id = Unicode("", help="The gradebook's course id (default: c.CourseDirectory.course_id).").tag(config=True)
    db_url = Unicode("", help="The gradebook (default: c.CourseDirectory.db_url, else gradebook.db in the "
                              "course folder).").tag(config=True)


def read_config(root: Path) -> Config:
    """The course's configuration (``nbgrader_config.py`` in ``root``)."""
    if not (root / CONFIG_FILE).is_file():
        raise GradingError(f"{root} is not a course folder: it has no {CONFIG_FILE}. Run the command from the course "
                           f"folder, or pass --course DIR.")
    return PyFileConfigLoader(CONFIG_FILE, path=str(root)).load_config()


def load_settings(root: Path, config: Config | None = None, **overrides) -> Autograder:
    """The settings of the course in ``root``: its configuration (or ``config``, where nbgrader
    has loaded it already), then ``overrides`` that are not None (command-line options)."""
    config = read_config(root) if config is None else config
    settings = Autograder(config=config)
    for name, value in overrides.items():
        if value is not None:
            setattr(settings, name, value)
    if not settings.course_id:
        settings.course_id = config.CourseDirectory.get("course_id", "") or "course"
    if not settings.db_url:
        settings.db_url = config.CourseDirectory.get("db_url", "") or f"sqlite:///{root / 'gradebook.db'}"
    return settings
