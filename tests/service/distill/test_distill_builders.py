"""The pure parts of teacher contexts (service/distill/contexts/render.py, builders.py,
templates.py): the plain context and its history budget, the own-action guard
(a property test over random actions), fitting a block into characters and
tokens, each kind's builder and the hindsight horizon's boundaries, and template
loading."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.contexts import templates
from domain.contexts.plain import PlainHistory, transcript
from service.distill.contexts import builders, render
from service.distill.contexts.builders import Episode, NotApplicable, Outcome
from service.distill.contexts.render import ActionGuard, Draft, HFTokenCounter, Piece, fit
from service.distill.repository import StepRecord

TEMPLATE = templates.load_template("default")


def estep(index: int, observation: str, action: Any, **fields: Any) -> StepRecord:
    values: dict[str, Any] = {
        "state_data": None,
        "internal_state": None,
        "result": None,
        "error": None,
        "reward": None,
        "done": False,
        "truncated": False,
        "caused_failure": False,
    }
    values.update(fields)
    return StepRecord(index=index, observation=observation, action=action, **values)


def episode(steps: list[StepRecord], outcome: Outcome | None = None, **fields: Any) -> Episode:
    values: dict[str, Any] = {
        "id": "t1",
        "pk": 1,
        "task": "open the door",
        "task_hash": "h",
        "group_id": None,
        "parent_trajectory_id": None,
        "attempt": None,
    }
    values.update(fields)
    return Episode(outcome=outcome, steps=tuple(steps), **values)


def history(steps: list[StepRecord]) -> PlainHistory:
    return PlainHistory(TEMPLATE, "open the door", [builders.history_step(s) for s in steps])


def word_level_tokenizer(path: Path) -> HFTokenCounter:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["the door is locked", "take the key from the table", "go north to the kitchen"],
        trainers.WordLevelTrainer(special_tokens=["[UNK]"]),
    )
    tok.save(str(path))
    return HFTokenCounter(Tokenizer.from_file(str(path)))


# -- templates --------------------------------------------------------------------


def test_the_default_template_loads_with_its_version() -> None:
    assert TEMPLATE.id == "default@1"
    assert set(TEMPLATE.parts) == set(templates.PARTS)
    assert templates.available() == ["default"] or "default" in templates.available()
    with pytest.raises(KeyError):
        templates.load_template("nope")
    with pytest.raises(KeyError):
        templates.load_template("../default")


def test_a_template_with_a_wrong_placeholder_fails_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(templates.ROOT / "default", tmp_path / "broken")
    manifest = tmp_path / "broken" / "manifest.json"
    manifest.write_text(json.dumps({"name": "broken", "version": "2"}))
    (tmp_path / "broken" / "hindsight.txt").write_text("Hindsight ${horizn}: ${events}\n")
    monkeypatch.setattr(templates, "ROOT", tmp_path)
    templates.load_template.cache_clear()
    try:
        with pytest.raises(templates.TemplateError, match="hindsight.txt uses"):
            templates.load_template("broken")
        (tmp_path / "broken" / "hindsight.txt").write_text("Hindsight ${horizon}: ${events}\n")
        assert templates.load_template("broken").id == "broken@2"
    finally:
        templates.load_template.cache_clear()


# -- the plain context --------------------------------------------------------------


STEPS = [
    estep(
        0,
        "a hall, a door to the north",
        "go north",
        result="you walk north",
        state_data={"room": "hall", "doors": ["n"]},
    ),
    estep(1, "a kitchen, a key on the table", {"name": "take", "args": {"item": "key"}}, result="you hold the key"),
    estep(2, "the door is locked", "unlock door", error="the key does not fit"),
    estep(3, "the door is still locked", "kick door"),
]


def test_plain_messages_are_the_task_then_observation_action_turns() -> None:
    messages, omitted = history(STEPS).messages(3, 10_000)
    assert omitted == 0
    assert messages == [
        {
            "role": "system",
            "content": "You are an agent working on a task. Choose the next action.\nTask: open the door",
        },
        {
            "role": "user",
            "content": 'Observation: a hall, a door to the north\nState data: {"doors":["n"],"room":"hall"}',
        },
        {"role": "assistant", "content": "go north"},
        {
            "role": "user",
            "content": "Result of your last action: you walk north\n\nObservation: a kitchen, a key on the table",
        },
        {"role": "assistant", "content": '{"args":{"item":"key"},"name":"take"}'},
        {"role": "user", "content": "Result of your last action: you hold the key\n\nObservation: the door is locked"},
        {"role": "assistant", "content": "unlock door"},
        {
            "role": "user",
            "content": "Result of your last action: Error: the key does not fit\n\n"
            "Observation: the door is still locked",
        },
    ]
    text = transcript(TEMPLATE, messages)
    assert text.startswith("[system]\nYou are an agent working on a task.")
    assert "\n\n[assistant]\ngo north\n\n[user]\nResult of your last action: you walk north" in text
    first, _ = history(STEPS).messages(0, 10_000)
    assert [m["role"] for m in first] == ["system", "user"]


def test_the_history_budget_drops_the_oldest_steps_behind_a_marker() -> None:
    h = history(STEPS)
    full, _ = h.messages(3, 10_000)
    turns = [len(full[i]["content"]) + len(full[i + 1]["content"]) for i in range(1, 7, 2)]
    messages, omitted = h.messages(3, turns[1] + turns[2])  # room for the last two steps exactly
    assert omitted == 1
    assert messages[1]["content"].startswith("(1 earlier steps omitted)\n\nResult of your last action: you walk north")
    assert [m["content"] for m in messages[2:]] == [m["content"] for m in full[4:]]
    messages, omitted = h.messages(3, 0)
    assert omitted == 3 and len(messages) == 2
    assert messages[1]["content"].startswith("(3 earlier steps omitted)\n\n")


# -- the own-action guard -----------------------------------------------------------


def test_the_guard_replaces_whole_words_whatever_the_case_and_spacing() -> None:
    g = ActionGuard("go north")
    assert g.redact("Then GO   North,\nthen go\nnorth.") == ("Then [action withheld],\nthen [action withheld].", 2)
    assert g.redact("go northward; undergo north") == ("go northward; undergo north", 0)
    assert ActionGuard("a").redact("a a a") == ("a a a", 0)  # shorter than 2: not guarded
    call = {"name": "take", "args": {"item": "key"}}
    for shown in (json.dumps(call), json.dumps(call, sort_keys=True), '{ "name" : "take", "args":{"item":"key"} }'):
        assert ActionGuard(call).redact(f"did {shown} ok") == ("did [action withheld] ok", 1), shown
    # an action that is the marker's own words gets another marker
    assert ActionGuard("action withheld").redact("the action withheld") == ("the [withheld]", 1)


@pytest.mark.parametrize(
    "action",
    [
        "go north",
        "action withheld",
        '{"name": "take"}',  # a text that reads as JSON is still a text
        {"name": "take", "args": {"item": "key", "n": 1.5}},
        {"args": {"n": 1.5, "item": "key"}, "name": "take"},  # the same call, keys as sent in another order
        {"name": "schlüssel nehmen", "args": []},
        ["take", 2],
    ],
)
def test_a_shared_guard_is_the_guard_of_its_action(action: Any) -> None:
    """Steps with equal actions share one guard (`guard_for`); it has the patterns and
    marker a guard made for the action has, and a text, a call and another key order
    each get their own."""
    shared, own = render.guard_for(action), ActionGuard(action)
    assert [p.pattern for p in shared.patterns] == [p.pattern for p in own.patterns]
    assert shared.marker == own.marker
    assert render.guard_for(json.loads(json.dumps(action))) is shared
    if isinstance(action, dict):
        reordered = dict(reversed(list(action.items())))
        assert render.guard_for(reordered) is not shared
        assert [p.pattern for p in render.guard_for(reordered).patterns] == [
            p.pattern for p in ActionGuard(reordered).patterns
        ]


def _shows(action: str, text: str) -> bool:
    """An independent check: the action's words, in order, as whole words."""
    words = action.split()
    if not words or len(" ".join(words)) < 2:
        return False
    body = r"\s+".join(re.escape(w) for w in words)
    start = r"(?<!\w)" if re.match(r"\w", words[0][0]) else ""
    end = r"(?!\w)" if re.match(r"\w", words[-1][-1]) else ""
    return re.search(start + body + end, text, re.IGNORECASE) is not None


