"""The closed catalogue of what a student is told about a hidden run: every text of an item told in
words before the deadline, and every probe's message, then and after.

A hidden run's process is the student's: whatever it reports about itself (an event's name, a
probe's error text, a reason for tampering) could carry a hidden input out, word for word. So a
result's text reaches a student only when it is one of these templates, its slots filled with
values of their kind, checked here, on the trusted side:

* ``number``: a number, as the grader writes it (``12``, ``0.5``, ``4``);
* ``names``: names of the course's own (items, answers, the library calls an item forbids), one
  or several (``a, b and c``, ``a or b``), each in the set the caller gives;
* ``item``: one of those names alone;
* ``mistake``: a title of the catalogue of mistakes (:mod:`transformer_lm.catalog`);
* ``type``: a type of Python's or torch's own, in :func:`transformer_lm.sandboxed.student_objects.kind_of`'s
  words;
* ``shape``: a tensor's shape, ``(2, 3)``.

A run's death, or its stop as tampered, may be told after :data:`IN_ANSWER_CELL` (the cell died,
and with it the checks of its answer), or before :data:`BEFORE_RUN`. A text that is none of these is not shown: the student gets the status's own sentence
instead, and the full text stays with the instructor (the feedback pages and the gradebook).
The grader makes these texts from here (:func:`render` of :data:`DEATH` and :data:`OUTCOME`), so a
text it writes and the catalogue's cannot drift apart.
"""

from __future__ import annotations

import builtins
import functools
import re
from collections.abc import Iterable

from autograder.reading.results import NOT_WRITTEN
from transformer_lm import catalog
from transformer_lm.forbidding import forbidden_name, runtime_names
from transformer_lm.judging import is_builtin_exception
from transformer_lm.verdict_texts import SLOT, render  # noqa: F401 - the grader renders its texts from here
from transformer_lm.sandboxed.student_objects import KINDS

NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"

SHAPE = r"\((?:\d+,|\d+(?:, \d+)+)?\)"
TYPES = "|".join(sorted((re.escape(kind) for kind in KINDS), key=len, reverse=True))
EXCEPTIONS = "|".join(sorted((name for name in dir(builtins) if is_builtin_exception(name)), key=len, reverse=True))
OWN_LINE = 200
"""The most characters of a line of the student's own cell that a text quotes."""


def own_line(line: str) -> str:
    """A line of the student's own cell, as an ``own`` slot holds it: what the student wrote, never
    what a run made, so any text; cut short."""
    return line.strip()[:OWN_LINE]


DEATH = {
    "too_long": "It ran for more than {seconds:number} s and was stopped (an endless loop, or far too slow).",
    "memory": "Its processes held more than {gib:number} GiB of memory together, and it was stopped.",
    "lost": "The process was killed, and the grading process with it.",
    "crashed": "The process crashed (a fault in native code, such as a segmentation fault or an abort).",
    "killed": "The process was killed by a signal (out of memory, or a signal sent to it).",
    "exited": "The process exited before finishing, e.g. by os._exit or sys.exit.",
    "out_of_time": "The notebook used up its total time before this check ran.",
    "out_of_attempts": "The notebook's runs ended early {attempts:number} times, each time in another cell or check, "
                       "and the grader ran it no more: this check was not reached.",
}
DEATHS = tuple(DEATH.values())
"""How a run that did not finish ended, in fixed words: the signal that ended it and its exit code
are the run's to choose (``os.kill(os.getpid(), 34 + T % 30)`` would show a hidden size), so neither
is ever told (:func:`autograder.running.run_reply.death`,
:mod:`autograder.running.runner`)."""

TAMPERING = (
    "its report did not follow the grader's plan",
    "the run's own code tried to change how it is checked",
    "the run's own code closed or replaced the grader's report channel",
)
"""Why the grader stopped a run as tampered, as a student is told it (the instructor gets the details)."""

