"""`compare --json` prints its rows one at a time (ddpcli.compare.row.json_list): the text is exactly what
json.dumps of the whole list prints, for any JSON rows (nested, unicode, strings with newlines, empty ones)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.compare.row import json_list

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3), max_leaves=12
)
ROWS = st.lists(st.dictionaries(st.text(), VALUES, max_size=6), max_size=5)


@settings(max_examples=100, deadline=None)
@given(rows=ROWS)
def test_rows_one_at_a_time_are_the_whole_list(rows: list[dict[str, Any]]) -> None:
    assert "".join(json_list(iter(rows))) == json.dumps(rows, indent=2, allow_nan=False)


def test_a_row_with_a_newline_in_a_value_stays_one_value() -> None:
    rows = [{"name": "a\nb", "findings": [], "observed": {}}, {"name": "\u2028"}]
    text = "".join(json_list(rows))
    assert json.loads(text) == rows
    assert text == json.dumps(rows, indent=2, allow_nan=False)