ACTIONS = st.text(alphabet=st.sampled_from("abcXYZ -_.!?[]é1"), min_size=2, max_size=12).filter(
    lambda a: len(a.strip()) >= 2
)
FILLER = st.text(alphabet=st.sampled_from("abc XYZ\n-.[]é1"), max_size=20)


@settings(max_examples=300, deadline=None)
@given(action=ACTIONS, parts=st.lists(FILLER, min_size=1, max_size=6), case=st.booleans())
def test_no_redacted_text_shows_the_action(action: str, parts: list[str], case: bool) -> None:
    shown = action.upper() if case else action
    text = shown.join(parts) + " " + shown
    out, _ = ActionGuard(action).redact(text)
    assert not _shows(action, out), (action, text, out)
    assert not ActionGuard(action).found(out)


def _guard_pattern_as_first_written(text: str) -> re.Pattern[str]:
    """The guard's pattern with "not after a word character" stated before the first
    token, as it was first written (the guard states it after that token, to be searched
    for by its literal)."""
    text = re.sub(r"\s*([{}\[\],:])\s*", r"\1", text.strip())
    tokens = [t for t in re.findall(r"\s+|[{}\[\],:]|[^\s{}\[\],:]+", text) if not t.isspace()]
    body = ""
    for previous, token in zip([None, *tokens], tokens, strict=False):
        if previous is not None:
            body += r"\s*" if previous in "{}[],:" or token in "{}[],:" else r"\s+"
        body += re.escape(token)
    start = r"(?<!\w)" if re.match(r"\w", text[0]) else ""
    end = r"(?!\w)" if re.match(r"\w", text[-1]) else ""
    return re.compile(start + body + end, re.IGNORECASE)