OUTCOME = {
    "passed": "All hidden checks passed.",
    "passed_on_course_code": "All hidden checks passed, run on the course's {stand_ins:names} in place of yours, "
                             "because {below:names} did not pass and lost its points there (one mistake costs points "
                             "once).",
    "charged_once": "All else is right: this item fails only by the mistake charged in {item:item} "
                    "({mistake:mistake}), and one mistake costs points once.",
    "no_cell": "The answer cell was missing from the notebook.",
    "no_notebook": "No notebook was submitted for this part of the assignment.",
    "forbidden_text": "The answer uses {calls:names}, the library version of what this exercise asks you to write "
                      "yourself.",
    "passed_unsure": "All hidden checks passed. Line {line:number} of the answer may reach {calls:names} "
                     "through a name the grader could not resolve before the run; it did not run while the answer "
                     "was checked, so nothing was taken for it.",
    "forbidden_ran": "While it was checked, the answer ran {calls:names}, the library version of what this exercise "
                     "asks you to write yourself (the grader sees the operations that run, whatever name reached "
                     "them).",
    "forbidden_absent": "While it was checked, the answer called the library version of what this exercise asks you "
                        "to write yourself ({calls:names}, which is not available while the item is graded).",
    "forbidden_earlier": "It calls an earlier answer that calls the library version of what that exercise asks you to "
                         "write, which is absent while this item is graded.",
    "stopped": "The grader stopped the run: {why:reason}.",
    "not_written": f"{NOT_WRITTEN}: the answer still raises NotImplementedError.",
}
IN_ANSWER_CELL = "Your answer cell: "
"""Put before a death's or a stop's text when an answer cell died, and with it the checks of its answer."""
BEFORE_RUN = " (before the notebook ran)"
"""Put after a death's or a stop's text when the run died before its first cell."""

OUTCOMES = (*OUTCOME.values(), *DEATHS)
"""Every whole text of an item whose status a student sees in words (passed, missing, forbidden,
tampered, timeout, killed)."""

PROBES = (
    "forward returned {count:number} values, expected the output (and the weights)",
    "the output is not connected to the inputs by autograd (was it detached, or built with torch.no_grad or numpy?)",
    "The module has no method load_from_torch",
    "The function returned {kind:type}, expected an nn.Module",
    "The function returned {count:number} value(s); expected {parts:number}: {names:names}",
    "Its apply returned no tensor that autograd can differentiate",
    "The object given is not a subclass of torch.autograd.Function",
    "The function returned {kind:type}; expected a number or a tensor",
    "The function returned {kind:type}; expected a list with one list of token ids per prompt",
    "every row of the result must be a list of token ids (ints)",
    "expected a torch.Tensor, got {kind:type}",
    "The module has no parameter {names:names}; name its parameters as the task says.",
    "The module's parameter {name:item} has shape {got:shape}, expected {expected:shape}.",
    "The class built {kind:type}, not an nn.Module",
    "{name:item} is not defined: its cell did not run, or the name was changed.",
)
"""What a probe (:mod:`transformer_lm.sandboxed.probes`) says when it cannot call a student's object
as the task asks; its names are those of the run's plan (the objects it calls, the tensors it loads)."""
PROBE_FALLBACK = "The check could not call your code as the task asks (see the visible checks)."

ERRORS = {
    "cell_failed": "Your answer cell failed: ",
    "uncompared": "The result could not be compared with the reference's: it is not what the check reads.",
    "cell_error": "{exception:exception}",
    "syntax_error": "{exception:exception}: {message:parser}",
    "other_error": "an exception",
    "error_line": " (line {line:number} of its cell: {code:own})",
    "no_record": "the probe said it saved a record, but there is none",
    "record_too_large": "the output is far larger than the task asks for",
    "unreadable_record": "the record could not be read (not a safetensors file of tensors of numbers)",
}
"""What the feedback pages say of an error (a cell's, a probe's or a check's): the name of one of
Python's own exceptions, at most, and the line of the student's own cell it was raised on; for an
answer cell that does not compile, the compiler's own message too, from compiling the submitted
cell on the trusted side (:mod:`autograder.reading.syntax`)."""

ON_COURSE_CODE = "With the course's {stand_ins:names} in place of yours: "
"""Put before the text of an item judged on the course's code in place of the answers it builds on."""

HIDDEN = {
    "differs": "A hidden check found results that differ from the reference's.",
    "raised": "Your code raised {exception:exception} on a hidden check. Run the visible checks to see it happen.",
    "error": "Your code failed on a hidden check. Run the visible checks to see it happen.",
}
"""What a student is told before the deadline of a failure or an error, whose full text names the
hidden inputs (the feedback pages give it after grading): what kind of problem it was, and at most
the name of one of Python's own exceptions."""

STATUS_SENTENCES = {
    "passed": OUTCOME["passed"],
    "missing": OUTCOME["no_cell"],
    "forbidden": "The answer used the library version of what this exercise asks you to write yourself.",
    "tampered": render(OUTCOME["stopped"], why=TAMPERING[0]),
    "timeout": "It ran for too long and was stopped (an endless loop, or far too slow).",
    "killed": "The process was killed.",
}
"""What a student is told of an item of a status whose text is not in the catalogue."""


def _names(names: Iterable[str]) -> str:
    one = "|".join(sorted((re.escape(n) for n in set(names) if n), key=len, reverse=True)) or "(?!)"
    return rf"(?:{one})(?:(?:, | and | or )(?:{one}))*"


