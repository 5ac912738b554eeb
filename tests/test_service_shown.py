"""Before the deadline a check shows no hidden input: what each kind of item message becomes."""

from autograder.service.shown import public_item, public_message

WRONG_ROW = "sliding_window_mask(query_len=7, key_len=7, window=2): row 2 is wrong."
STAND_INS = "With the course's apply_rope and sliding_window_mask in place of yours: "


def test_messages_that_name_hidden_inputs_become_what_kind_of_problem_it_was():
    assert public_message("failed", WRONG_ROW) == "A hidden check found results that differ from the reference's."
    error = "Calling GroupedQueryAttention(d_model=96, ...) raised RuntimeError: size of tensor a (12) must match 7"
    assert public_message("error", error) == ("Your code raised RuntimeError on a hidden check. Run the visible checks "
                                              "to see it happen.")
    assert "(12)" not in public_message("error", error) and "query_len=7" not in public_message("failed", WRONG_ROW)
    assert public_message("failed", STAND_INS + WRONG_ROW) == STAND_INS + ("A hidden check found results that "
                                                                           "differ from the reference's.")


def test_messages_that_say_nothing_of_the_inputs_are_kept():
    for status, message in [("passed", "All hidden checks passed."),
                            ("failed", "Not written yet: the answer still raises NotImplementedError."),
                            ("failed", STAND_INS + "Not written yet: the answer still raises NotImplementedError."),
                            ("timeout", "It ran for more than 30 s and was stopped (an endless loop)."),
                            ("forbidden", "While it was checked, the answer ran torch.softmax, ...")]:
        assert public_message(status, message) == message


def test_status_only_shows_status_and_points():
    item = {"grade_id": "sliding_window_mask", "status": "failed", "score": 0, "max_score": 1, "message": WRONG_ROW,
            "mistake": "the sliding window off by one", "hint": "A window of w keys counts the query's own key.",
            "deduction": ""}
    assert public_item(item, "status") == {"grade_id": "sliding_window_mask", "status": "failed", "score": 0,
                                           "max_score": 1}
    hinted = public_item(item, "hint")
    assert hinted["mistake"] == "the sliding window off by one" and "query_len" not in hinted["message"]