# Letters whose case folding is not one lower() away: the long s, the Kelvin sign, the
# dotless and the dotted i, the sharp s.
TRICKY = 'aSsſKkıIiİß1_ é-.[]{},:"\n\t'


@settings(max_examples=400, deadline=None)
@given(
    action=st.one_of(
        st.text(alphabet=st.sampled_from(TRICKY), min_size=2, max_size=10),
        st.dictionaries(
            st.text(alphabet=st.sampled_from("aSſkK_"), min_size=1, max_size=4),
            st.integers(0, 9),
            min_size=1,
            max_size=2,
        ),
    ),
    parts=st.lists(st.text(alphabet=st.sampled_from(TRICKY), max_size=12), min_size=1, max_size=6),
)
def test_the_guard_finds_exactly_what_its_first_written_patterns_find(action: Any, parts: list[str]) -> None:
    shown = action if isinstance(action, str) else json.dumps(action)
    text = shown.join(parts) + shown.upper() + shown.lower()
    for rendering in sorted(render._renderings(action)):
        mine = render._pattern(rendering)
        if mine is None:  # too short to guard, either way
            assert len(re.sub(r"\s*([{}\[\],:])\s*", r"\1", rendering.strip())) < render.MIN_ACTION_CHARS
            continue
        first = _guard_pattern_as_first_written(rendering)
        assert [m.span() for m in mine.finditer(text)] == [m.span() for m in first.finditer(text)], (mine, first, text)
        assert mine.subn("[x]", text) == first.subn("[x]", text)


