"""A two-node Ray cluster in network namespaces (toolkit.testing.ray_cluster): the cluster commands, tuning and
sweeps on it, and its faults (a hung or crashing build, a worker node lost mid-sweep, the head lost mid-run)."""

from __future__ import annotations

import json
import textwrap

import pytest

from toolkit.backends import make_task
from toolkit.boards import resolve_board
from toolkit.harness import exhaustive_cache
from toolkit.testing.ray_cluster import ClusterUnavailable, make_cluster, TestCluster as Cluster
from toolkit.tuning.journal import read_log
from toolkit.workloads import parse_workload

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    try:
        c = make_cluster()
    except ClusterUnavailable as exc:
        pytest.skip(f"no namespaced Ray cluster here: {exc}")
    try:
        c.start("head")
        c.start("worker")
        yield c
    finally:
        c.close()


def _records(path):
    return read_log(path)[1]


def _one_line_error(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[-1]


def test_status_lists_both_nodes_and_exposure_needs_expose(cluster: Cluster) -> None:
    r = cluster.run(["cluster", "status", "--json"])
    assert r.returncode == 0, r.stderr
    nodes = json.loads(r.stdout)["nodes"]
    assert sorted(n["address"] for n in nodes if n["alive"]) == [cluster.ip("head"), cluster.ip("worker")], r.stdout
    r = cluster.run(["cluster", "join", cluster.address], node="worker")   # the namespace has a network address
    assert r.returncode == 2 and "--expose" in _one_line_error(r)
    r = cluster.run(["tune", "-w", "resnet18.C11", "-n", "4", "--cluster", f"{cluster.ip('worker')}:1"])
    assert r.returncode == 2 and "no Ray head answers" in _one_line_error(r)


def test_tune_builds_on_the_cluster_and_resumes(cluster: Cluster) -> None:
    argv = ["tune", "-w", "resnet18.C11", "-b", "vta-fsim", "-t", "random", "--log", "c11.jsonl",
            "--cluster", cluster.address]
    r = cluster.run([*argv, "-n", "16"])
    assert r.returncode == 0, r.stderr[-2000:]
    r = cluster.run([*argv, "-n", "24", "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    indices = [rec.index for rec in _records(cluster.work / "head" / "c11.jsonl")]
    assert len(indices) == 24 == len(set(indices))


BUILDER_FAULTS = textwrap.dedent('''
    import json, os, sys, time
    import ray
    from toolkit.backends import make_task
    from toolkit.backends.vta.template import VTAConv2dTemplate
    from toolkit.boards import resolve_board
    from toolkit.cluster.builder import RayBuilder
    from toolkit.tuning.core.builder import build_one
    from toolkit.tuning.core.template import Artifact
    from toolkit.workloads import parse_workload

    class Faulty(VTAConv2dTemplate):       # pickled by value (defined in __main__)
        def build(self, config):
            if config.index == 0:
                time.sleep(600)            # a hung build
            if config.index == 1:
                os._exit(3)                # a crashing build
            time.sleep(0.5)                # slow enough that two builds at once run on both nodes
            art = super().build(config)
            art.features["node"] = float(int(ray.get_runtime_context().get_node_id()[:8], 16))
            return art

    task = make_task(parse_workload("resnet18.C11"), resolve_board("vta-fsim"))
    template = Faulty(task.workload, task.board.profile)
    # Ray runs a task whose worker died twice more (SYSTEM_RETRIES), each on a freshly started worker, and the
    # timeout counts from submission: it must hold three worker starts on a loaded machine, or the crash reads
    # as a TIMEOUT
    builder = RayBuilder(sys.argv[1], timeout_s=15.0)
    t0 = time.monotonic()
    first = builder.build(template, [task.space.get(i) for i in range(8)])
    valid = [i for i in range(2, task.space.size)
             if isinstance(build_one(task.template, task.space.get(i)), Artifact)][:4]
    again = builder.build(template, [task.space.get(i) for i in valid])
    builder.close()
    print(json.dumps({"n_parallel": builder.n_parallel, "seconds": time.monotonic() - t0,
                      "first": [o.error.name if not isinstance(o, Artifact) else o.features.get("node") for o in first],
                      "again": [o.features["node"] if isinstance(o, Artifact) and o.payload else None
                                for o in again]}))
''')


def test_hung_and_crashing_builds_end_as_failed_trials(cluster: Cluster) -> None:
    script = cluster.work / "head" / "faults.py"
    script.write_text(BUILDER_FAULTS)
    r = cluster.run(["python", str(script), cluster.address], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["n_parallel"] == 2
    assert out["first"][0] == "TIMEOUT" and out["first"][1] == "COMPILE_ERROR"
    assert not {"TIMEOUT", "COMPILE_ERROR"} & set(out["first"][2:]), out   # the others built (or were invalid)
    assert None not in out["again"]             # the cluster builds on after a killed and a crashed worker
    assert len(set(out["again"])) == 2          # on both nodes: two builds at once, one CPU each


def test_head_lost_mid_run_says_so_and_resume_continues(cluster: Cluster) -> None:
    argv = ["tune", "-w", "resnet18.C2", "-b", "vta-fsim", "-t", "random", "--log", "c2.jsonl",
            "--cluster", cluster.address]
    import subprocess
    import sys
    import time

    log = cluster.work / "head" / "c2.jsonl"
    proc = subprocess.Popen(["ip", "netns", "exec", cluster.netns("head"), sys.executable, "-m", "toolkit", *argv,
                             "-n", "2000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cluster.env("head"), cwd=cluster.work / "head")
    deadline = time.monotonic() + 120
    while (not log.exists() or len(log.read_text().splitlines()) < 40) and time.monotonic() < deadline:
        time.sleep(0.2)
    cluster.kill("head")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "was lost" in [ln for ln in err.splitlines() if ln.strip()][-1] and "Traceback" not in err
    before = [rec.index for rec in _records(log)]
    assert 40 <= len(before) < 2000
    cluster.kill("worker")
    cluster.start("head")
    cluster.start("worker")
    r = cluster.run([*argv, "-n", str(len(before) + 16), "--resume"])
    assert r.returncode == 0, r.stderr[-2000:]
    after = [rec.index for rec in _records(log)]
    assert after[:len(before)] == before and len(after) == len(before) + 16 == len(set(after))


SWEPT = "conv2d:H=8,W=8,CI=32,CO=32,K=3,S=1,P=1"
"""A layer of 256 configs: the sweep outlives the worker node killed after its first round."""

SWEEP = textwrap.dedent('''
    import json, os, signal, sys
    from toolkit.backends import make_task
    from toolkit.boards import resolve_board
    from toolkit.cluster.sweep import sweep
    from toolkit.workloads import parse_workload

    task = make_task(parse_workload(sys.argv[3]), resolve_board("vta-fsim"))
    worker_pgid = int(sys.argv[2])
    def kill_worker_once(done, total):
        global worker_pgid
        if done and worker_pgid:
            os.killpg(worker_pgid, signal.SIGKILL)
            worker_pgid = 0
    print(json.dumps(sweep(task, "sweep.jsonl", sys.argv[1], chunk=8, callback=kill_worker_once)))
''')


def test_sweep_survives_a_worker_lost_and_matches_a_local_sweep(cluster: Cluster, tmp_path) -> None:
    script = cluster.work / "head" / "sweep.py"
    script.write_text(SWEEP)
    r = cluster.run(["python", str(script), cluster.address, str(cluster.nodes["worker"]["pid"]), SWEPT], timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {rec.index: rec for rec in _records(cluster.work / "head" / "sweep.jsonl")}
    task = make_task(parse_workload(SWEPT), resolve_board("vta-fsim"))
    assert len(_records(cluster.work / "head" / "sweep.jsonl")) == len(got) == task.space.size   # each config once
    local = exhaustive_cache(task, tmp_path / "local.jsonl")
    assert {i: (r.valid, r.seconds) for i, r in got.items()} == \
        {i: (r.valid, r.seconds) for i, r in local.by_index.items()}
    cluster.start("worker")