def slot_kinds(names: Iterable[str]) -> dict[str, str]:
    """What a slot of each kind may hold, as a pattern, with ``names`` the names allowed."""
    names = _names(names)
    mistakes = "|".join(sorted((re.escape(m.title) for m in catalog.BY_NAME.values()), key=len, reverse=True))
    return {"number": NUMBER, "names": names, "item": names, "mistake": mistakes, "shape": SHAPE,
            "type": TYPES, "exception": EXCEPTIONS, "reason": "|".join(re.escape(why) for why in TAMPERING)}


def template_pattern(template: str, kinds: dict[str, str]) -> str:
    """``template`` as a pattern: its text as it is, each slot matching what ``kinds`` says of its kind."""
    parts, end = [], 0
    for slot in SLOT.finditer(template):
        parts += [re.escape(template[end:slot.start()]), f"(?:{kinds[slot.group(2)]})"]
        end = slot.end()
    return "".join(parts) + re.escape(template[end:])


def _alternatives(texts: Iterable[str], names: Iterable[str]) -> str:
    """``texts`` as one pattern, each slot matching what its kind allows, with ``names`` the names allowed."""
    kinds = slot_kinds(names)
    return "|".join(template_pattern(text, kinds) for text in texts)


def grammar(names: Iterable[str]) -> re.Pattern:
    """The catalogue's texts, with ``names`` the course's own names (items, answers, stand-ins,
    forbidden calls); made once for each set of names (and of catalogued mistakes)."""
    return _grammar(frozenset(names), frozenset(catalog.BY_NAME))


@functools.lru_cache(maxsize=32)
def _grammar(names: frozenset[str], _mistakes: frozenset[str]) -> re.Pattern:
    whole = _alternatives([*(text for key, text in OUTCOME.items() if key not in ("stopped", "not_written")),
                           *STATUS_SENTENCES.values()], names)
    stops = _alternatives((*DEATHS, OUTCOME["stopped"]), names)
    hidden = _alternatives((OUTCOME["not_written"], *HIDDEN.values()), names)
    return re.compile(rf"{whole}|(?:{re.escape(IN_ANSWER_CELL)})?(?:{stops})(?:{re.escape(BEFORE_RUN)})?"
                      rf"|(?:{_on_course_code(names).pattern})?(?:{hidden})", re.S)


@functools.lru_cache(maxsize=32)
def _on_course_code(names: frozenset[str]) -> re.Pattern:
    return re.compile(_alternatives([ON_COURSE_CODE], names))


def course_names(assignment) -> set[str]:
    """The names of an assignment (:class:`autograder.reading.assignment.Assignment`) that a catalogue text
    may give: its items and answers, the library calls they forbid, the course's stand-ins (as the
    feedback calls them)."""
    items = [item for listed in assignment.items.values() for item in listed]
    names = {name for item in items for name in (item.grade_id, item.answer_id, *map(forbidden_name, item.forbids),
                                                 *runtime_names(item.forbids).values())}
    return names | {name for pid in assignment.stand_ins for name in assignment.stand_ins_shown(pid)}


def probe_grammar(names: Iterable[str]) -> re.Pattern:
    """A probe's texts, with ``names`` those of the run's plan; made once for each set of names."""
    return _probe_grammar(frozenset(names))


@functools.lru_cache(maxsize=32)
def _probe_grammar(names: frozenset[str]) -> re.Pattern:
    return re.compile(_alternatives(PROBES, names), re.S)


def conforms(text: str, pattern: re.Pattern) -> bool:
    """Whether ``text`` is, whole, a text of the catalogue (``pattern``: :func:`grammar`)."""
    return isinstance(text, str) and pattern.fullmatch(text) is not None


def public(status: str, text: str, names: Iterable[str]) -> str:
    """What a student may read before the deadline of an item of ``status`` whose text is ``text``,
    with ``names`` the course's own (:func:`course_names`): for a status told in words, the text
    itself when the catalogue holds it, else the status's own sentence; for a failure or an error,
    what kind of problem it was (:data:`HIDDEN`), after the note that the course's code stood in."""
    names, text = frozenset(names), str(text)
    if status in STATUS_SENTENCES:
        return text if conforms(text, grammar(names)) else STATUS_SENTENCES[status]
    start = _on_course_code(names).match(text)
    prefix, rest = (start.group(), text[start.end():]) if start else ("", text)
    if rest.startswith(NOT_WRITTEN):
        return prefix + OUTCOME["not_written"]
    if status != "error":
        return prefix + HIDDEN["differs"]
    exception = re.search(rf"\b(?:{EXCEPTIONS})\b", rest)
    return prefix + (render(HIDDEN["raised"], exception=exception.group()) if exception else HIDDEN["error"])
