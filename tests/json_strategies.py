"""Hypothesis strategies for JSON-like values, shared by the property tests of the
serde, the worker's canonical text, the core's JSON helpers and the analysis.

Importable from any test (``tests/`` is on ``sys.path`` through ``tests/conftest.py``).
Each test states what it needs (non-finite floats or not, tuples, the size) instead
of copying the recursion.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(
    *,
    non_finite: bool = False,
    tuples: bool = False,
    text: st.SearchStrategy[str] | None = None,
    key_size: int | None = 8,
    max_size: int = 4,
    max_leaves: int = 20,
) -> st.SearchStrategy[Any]:
    """None, bools, ints, floats and strings, nested in lists and string-keyed dicts.

    ``non_finite``: floats include NaN and the infinities (values some encoders must
    refuse by name); ``tuples``: pairs as well as lists (JSON encoders write them as
    arrays); ``text``: the strategy for strings and dict keys (default ``st.text()``,
    lone surrogates included); ``key_size``: the longest dict key when ``text`` is not
    given (None: unbounded).
    """
    strings = st.text() if text is None else text
    if text is not None:
        keys = text
    else:
        keys = st.text() if key_size is None else st.text(max_size=key_size)
    leaf = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=non_finite, allow_infinity=non_finite)
        | strings
    )

    def nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        out = st.lists(inner, max_size=max_size) | st.dictionaries(keys, inner, max_size=max_size)
        return out | st.tuples(inner, inner) if tuples else out

    return st.recursive(leaf, nest, max_leaves=max_leaves)
