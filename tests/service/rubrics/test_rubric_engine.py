"""The rubric rule engine and scoring (service/rubrics/content.py, rubric_checks.py,
rubric_scores.py), by hand and by property: every check type and scope, negation,
the `{{label}}` placeholder, the weighted reward, stage-wise scores, what a judge
is asked, the rubrics reflector's older content shape, and every validation rule
(422 naming `criteria[i].<field>` and the rule)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import InvalidInput
from service.rubrics.checks import (
    MISSING,
    Episode,
    StepView,
    answer_number,
    as_json,
    evaluate,
    label_number,
    number_in_text,
    tool_names,
)
from service.rubrics.content import normalise_check, parse_criteria, parse_json_path, rubric_text
from service.rubrics.openrlhf import MIN_OVERLAP, response_of
from service.rubrics.scores import Verdict, judge_tasks, score_episode


def ep(*steps: StepView, final_answer: Any = None, label: Any = MISSING) -> Episode:
    return Episode("task", tuple(steps), final_answer, label)


def s(i: int, action: Any, result: str | None = None, observation: str = "obs", stage: str | None = None) -> StepView:
    return StepView(i, observation, action, result, stage)


def check(spec: dict[str, Any], episode: Episode) -> tuple[bool, str]:
    result = evaluate(normalise_check(spec, "check"), episode)
    return result.passed, result.rationale


def crit(id: str, weight: float, spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": id, "text": f"criterion {id}", "weight": weight, **extra}
    if spec is not None:
        out["check"] = spec
    return out


ANSWERED = ep(
    s(0, {"tool": "search", "args": {"q": "mug"}}, "3 results"),
    s(1, {"tool_calls": [{"type": "function", "function": {"name": "open", "arguments": {"id": 2}}}]}, "Red Mug $8"),
    s(2, "The answer is 42.", "ok"),
)


# -- the checks, by hand ------------------------------------------------------------


def test_regex_on_the_final_answer_and_its_negation() -> None:
    assert check({"type": "regex", "pattern": r"\b42\b"}, ANSWERED) == (True, r"final_answer matches /\b42\b/")
    assert check({"type": "regex", "pattern": r"\b43\b"}, ANSWERED)[0] is False
    assert check({"type": "regex", "pattern": r"\b43\b", "negate": True}, ANSWERED)[0] is True
    assert check({"type": "regex", "pattern": "THE ANSWER"}, ANSWERED)[0] is False
    assert check({"type": "regex", "pattern": "THE ANSWER", "ignore_case": True}, ANSWERED)[0] is True


def test_an_explicit_final_answer_replaces_the_last_action() -> None:
    explicit = ep(*ANSWERED.steps, final_answer="It is 7")
    assert check({"type": "contains", "text": "7"}, explicit)[0] is True
    assert check({"type": "contains", "text": "42"}, explicit)[0] is False
    assert check({"type": "contains", "text": "42", "scope": "final_action"}, explicit)[0] is True


def test_contains_and_not_contains_with_case() -> None:
    assert check({"type": "contains", "text": "answer"}, ANSWERED)[0] is True
    assert check({"type": "contains", "text": "ANSWER"}, ANSWERED)[0] is False
    assert check({"type": "contains", "text": "ANSWER", "case_sensitive": False}, ANSWERED)[0] is True
    assert check({"type": "not_contains", "text": "sorry"}, ANSWERED) == (True, "final_answer does not contain 'sorry'")
    assert check({"type": "not_contains", "text": "answer"}, ANSWERED)[0] is False


@pytest.mark.parametrize(
    ("scope", "needle", "found"),
    [
        ("final_answer", "42", True),
        ("final_action", "search", False),
        ("final_result", "ok", True),
        ("final_result", "Red Mug", False),
        ("any_action", '"q": "mug"', True),  # an action object is read as its JSON text, keys sorted
        ("any_action", "Red Mug", False),
        ("any_result", "Red Mug", True),
        ("any_observation", "obs", True),
        ("any_observation", "42", False),
        ("any_step", "Red Mug", True),
        ("any_step", "3 results", True),
        ("any_step", "nowhere", False),
    ],
)
def test_every_scope_reads_what_it_names(scope: str, needle: str, found: bool) -> None:
    assert check({"type": "contains", "text": needle, "scope": scope}, ANSWERED)[0] is found
    # Negation is of the whole scope: not_contains over any_* passes when no text has it.
    assert check({"type": "not_contains", "text": needle, "scope": scope}, ANSWERED)[0] is not found


def test_a_tool_call_action_is_json_text_with_sorted_keys() -> None:
    episode = ep(s(0, {"z": 1, "a": {"y": 2, "b": 3}}))
    assert check({"type": "contains", "text": '{"a": {"b": 3, "y": 2}, "z": 1}'}, episode)[0] is True


def test_json_path_equals_not_equals_exists() -> None:
    call = ep(s(0, {"tool": "book", "args": {"city": "Paris", "nights": 3, "tags": ["a", "b"]}}))
    assert check({"type": "json_path", "path": "$.args.city", "value": "Paris"}, call)[0] is True
    assert check({"type": "json_path", "path": "args.nights", "value": 3}, call)[0] is True
    assert check({"type": "json_path", "path": "args.nights", "value": "3"}, call)[0] is True  # 3 == "3" as numbers
    assert check({"type": "json_path", "path": "$.args.tags[1]", "value": "b"}, call)[0] is True
    assert check({"type": "json_path", "path": "args.tags.0", "value": "a"}, call)[0] is True
    assert check({"type": "json_path", "path": "$.args.city", "op": "not_equals", "value": "Rome"}, call)[0] is True
    assert check({"type": "json_path", "path": "$.args.city", "op": "not_equals", "value": "Paris"}, call)[0] is False
    assert check({"type": "json_path", "path": "$.args.nights", "op": "exists"}, call)[0] is True
    assert check({"type": "json_path", "path": "$.args.price", "op": "exists"}, call) == (
        False,
        "$.args.price is missing in final_answer",
    )
    assert check({"type": "json_path", "path": "$.args.nights", "value": True}, call)[0] is False  # no bool == 1


def test_json_path_parses_a_text_answer() -> None:
    fenced = ep(s(0, 'Here it is:\n```json\n{"answer": 42}\n```\nDone.'))
    assert check({"type": "json_path", "path": "$.answer", "value": 42}, fenced)[0] is True
    inline = ep(s(0, 'I think {"answer": 41} is right'))
    assert check({"type": "json_path", "path": "$.answer", "value": 41}, inline)[0] is True
    prose = ep(s(0, "no json here"))
    assert check({"type": "json_path", "path": "$.answer", "op": "exists"}, prose) == (
        False,
        "final_answer holds no JSON",
    )
    assert as_json("[1, 2]") == (True, [1, 2])


@pytest.mark.parametrize(
    ("spec", "passed"),
    [
        ({"op": "eq", "value": 42}, True),
        ({"op": "==", "value": 42.0000001}, True),  # within the default tolerance
        ({"op": "ne", "value": 42}, False),
        ({"op": "lt", "value": 50}, True),
        ({"op": "le", "value": 42}, True),
        ({"op": "gt", "value": 42}, False),
        ({"op": ">=", "value": 42}, True),
        ({"op": "between", "min": 40, "max": 45}, True),
        ({"op": "between", "min": 43}, False),
        ({"op": "eq", "value": 41, "tolerance": 1}, True),
    ],
)
def test_numeric_reads_the_last_number_of_the_answer(spec: dict[str, Any], passed: bool) -> None:
    assert check({"type": "numeric", **spec}, ANSWERED)[0] is passed


def test_numeric_at_a_json_path_and_in_text() -> None:
    call = ep(s(0, {"total": "1,234.50"}))
    assert check({"type": "numeric", "path": "$.total", "op": "eq", "value": 1234.5}, call)[0] is True
    assert number_in_text("-3.5") == -3.5
    assert number_in_text("costs 1,234 dollars, or 1.2e3") == 1200.0
    assert number_in_text("none") is None
    assert check({"type": "numeric", "op": "eq", "value": 1}, ep(s(0, "no number")))[0] is False


def test_tool_called_counts_every_naming_convention() -> None:
    assert tool_names({"tool": "a"}) == ["a"]
    assert tool_names({"name": "b", "arguments": {}}) == ["b"]
    assert tool_names({"function": {"name": "c"}}) == ["c"]
    assert tool_names({"tool_calls": [{"function": {"name": "d"}}, {"name": "e"}]}) == ["d", "e"]
    assert tool_names('{"tool": "f"}') == ["f"]  # a JSON text action
    assert tool_names("search for x") == []
    assert check({"type": "tool_called", "tool": "search"}, ANSWERED) == (
        True,
        "tool search called 1 time (wanted 1..any)",
    )
    assert check({"type": "tool_called", "tool": "open", "min_times": 1, "max_times": 1}, ANSWERED)[0] is True
    assert check({"type": "tool_called", "tool": "checkout"}, ANSWERED)[0] is False
    never = {"type": "tool_called", "tool": "clear_cart", "min_times": 0, "max_times": 0}
    assert check(never, ANSWERED)[0] is True
    assert check({**never, "tool": "search"}, ANSWERED)[0] is False


def test_max_steps_bounds_the_step_count() -> None:
    assert check({"type": "max_steps", "max_steps": 3}, ANSWERED) == (True, "3 steps (wanted 0..3)")
    assert check({"type": "max_steps", "max_steps": 2}, ANSWERED)[0] is False
    assert check({"type": "max_steps", "min_steps": 4}, ANSWERED)[0] is False
    assert check({"type": "max_steps", "min_steps": 1, "max_steps": 5}, ANSWERED)[0] is True


def test_nothing_matches_an_empty_trajectory() -> None:
    empty = ep()
    assert check({"type": "regex", "pattern": ".*"}, empty)[0] is False
    assert check({"type": "not_contains", "text": "x"}, empty)[0] is True
    assert check({"type": "json_path", "path": "a", "op": "exists"}, empty)[0] is False


def test_the_label_placeholder() -> None:
    labelled = ep(*ANSWERED.steps, label="42")
    assert check({"type": "regex", "pattern": r"\b{{label}}\.$"}, labelled)[0] is True
    assert check({"type": "contains", "text": "is {{label}}"}, labelled)[0] is True
    assert check({"type": "numeric", "op": "eq", "value": "{{label}}"}, labelled)[0] is True
    assert check({"type": "numeric", "op": "eq", "value": "{{label}}"}, ep(s(0, "7"), label="seven")) == (
        False,
        "the label 'seven' is not a number",
    )
    # In a regex the label is literal text: "1+1" is not a pattern.
    assert check({"type": "regex", "pattern": "^{{label}}$"}, ep(s(0, "1+1"), label="1+1"))[0] is True
    assert check({"type": "regex", "pattern": "^{{label}}$"}, ep(s(0, "11"), label="1+1"))[0] is False
    # A json_path value that is exactly the placeholder is the label itself, of any type.
    call = ep(s(0, {"pick": [1, 2]}), label=[1, 2])
    assert check({"type": "json_path", "path": "pick", "value": "{{label}}"}, call)[0] is True
    assert check({"type": "json_path", "path": "pick", "value": "{{label}}"}, ep(s(0, {"n": 5}), label=5))[0] is False


@pytest.mark.parametrize(
    ("text", "answer", "label"),
    [
        (r"so \boxed{72}", 72.0, 72.0),
        (r"\boxed{71} then \boxed{ 72 } after 3 tries", 72.0, 72.0),  # the last boxed one
        (r"\boxed{\frac{1}{2}} or 7", None, None),  # a boxed answer that is not one number: none
        (r"\boxed{72 \text{ apples}}", 72.0, 72.0),
        ("Natalia sold 24 clips.\n#### 72", 72.0, 72.0),  # GSM8K's answer column
        ("The answer is 72. (3 steps)", 72.0, 72.0),
        ("the final answer is **$1,234.5$** in 2 ways", 1234.5, 1234.5),
        ("Final answer: -3\nchecked 4 times", -3.0, -3.0),
        ("The answer is below.\n42", None, None),  # a marker with no number on its line
        ("#### 71\n#### 72", 72.0, 72.0),  # the last marker
        ("it is 70, no, 72", 72.0, None),  # no stated answer: a response's last number, a label's none
        ("1,234", 1234.0, 1234.0),
        ("seventy-two", None, None),
    ],
)
def test_answers_and_labels_are_read_from_what_they_state(text: str, answer: float | None, label: float | None) -> None:
    assert answer_number(text) == answer
    assert label_number(text) == label


def test_label_numbers() -> None:
    assert [label_number(v) for v in (72, 7.5, "72", " 1e3 ")] == [72.0, 7.5, 72.0, 1000.0]
    assert [label_number(v) for v in (True, None, {"n": 1}, [1], float("nan"))] == [None] * 5


def test_the_response_in_openrlhfs_query() -> None:
    prompt = "<|im_start|>user\n" + "Count the apples, then the pears. " * 3 + "<|im_end|>\n<|im_start|>assistant\n"
    assert response_of(prompt + "42", prompt) == "42"
    assert response_of("<s>" + prompt + "42", prompt) == "42"
    assert response_of("anything", None) == response_of("anything", "") == "anything"  # no prompt: the whole query
    # Cut from the left, re-spaced: the longest normalised suffix locates the end.
    cut = prompt[25:].replace("pears.", "pears .").replace("\n", " \n")
    assert response_of(cut + "42 pears", prompt) == "42 pears"
    # Too short an overlap, or none: not located.
    short = prompt[-(MIN_OVERLAP - 1) :]
    assert len("".join(short.split())) < MIN_OVERLAP and response_of(short + "42", prompt) is None
    assert response_of("unrelated 42", prompt) is None
    # A prompt shorter than the overlap must be found whole (normalised).
    assert response_of("What  is 6*7 ? 42", "What is 6*7?") == " 42"
    assert response_of("is 6*7? 42", "What is 6*7?") is None


def test_the_rubrics_reflector_content_is_read() -> None:
    """What reflectors/prompted/rubrics.py stores: no ids (before they were added),
    `target`, json_field, step_count, contains with negate."""
    criteria = parse_criteria(
        [
            {"text": "ends right", "weight": 0.4, "rationale": "r", "check": None},
            {
                "text": "json",
                "weight": 0.2,
                "rationale": "r",
                "check": {
                    "type": "json_field",
                    "target": "any_action",
                    "path": "args.q",
                    "op": "equals",
                    "value": "mug",
                },
            },
            {
                "text": "short",
                "weight": 0.2,
                "rationale": "r",
                "check": {"type": "step_count", "min_steps": None, "max_steps": 12},
            },
            {
                "text": "no apology",
                "weight": 0.2,
                "rationale": "r",
                "check": {
                    "type": "contains",
                    "target": "final_action",
                    "text": "SORRY",
                    "case_sensitive": False,
                    "negate": True,
                },
            },
        ]
    )
    assert [c.id for c in criteria] == ["c1", "c2", "c3", "c4"]
    assert [c.check["type"] if c.check else None for c in criteria] == [None, "json_path", "max_steps", "contains"]
    score = score_episode(criteria, ANSWERED)
    assert [c.score for c in score.criteria] == [None, 1.0, 1.0, 1.0]
    assert score.reward == pytest.approx(1.0)  # the skipped criterion counts in neither sum


# -- scoring -------------------------------------------------------------------------


def test_the_reward_is_the_weighted_mean_of_the_scored_criteria() -> None:
    criteria = parse_criteria(
        [
            crit("right", 3, {"type": "contains", "text": "42"}),
            crit("brief", 1, {"type": "max_steps", "max_steps": 2}),
            crit("tidy", 0, {"type": "contains", "text": "nope"}),
            crit("judged", 2),
        ]
    )
    verdicts = {None: {"judged": Verdict(0.5, "half")}}
    score = score_episode(criteria, ANSWERED, verdicts)
    assert [(c.id, c.score, c.method) for c in score.criteria] == [
        ("right", 1.0, "rule"),
        ("brief", 0.0, "rule"),
        ("tidy", 0.0, "rule"),
        ("judged", 0.5, "llm"),
    ]
    assert score.reward == pytest.approx((3 * 1 + 1 * 0 + 0 + 2 * 0.5) / 6)
    assert score.criteria[3].rationale == "half"
    skipped = score_episode(criteria, ANSWERED, skipped="no judge")
    assert skipped.criteria[3].method == "skipped" and skipped.criteria[3].rationale == "no judge"
    assert skipped.reward == pytest.approx(3 / 4)


def test_stage_wise_scores() -> None:
    """RubricEM: a staged criterion reads its stage's steps only; per stage, its
    criteria and the stage-less rule criteria scored on the stage; an unreached
    stage scores 0."""
    staged = ep(
        s(0, "plan: search then open", stage="plan"),
        s(1, {"tool": "search"}, "3 results", stage="act"),
        s(2, {"tool": "open"}, "page", stage="act"),
        s(3, "The answer is 42", stage="answer"),
    )
    criteria = parse_criteria(
        [
            crit("plan_named", 1, {"type": "contains", "text": "search"}, stage="plan"),
            crit("act_short", 1, {"type": "max_steps", "max_steps": 2}, stage="act"),
            crit("act_searched", 1, {"type": "tool_called", "tool": "search"}, stage="act"),
            crit("verify", 1, {"type": "contains", "text": "checked"}, stage="verify"),
            crit("right", 2, {"type": "contains", "text": "42"}),
            crit("judged", 1),
            crit("judged_act", 1, stage="act"),
        ]
    )
    tasks = judge_tasks(criteria, staged)
    assert [(t.stage, [c.id for c in t.criteria], [x.index for x in t.episode.steps]) for t in tasks] == [
        (None, ["judged"], [0, 1, 2, 3]),
        ("act", ["judged_act"], [1, 2]),  # the unreached stage 'verify' is not asked about
    ]
    verdicts = {None: {"judged": Verdict(1.0, "ok")}, "act": {"judged_act": Verdict(0.25, "meh")}}
    score = score_episode(criteria, staged, verdicts)
    by_id = {c.id: c for c in score.criteria}
    assert by_id["plan_named"].score == 1.0 and by_id["act_short"].score == 1.0
    assert by_id["verify"].score == 0.0 and by_id["verify"].rationale == "stage 'verify' has no steps"
    assert by_id["right"].score == 1.0 and by_id["judged_act"].score == 0.25
    assert score.reward == pytest.approx((1 + 1 + 1 + 0 + 2 + 1 + 0.25) / 8)
    stages = {st.stage: st for st in score.stages}
    assert list(stages) == ["plan", "act", "answer", "verify"]
    assert stages["act"].steps == (1, 2)
    # "right" (stage-less, rule) is shown per stage: the act stage's last action is not the answer.
    act = {c.id: c.score for c in stages["act"].criteria}
    assert act == {"act_short": 1.0, "act_searched": 1.0, "right": 0.0, "judged_act": 0.25}
    assert stages["act"].reward == pytest.approx((1 + 1 + 0 + 0.25) / 5)
    assert {c.id for c in stages["answer"].criteria} == {"right"} and stages["answer"].reward == 1.0
    assert stages["verify"].steps == () and stages["verify"].reward == 0.0


def test_no_stages_without_staged_steps_or_criteria() -> None:
    criteria = parse_criteria([crit("a", 1, {"type": "contains", "text": "42"})])
    assert score_episode(criteria, ANSWERED).stages == ()


def test_rubric_text_renders_each_criterion() -> None:
    criteria = parse_criteria([crit("a", 0.5, {"type": "regex", "pattern": "x"}), crit("b", 0.5)])
    assert rubric_text("r", criteria) == (
        "Rubric: r\n- [0.50] criterion a (rule: match of /x/ in final_answer)\n- [0.50] criterion b (judged)"
    )


# -- validation: 422 naming the field and the rule -------------------------------------


@pytest.mark.parametrize(
    ("criteria", "field", "rule"),
    [
        ([], "criteria", "non_empty"),
        ([crit("a", 1), crit("a", 1)], "criteria[1].id", "unique"),
        ([crit("a b", 1)], "criteria[0].id", "id_pattern"),
        ([crit("a", -1)], "criteria[0].weight", "ge_0"),
        ([crit("a", 0), crit("b", 0)], "criteria", "weights"),
        ([{"id": "a", "weight": 1}], "criteria[0].text", "non_empty"),
        ([crit("a", 1, {"type": "regex", "pattern": "("})], "criteria[0].check.pattern", "regex"),
        ([crit("a", 1), crit("b", 1, {"type": "regex", "pattern": "[a-"})], "criteria[1].check.pattern", "regex"),
        ([crit("a", 1, {"type": "fuzzy"})], "criteria[0].check.type", "known_check_type"),
        ([crit("a", 1, {"pattern": "x"})], "criteria[0].check.type", "known_check_type"),
        ([crit("a", 1, {"type": "regex"})], "criteria[0].check.pattern", "required"),
        ([crit("a", 1, {"type": "regex", "pattern": 3})], "criteria[0].check.pattern", "type"),
        ([crit("a", 1, {"type": "regex", "pattern": "x", "scope": "last"})], "criteria[0].check.scope", "known_scope"),
        (
            [crit("a", 1, {"type": "regex", "pattern": "x", "scope": "any_step", "target": "any_step"})],
            "criteria[0].check.target",
            "one_of",
        ),
        ([crit("a", 1, {"type": "contains", "text": "x", "flags": "i"})], "criteria[0].check.flags", "unknown_field"),
        ([crit("a", 1, {"type": "contains", "text": ""})], "criteria[0].check.text", "non_empty"),
        ([crit("a", 1, {"type": "json_path", "path": "a..b", "value": 1})], "criteria[0].check.path", "json_path"),
        ([crit("a", 1, {"type": "json_path", "path": "a"})], "criteria[0].check.value", "required"),
        (
            [crit("a", 1, {"type": "json_path", "path": "a", "op": "gt", "value": 1})],
            "criteria[0].check.op",
            "known_op",
        ),
        ([crit("a", 1, {"type": "numeric", "op": "approx", "value": 1})], "criteria[0].check.op", "known_op"),
        ([crit("a", 1, {"type": "numeric", "op": "eq"})], "criteria[0].check.value", "required"),
        ([crit("a", 1, {"type": "numeric", "op": "eq", "value": "ten"})], "criteria[0].check.value", "number"),
        ([crit("a", 1, {"type": "numeric", "op": "between"})], "criteria[0].check.min", "required"),
        (
            [crit("a", 1, {"type": "numeric", "op": "between", "min": 5, "max": 1})],
            "criteria[0].check.min",
            "min_le_max",
        ),
        ([crit("a", 1, {"type": "numeric", "op": "eq", "value": 1, "max": 3})], "criteria[0].check.max", "not_for_op"),
        ([crit("a", 1, {"type": "tool_called"})], "criteria[0].check.tool", "required"),
        ([crit("a", 1, {"type": "tool_called", "tool": "t", "min_times": -1})], "criteria[0].check.min_times", "ge_0"),
        (
            [crit("a", 1, {"type": "tool_called", "tool": "t", "min_times": 3, "max_times": 1})],
            "criteria[0].check.min_times",
            "min_le_max",
        ),
        (
            [crit("a", 1, {"type": "tool_called", "tool": "t", "scope": "any_step"})],
            "criteria[0].check.scope",
            "unknown_field",
        ),
        ([crit("a", 1, {"type": "max_steps"})], "criteria[0].check.max_steps", "required"),
        ([crit("a", 1, {"type": "max_steps", "max_steps": True})], "criteria[0].check.max_steps", "type"),
        ([crit("a", 1, stage="")], "criteria[0].stage", "type"),
    ],
)
def test_bad_criteria_are_refused_naming_the_field_and_rule(criteria: Any, field: str, rule: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_criteria(criteria)
    assert (caught.value.field, caught.value.rule) == (field, rule), caught.value.message
    assert caught.value.message.startswith(field.split(".")[0])


def test_json_paths() -> None:
    assert parse_json_path("$") == ()
    assert parse_json_path("$.a.b[0]['x.y'].3") == ("a", "b", 0, "x.y", 3)
    assert parse_json_path("a.b.0") == ("a", "b", 0)
    assert parse_json_path('$["k"]') == ("k",)
    for bad in ("a..b", "a[", "a[x]", "$.a.", "a b.c[0]x"):
        with pytest.raises(ValueError):
            parse_json_path(bad)


# -- properties ------------------------------------------------------------------------

_texts = st.text(alphabet="abcAB 42.", max_size=20)


@given(
    # weights 0 or at least 1e-3: a subnormal weight times a small scale underflows to 0
    outcomes=st.lists(st.tuples(st.booleans(), st.one_of(st.just(0.0), st.floats(1e-3, 10))), min_size=1, max_size=8),
    scale=st.floats(0.01, 100),
)
def test_reward_is_the_weighted_mean_and_scale_free(outcomes: list[tuple[bool, float]], scale: float) -> None:
    episode = ep(s(0, "yes"))
    specs = [
        crit(f"c{i}", w, {"type": "contains", "text": "yes" if passes else "no"})
        for i, (passes, w) in enumerate(outcomes)
    ]
    total = sum(w for _, w in outcomes)
    if total == 0:
        with pytest.raises(InvalidInput):
            parse_criteria(specs)
        return
    reward = score_episode(parse_criteria(specs), episode).reward
    assert reward == pytest.approx(sum(w for passes, w in outcomes if passes) / total)
    assert 0.0 <= reward <= 1.0
    scaled = [dict(c, weight=c["weight"] * scale) for c in specs]
    assert score_episode(parse_criteria(scaled), episode).reward == pytest.approx(reward)


@given(
    actions=st.lists(_texts, max_size=4),
    needle=st.text(alphabet="abcAB 42.", min_size=1, max_size=4),
    scope=st.sampled_from(["final_answer", "final_action", "any_action", "any_step", "any_observation"]),
    sensitive=st.booleans(),
)
def test_not_contains_is_the_negation_of_contains(actions: list[str], needle: str, scope: str, sensitive: bool) -> None:
    episode = ep(*(s(i, a) for i, a in enumerate(actions)))
    spec = {"text": needle, "scope": scope, "case_sensitive": sensitive}
    assert check({"type": "contains", **spec}, episode)[0] != check({"type": "not_contains", **spec}, episode)[0]
    assert (
        check({"type": "contains", **spec}, episode)[0]
        != check({"type": "contains", "negate": True, **spec}, episode)[0]
    )


@given(label=st.text(min_size=1, max_size=12))
def test_a_label_in_a_regex_matches_itself_literally(label: str) -> None:
    assert check({"type": "regex", "pattern": "^{{label}}$"}, ep(s(0, label), label=label))[0] is True
    assert check({"type": "contains", "text": "{{label}}"}, ep(s(0, f"<{label}>"), label=label))[0] is True


@given(keys=st.lists(st.text(alphabet="abcxyz_", min_size=1, max_size=5), min_size=1, max_size=4), value=st.integers())
def test_json_path_reads_what_was_nested(keys: list[str], value: int) -> None:
    document: Any = value
    for key in reversed(keys):
        document = {key: document}
    spec = {"type": "json_path", "path": "$." + ".".join(keys), "value": value}
    assert check(spec, ep(s(0, document)))[0] is True
    assert check({**spec, "value": value + 1}, ep(s(0, document)))[0] is False
