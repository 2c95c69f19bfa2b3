"""Prompt files: every shipped prompt loads, documents exactly the placeholders it
uses, renders into chat messages without its comment block, has an answer model,
and shows an example that the answer model accepts. Plus the step rendering the
prompts are written against."""

from __future__ import annotations

import json
import re
import string

import pytest

from reflectors.llm_client.schemas import OUTPUT_MODELS
from reflectors.prompts import Prompt, PromptError, available_prompts, load_prompt, parse_prompt
from reflectors.prompts.steps import render_outcome, render_steps, shorten

PROMPTS = available_prompts()
EXPECTED = {"heuristics_single", "pool_maintenance", "skills", "rubrics", "golden_negative", "rubric_judge"}


def test_the_expected_prompts_ship_with_answer_models() -> None:
    assert {name for name, _ in PROMPTS} == EXPECTED == set(OUTPUT_MODELS)


@pytest.mark.parametrize(("name", "version"), PROMPTS)
def test_prompt_loads_and_documents_exactly_what_it_uses(name: str, version: int) -> None:
    prompt = load_prompt(name, version)
    assert prompt.id == f"{name}.v{version}"
    used = {field for _, field, _, _ in string.Formatter().parse(prompt.user_template) if field}
    assert set(prompt.placeholders) == used and used
    assert all(len(doc) > 10 for doc in prompt.placeholders.values())
    assert "<!--" not in prompt.system + prompt.user_template
    assert "===" not in prompt.system + prompt.user_template


@pytest.mark.parametrize(("name", "version"), PROMPTS)
def test_prompt_renders_into_system_and_user_messages(name: str, version: int) -> None:
    prompt = load_prompt(name, version)
    values = {key: f"<<{key}>>" for key in prompt.placeholders}
    system, user = prompt.render(**values)
    assert system == {"role": "system", "content": prompt.system}
    assert user["role"] == "user"
    assert all(f"<<{key}>>" in user["content"] for key in values)
    assert "{" not in user["content"]


@pytest.mark.parametrize(("name", "version"), PROMPTS)
def test_the_example_in_each_prompt_is_a_valid_answer(name: str, version: int) -> None:
    system = load_prompt(name, version).system
    example = re.search(r"^Example of the shape.*\n(\{.*\})$", system, re.MULTILINE)
    assert example, "each prompt shows one example answer on the line after 'Example of the shape'"
    OUTPUT_MODELS[name].model_validate(json.loads(example.group(1)))


def test_render_checks_the_values() -> None:
    prompt = load_prompt("pool_maintenance", 1)
    with pytest.raises(PromptError, match=r"missing values \['existing'\], unknown values \['existin'\]"):
        prompt.render(environment="web", candidate="c", existin="typo")
    _, user = prompt.render(environment=None, candidate="c", existing=[{"id": "h-1"}])
    assert "Environment: (none)" in user["content"]
    assert '"id": "h-1"' in user["content"]


def test_unknown_prompt_names_the_available_ones() -> None:
    with pytest.raises(PromptError, match="heuristics_single"):
        load_prompt("heuristics_single", 99)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("=== system ===\ns\n=== user ===\n{a}", "must start with"),
        ("<!--\n{a}: the a value\n-->\n=== user ===\n{a}", "expected a '=== system ==="),
        ("<!--\n{a}: the a value\n-->\n=== system ===\ns\n=== user ===\n{a} {b}", r"documented \['a'\] but used"),
        ("<!--\n-->\n=== system ===\ns\n=== user ===\n{a.b}", "plain names"),
        ("<!--\n-->\n=== system ===\ns\n=== user ===\n{ unclosed", "does not parse"),
    ],
)
def test_malformed_prompt_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(PromptError, match=message):
        parse_prompt("p", 1, text)


def test_system_part_keeps_braces_and_user_part_unescapes_them() -> None:
    text = '<!--\n{x}: the x value\n-->\n=== system ===\n{"a": 1}\n=== user ===\n{{literal}} {x}\n'
    prompt = parse_prompt("p", 1, text)
    assert prompt == Prompt("p", 1, '{"a": 1}', "{{literal}} {x}", {"x": "the x value"})
    assert prompt.render(x="X")[1]["content"] == "{literal} X"


def test_steps_render_with_indexes_fields_and_flags() -> None:
    steps = [
        {"index": 0, "observation": "A locked door.", "internal_state": "Find a key.", "action": "look"},
        {
            "index": 1,
            "observation": "x" * 100,
            "state_data": {"room": "hall"},
            "action": {"tool": "open", "args": {"door": "north"}},
            "result": "",
            "error": "locked",
            "reward": 0.0,
            "done": True,
            "caused_failure": True,
        },
    ]
    assert render_steps(steps, max_field_chars=60) == (
        "[0] observation: A locked door.\n"
        "    thought: Find a key.\n"
        "    action: look\n"
        "\n"
        f"[1] observation: {'x' * 40} …[40 characters cut]… {'x' * 20}\n"
        '    state data: {"room": "hall"}\n'
        '    action: {"args": {"door": "north"}, "tool": "open"}\n'
        "    error: locked\n"
        "    reward 0 | done | caused failure"
    )
    assert render_steps([]) == "(no steps)"
    assert shorten("short", 10) == "short"


def test_outcome_line() -> None:
    assert render_outcome(True, 1.0) == "success, reward 1"
    assert render_outcome(False, None, "ran out of steps") == "failure, failure reason: ran out of steps"
    assert render_outcome(None) == "outcome not reported"