@settings(max_examples=200, deadline=None)
@given(
    action=ACTIONS,
    pieces=st.lists(st.tuples(FILLER, st.booleans()), min_size=1, max_size=8),
    max_chars=st.integers(min_value=1, max_value=400),
)
def test_a_fitted_block_never_shows_the_action_nor_exceeds_its_budget(
    action: str, pieces: list[tuple[str, bool]], max_chars: int
) -> None:
    draft = Draft(
        "memory",
        "items",
        tuple(
            Piece(f"- {text} {action if with_action else ''}", i, f"id{i}")
            for i, (text, with_action) in enumerate(pieces)
        ),
    )
    block = fit(TEMPLATE, draft, ActionGuard(action), max_chars=max_chars)
    assert len(block.text) <= max_chars
    assert not _shows(action, block.text), (action, block.text)


# -- fitting a block ------------------------------------------------------------------


def test_pieces_go_in_by_priority_while_they_fit_shown_in_display_order() -> None:
    pieces = (
        Piece("- second best, short", 1, "b", "Skills:"),
        Piece("- the best " + "x" * 60, 0, "a", "Skills:"),
        Piece("- third " + "y" * 200, 2, "c", "Heuristics:"),
        Piece("- fourth, short", 3, "d", "Heuristics:"),
    )
    draft = Draft("memory", "items", pieces)
    guard = ActionGuard("zz-not-there")
    whole = fit(TEMPLATE, draft, guard, max_chars=10_000)
    assert whole.item_ids == ["b", "a", "c", "d"] and whole.omitted == 0
    assert whole.item_chars == {p.item_id: len(p.text) for p in pieces}
    assert whole.text.count("Skills:") == 1 and whole.text.count("Heuristics:") == 1
    budget = len(whole.text) - 150  # the long third one no longer fits; the short fourth still does
    part = fit(TEMPLATE, draft, guard, max_chars=budget)
    assert part.item_ids == ["b", "a", "d"] and part.omitted == 1 and len(part.text) <= budget
    assert part.text.endswith("Heuristics:\n- fourth, short")
    tiny = fit(TEMPLATE, draft, guard, max_chars=40)
    assert tiny.item_ids == [] and len(tiny.text) <= 40 and tiny.omitted == 4


def test_a_token_budget_keeps_the_best_pieces_that_fit(tmp_path: Path) -> None:
    tokens = word_level_tokenizer(tmp_path / "tokenizer.json")
    pieces = tuple(Piece(f"- take the key from the table {i}", i, f"i{i}") for i in range(6))
    draft = Draft("memory", "items", pieces)
    guard = ActionGuard("zz-not-there")
    whole = fit(TEMPLATE, draft, guard, max_chars=10_000, tokens=tokens)
    assert whole.tokens == tokens.count(whole.text)
    for most in (whole.tokens - 1, 40, 25, 3):
        block = fit(TEMPLATE, draft, guard, max_chars=10_000, tokens=tokens, max_tokens=most)
        assert block.tokens is not None and block.tokens <= most and block.tokens == tokens.count(block.text)
        assert block.item_ids == [f"i{i}" for i in range(len(block.item_ids))]  # the best ranked kept
        assert block.omitted == 6 - len(block.item_ids)


# -- builders ---------------------------------------------------------------------


RUN = [estep(i, f"room {i}", f"act {i}", result=f"saw {i}", reward=float(i)) for i in range(5)]


