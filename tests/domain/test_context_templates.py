"""A context template's parts filled from their pieces split at load give the text
`string.Template.substitute` gives: every shipped template and part, with values that
hold the template syntax themselves, and templates written around the placeholder
forms (`$name`, `${name}`, `$$`)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.contexts import templates

values = st.text(alphabet=st.sampled_from("ab $${}_\n\\é"), max_size=12) | st.integers() | st.floats(allow_nan=False)


@pytest.mark.parametrize("name", templates.available())
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_every_shipped_part_fills_as_substitute_does(name: str, data: st.DataObject) -> None:
    tpl = templates.load_template(name)
    for part, wanted in templates.PARTS.items():
        given_values = {key: data.draw(values) for key in sorted(wanted)}
        assert tpl.fill(part, **given_values) == tpl.parts[part].substitute(
            {k: str(v) for k, v in given_values.items()}
        )


texts = st.lists(
    st.sampled_from(["$a", "${a}", "${bc}", "$$", "$$a", "x", "$a$a", "{", "}", "\n", "é", "a", "${", "$"]), max_size=10
).map("".join)


@given(texts, values, values)
@settings(max_examples=300, deadline=None)
def test_any_template_fills_as_substitute_does(text: str, a: object, bc: object) -> None:
    """The same text, the same KeyError for a placeholder without a value ("$a" then
    "x" is `$ax`), and a malformed one ("${" alone) refused when the template is made."""
    tpl = string.Template(text)
    if not tpl.is_valid():
        with pytest.raises(templates.TemplateError):
            templates.ContextTemplate("t", "1", {"p": tpl})
        return
    made = templates.ContextTemplate("t", "1", {"p": tpl})
    try:
        want = tpl.substitute(a=str(a), bc=str(bc))
    except KeyError as exc:
        with pytest.raises(KeyError) as got:
            made.fill("p", a=a, bc=bc)
        assert got.value.args == exc.args
        return
    assert made.fill("p", a=a, bc=bc) == want


def test_a_missing_value_is_a_key_error_as_with_substitute() -> None:
    made = templates.ContextTemplate("t", "1", {"p": string.Template("x ${a} $b")})
    with pytest.raises(KeyError, match="b"):
        made.fill("p", a=1)
    with pytest.raises(KeyError, match="b"):
        made.parts["p"].substitute(a=1)
