"""Before the deadline a check shows no hidden input: what each kind of item message becomes."""

from autograder.reading import messages
from autograder.service.shown import public_item, public_message

WRONG_ROW = "sliding_window_mask(query_len=7, key_len=7, window=2): row 2 is wrong."
STAND_INS = "With the course's apply_rope and sliding_window_mask in place of yours: "
NAMES = {"apply_rope", "sliding_window_mask", "softmax", "scaled_dot_product_attention"}


def item(status: str, message: str, public: bool = True) -> dict:
    """A graded item as the worker stores it (with ``public`` as the worker makes it, or without, as
    a result stored before the catalogue had none)."""
    made = {"grade_id": "sliding_window_mask", "status": status, "score": 0, "max_score": 1, "message": message,
            "mistake": "the sliding window off by one", "hint": "A window of w keys counts the query's own key.",
            "deduction": ""}
    return {**made, "public": messages.public(status, message, NAMES)} if public else made


def test_messages_that_name_hidden_inputs_become_what_kind_of_problem_it_was():
    assert public_message(item("failed", WRONG_ROW)) == "A hidden check found results that differ from the reference's."
    error = "Calling GroupedQueryAttention(d_model=96, ...) raised RuntimeError: size of tensor a (12) must match 7"
    assert public_message(item("error", error)) == ("Your code raised RuntimeError on a hidden check. Run the "
                                                    "visible checks to see it happen.")
    assert public_message(item("failed", STAND_INS + WRONG_ROW)) == STAND_INS + ("A hidden check found results that "
                                                                                 "differ from the reference's.")


def test_texts_of_the_catalogue_are_kept():
    for status, message in [("passed", "All hidden checks passed."),
                            ("failed", "Not written yet: the answer still raises NotImplementedError."),
                            ("failed", STAND_INS + "Not written yet: the answer still raises NotImplementedError."),
                            ("timeout", "It ran for more than 30 s and was stopped (an endless loop, or far too slow)."),
                            ("killed", "Your answer cell: The process was killed by a signal (out of memory, or a signal sent to it)."),
                            ("tampered", "The grader stopped the run: the run's own code tried to change how it is "
                                         "checked."),
                            ("forbidden", "While it was checked, the answer ran softmax, the library version of what "
                                          "this exercise asks you to write yourself (the grader sees the operations "
                                          "that run, whatever name reached them).")]:
        assert public_message(item(status, message)) == message


def test_a_text_of_a_status_told_in_words_that_the_catalogue_lacks_becomes_the_statuss_sentence():
    """What a forged report made of these statuses' texts (before the catalogue, the grader quoted a
    run's ``tampered`` note and the names of the events it wrote); and a result stored before the
    worker kept a catalogue text."""
    forged = {"tampered": "The grader stopped the run: shape (3, 5, 8), torch.float64.",
              "killed": "The process was killed (signal SIGLEAK_3_5_8).",
              "timeout": "It ran for more than 3 5 8 s and was stopped.",
              "passed": "All hidden checks passed. q is (3, 5, 8).",
              "forbidden": "While it was checked, the answer ran q_3_5_8, the library version of what this exercise "
                           "asks you to write yourself (the grader sees the operations that run, whatever name "
                           "reached them).",
              "missing": "The answer cell was missing (3, 5, 8)."}
    for status, message in forged.items():
        assert public_message(item(status, message)) == messages.STATUS_SENTENCES[status]
        assert "3" not in public_message(item(status, message, public=False))


def test_status_only_shows_status_and_points():
    failed = item("failed", WRONG_ROW)
    assert public_item(failed, "status") == {"grade_id": "sliding_window_mask", "status": "failed", "score": 0,
                                             "max_score": 1}
    hinted = public_item(failed, "hint")
    assert hinted["mistake"] == "the sliding window off by one" and "query_len" not in hinted["message"]