@pytest.mark.parametrize(
    ("position", "horizon", "shown", "outcome"),
    [
        (0, 1, [0, 1], False),
        (0, 3, [0, 1, 2, 3], False),
        (0, 4, [0, 1, 2, 3, 4], True),  # the last step is within the horizon: the outcome too
        (1, 3, [1, 2, 3, 4], True),
        (2, 10, [2, 3, 4], True),
        (4, 1, [4], True),
    ],
)
def test_hindsight_shows_the_next_h_steps_and_the_outcome_when_it_ends_within(
    position: int, horizon: int, shown: list[int], outcome: bool
) -> None:
    ep = episode(RUN, Outcome(True, 1.0, None))
    draft = builders.hindsight_draft(ep, position, horizon)
    assert isinstance(draft, Draft)
    ids = [p.item_id for p in draft.pieces if p.item_id]
    assert ids == [f"step:{i}" for i in shown] + (["outcome"] if outcome else [])
    block = fit(TEMPLATE, draft, ActionGuard(RUN[position].action), max_chars=10_000)
    assert f"hindsight, {horizon} step(s) ahead" in block.text
    assert f"act {position}" not in block.text  # never the step's own action
    for i in shown[1:]:
        assert f"action: act {i}" in block.text
    assert ("Outcome: the attempt succeeded, reward 1" in block.text) is outcome
    if not outcome:
        assert f"The attempt went on after step {position + horizon}." in block.text


def test_hindsight_of_an_open_attempt_and_of_nothing_yet() -> None:
    ep = episode(RUN[:2])
    draft = builders.hindsight_draft(ep, 0, 5)
    assert isinstance(draft, Draft)
    assert "The attempt had not ended (no outcome recorded)." in [p.text for p in draft.pieces]
    bare = episode([estep(0, "room", "look")])
    assert isinstance(builders.hindsight_draft(bare, 0, 1), NotApplicable)


def test_reflection_only_for_a_failed_attempt() -> None:
    steps = [
        estep(0, "a hall", "go north", result="you walk north"),
        estep(1, "the door is locked", "kick door", result="ouch", caused_failure=True),
    ]
    assert isinstance(builders.reflection_draft(episode(steps, Outcome(True, 1.0, None))), NotApplicable)
    assert isinstance(builders.reflection_draft(episode(steps)), NotApplicable)
    draft = builders.reflection_draft(episode(steps, Outcome(False, 0.0, "the door held")))
    assert isinstance(draft, Draft)
    text = fit(TEMPLATE, draft, ActionGuard("go north"), max_chars=10_000).text
    assert text == (
        "Privileged context: this attempt at the task failed. Treat it as a flawed attempt to learn from.\n"
        "Task: open the door\n"
        "Failure reason: the door held\n"
        "What went wrong:\n"
        "- Step 1: in state 'the door is locked', the action 'kick door' led to: ouch\n"
        "Outcome: the attempt failed, reward 0, failure reason: the door held\n"
        "Before acting, consider what went wrong in this attempt and what to do differently."
    )
    # at the flagged step itself, its action is withheld
    assert (
        "the action '[action withheld]' led to: ouch"
        in fit(TEMPLATE, draft, ActionGuard("kick door"), max_chars=10_000).text
    )
    unflagged = builders.reflection_draft(episode(steps[:1], Outcome(False, None, None)))
    assert isinstance(unflagged, Draft)
    assert "(no step was flagged; the last one ended the attempt)" in unflagged.pieces[0].text


def test_attempt_summary_says_what_each_attempt_established_failed_at_and_planned() -> None:
    first = episode(
        [
            estep(0, "a hall", "go north", result="a kitchen", reward=0.5, internal_state="find the key"),
            estep(1, "a kitchen", "kick door", result="ouch", caused_failure=True, internal_state="find the key"),
            estep(2, "a kitchen", "wait", internal_state="open the door"),
        ],
        Outcome(False, 0.0, "the door held"),
        id="a1",
        attempt=1,
    )
    draft = builders.attempt_summary_draft([first])
    assert isinstance(draft, Draft)
    assert draft.pieces[0].text == (
        "- Attempt 1 (a1, 3 steps): the attempt failed, reward 0, failure reason: the door held\n"
        "  Established: step 0 'go north' -> a kitchen (reward 0.5)\n"
        "  Failed at: the door held; step 1 'kick door' -> ouch\n"
        "  Planned: find the key; open the door"
    )
    assert isinstance(builders.attempt_summary_draft([]), NotApplicable)
