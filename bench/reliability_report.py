"""The reliability benchmark's report: its results (``bench/out/reliability.json``) as the archive's section."""

from __future__ import annotations

from typing import Any

SECTION = "## Reliability"


def section(result: dict[str, Any]) -> str:
    """The "Reliability" section from one run's results (:func:`bench.bench_reliability.main`)."""
    env, k, w, b, h = (result[x] for x in ("environment", "sigkill", "two_writers", "board_killed", "hostile"))
    g, d, big = result["board_gone"], result["disk_full"], result["large_log"]
    ek, pl, dt, af = result["export_kills"], result["planted_links"], result["dead_tracker"], result["agent_frames"]
    lines = [SECTION, "",
             f"Machine: {env['machine']}; Python {env['python']}, apache-tvm {env['tvm']}. Date: {env['date']}.",
             f"Command: `{env['command']}`. Everything on this machine (the `vta-fsim` board, a loopback tracker, a "
             "simulator agent started as a real process). JSON: `bench/out/reliability.json`.", "",
             "| scenario | records (expected) | lost | duplicate trials | configs measured twice | notes |",
             "|---|---|---|---|---|---|",
             f"| {k['kills']} SIGKILLs at random moments ({min(k['kill_after_s'])}-{max(k['kill_after_s'])} s into a "
             f"run), each followed by `--resume` | {k['records']} ({k['expected']}) | {k['lost']} | "
             f"{k['duplicate_trials']} | {k['configs_measured_twice']} | records present at the kills: "
             f"{', '.join(map(str, k['records_at_kills']))} |",
             f"| two writers: a second `tune --resume` while the first writes | {w['records']} ({w['expected']}) | "
             f"{w['lost']} | {w['duplicate_trials']} | {w['configs_measured_twice']} | second run refused: "
             f"{'yes' if w['second_refused'] else 'NO'} (exit {w['second_rc']}) |",
             f"| the board's agent SIGKILLed after {b['records_at_kill']} records, started again 3 s later | "
             f"{b['records']} ({b['expected']}) | {b['lost']} | {b['duplicate_trials']} | "
             f"{b['configs_measured_twice']} | tune exit {b['tune_rc']} |",
             f"| the board's agent SIGKILLed for good after {g['records_at_kill']} records, `--wait-board "
             f"{g['wait_board_s']}` | {g['records']} ({g['expected']}) | {g['lost']} | {g['duplicate_trials']} | "
             f"{g['configs_measured_twice']} | waited {g['waited_s']} s ({g['ratio']}x --wait-board; target <= 1.5x), "
             f"tune exit {g['tune_rc']}: \"{g['error']}\" |",
             f"| a full disk (a file-size limit) during `tune`, then during `export` | {d['records_kept']} kept | 0 | "
             f"0 | 0 | tune exit {d['tune_rc']}: \"{d['tune_error']}\"; export exit {d['export_rc']}: "
             f"\"{d['export_error']}\", left behind: {', '.join(d['export_left']) or 'nothing'} |",
             f"| `tune -b local` whose loopback tracker and server are SIGKILLed after {dt['records_at_kill']} records "
             f"| {dt['records']} ({dt['expected']}) | {dt['lost']} | {dt['duplicate_trials']} | "
             f"{dt['configs_measured_twice']} | {dt['processes_killed']} processes killed, started again; tune exit "
             f"{dt['tune_rc']} |", "",
             f"`export --force` SIGKILLed {ek['kills']} times ({min(ek['kill_after_s'])}-{max(ek['kill_after_s'])} s "
             f"in) over an earlier export: **{ek['broken']} broken exports** (each time the folder loaded with every "
             f"listed file's hash); the next export exit {ek['final_rc']}, stage folders left: {ek['stages_left']} "
             "(a killed export's stage is removed by a later one once it is an hour old). A `--log` that is a symlink "
             f"(to another file, dangling): {pl['refused']} of {pl['cases']} refused, "
             f"**{pl['written_through']} written through**. An agent sent {af['frames']} malformed or stalled "
             "handshakes (negative, zero and 2^31-1 key "
             f"lengths, bad UTF-8, a blank key, a bad timeout, one byte then silence, HTTP, 256 bytes of noise): it "
             f"answered a real client after {af['answered_after']} of them and "
             f"{'still runs' if af['agent_alive'] else 'DIED'}.", "",
             f"A log of {big['records']:,} records ({big['mib']} MiB): "
             + "; ".join(f"`{name}` {big[name]['s']:.1f} s, peak {big[name]['mib']} MiB (exit {big[name]['rc']})"
                         for name in ("best", "export", "tune --more 1"))
             + ". `best` and `export` read the log as a stream and keep only the best records; `tune --resume` holds "
             "the records its tuner learns from.", "",
             f"Hostile inputs through the CLI (the bad-input suite, `toolkit/testing/bad_inputs.py`, each case a fresh "
             f"process and folder): **{h['cases']} cases, {h['tracebacks']} tracebacks, {h['silent_successes']} "
             f"silent successes, {h['not_right']} answers other than the expected one-line error** (targets: 0, 0, 0); "
             f"slowest case {h['slowest_s']:.1f} s ({h['slowest_case']}; process start included). "
             "The cases: malformed, "
             "out-of-range and non-ASCII workloads, out-of-range and contradictory tuner options, seeds and budgets, "
             "hostile tuning logs given to `report`, `export` and `tune --resume` (nesting, huge integers, NaN, zero "
             "and negative costs, wrong types, garbage), logs that are folders, devices, under a file or not logs, "
             "hostile export manifests, hostile board entries and inventories, shell syntax in provisioning options, "
             "bad ports, bitstream targets outside the cache, bad VTA configs and shifts, bench and space misuse.", ""]
    return "\n".join(lines) + "\n"
