"""The bad-input suite: every case of :mod:`toolkit.testing.bad_inputs` through the real CLI, each in a fresh
process and folder: one line on stderr, exit 2, no traceback, nothing recorded changed."""

from __future__ import annotations

import concurrent.futures as cf
import tempfile
from pathlib import Path

import pytest

from toolkit.testing.bad_inputs import CASES, Outcome, run_case


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("bad-inputs")

    def one(case):
        folder = Path(tempfile.mkdtemp(dir=root))
        return case.name, run_case(case, folder)

    with cf.ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, CASES))


def test_there_are_enough_cases_and_their_names_are_unique():
    assert len(CASES) >= 150 and len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_input_gets_a_one_line_error(outcomes, case):
    o = outcomes[case.name]
    assert not o.traceback, o.stderr[-1500:]
    assert not o.changed, f"{o.changed} changed"
    if case.expect == "ok":
        assert o.rc == 0, o.stderr[-800:]
        return
    assert o.rc == 2, f"exit {o.rc}; stdout {o.stdout[-400:]!r}; stderr {o.stderr[-800:]!r}"
    assert len(o.errors) == 1, o.stderr[-800:]
    assert case.says.lower() in o.errors[0].lower(), o.errors[0]
    assert o.right, o.stderr[-800:]
