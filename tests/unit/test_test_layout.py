"""Test modules need unique basenames.

pytest's default (rootdir) import mode imports ``tests/a/test_x.py`` and
``tests/b/test_x.py`` both as the module ``test_x``, and collection of the whole
suite then fails ("import file mismatch") although each file passes alone.  This
check names the clash at once, in the unit run.
"""

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    seen: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name.startswith("test_") or path.name.startswith("bench_"):
            seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each: {clashes}"
