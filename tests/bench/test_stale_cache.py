"""Replay caches are checked against the current compiler and simulator before they are replayed."""

from __future__ import annotations

import json

import pytest

from toolkit.boards import resolve_board
from toolkit.harness import (StaleCacheWarning, cache_path, ensure_cache, exhaustive_cache, find_cache,
                                  stale_configs)
from toolkit.tuning.replay import MeasurementCache
from toolkit.workloads import parse_workload
from toolkit.backends import make_task


@pytest.fixture(scope="module")
def small():
    """A 14x14 conv2d on vta-fsim (a few hundred configs) and its exhaustive cache."""
    return make_task(parse_workload("conv2d:H=14,W=14,CI=16,CO=32,K=3,S=1,P=1"), resolve_board("vta-fsim"))


def _rewrite(path, change) -> None:
    """Apply ``change(record) -> bool`` to the first record it accepts (the file is rewritten)."""
    lines = path.read_text().splitlines()
    for k in range(1, len(lines)):
        rec = json.loads(lines[k])
        if change(rec):
            lines[k] = json.dumps(rec)
            break
    else:
        raise AssertionError("no record changed")
    path.write_text("\n".join(lines) + "\n")


def test_a_fresh_cache_measures_as_recorded_and_an_edited_one_does_not(small, tmp_path):
    path = cache_path(small, tmp_path)
    cache = exhaustive_cache(small, path)
    assert len(cache) == small.space.size
    assert stale_configs(small, cache) == []
    best = cache.best()

    def faster(rec):   # the old simulator's best was a little faster
        if rec["index"] != best.index:
            return False
        rec["costs"] = [c * 0.97 for c in rec["costs"]]
        return True

    _rewrite(path, faster)
    stale = stale_configs(small, MeasurementCache.from_log(path))
    assert len(stale) == 1 and stale[0].startswith(f"config {best.index}: recorded ")


def test_ensure_cache_sets_a_stale_cache_aside_and_measures_the_space_again(small, tmp_path):
    path = cache_path(small, tmp_path)
    cache = exhaustive_cache(small, path)
    # an older compiler rejected every config this one accepts: all of the sample disagrees
    text = path.read_text().splitlines()
    rejected = [text[0]] + [json.dumps({**json.loads(line), "costs": [], "error": "compile_error",
                                        "message": "old compiler"}) for line in text[1:]]
    path.write_text("\n".join(rejected) + "\n")
    assert find_cache(small, [tmp_path]) is not None                  # the header alone cannot tell
    with pytest.warns(StaleCacheWarning, match="another compiler or simulator"):
        fresh = ensure_cache(small, [tmp_path])
    aside = path.with_name(path.name + ".stale")
    assert aside.read_text().splitlines() == rejected                 # kept as it was, never replayed again
    assert fresh.path == path and stale_configs(small, fresh) == []
    assert {i: r.seconds for i, r in fresh.by_index.items() if r.valid} == \
        {i: r.seconds for i, r in cache.by_index.items() if r.valid}


def test_the_cli_prints_edgetune_warnings_as_one_line(capsys):
    import warnings

    from toolkit.cli.app import _show_warning

    _show_warning(StaleCacheWarning("c/C2.jsonl was measured by another compiler or simulator (config 3: recorded "
                                    "invalid, now 0.31 ms); kept as C2.jsonl.stale, not replayed"),
                  StaleCacheWarning, "bench.py", 1)
    err = capsys.readouterr().err
    assert err.startswith("warning: c/C2.jsonl was measured") and err.count("\n") == 1
    assert warnings.showwarning is not _show_warning                            # only main() installs it
