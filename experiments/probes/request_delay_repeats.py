"""How far apart do calibrations put the request delay? The request probe repeated, at a few round counts.

    python experiments/probes/request_delay_repeats.py [--target local:2] [--rounds 5 20] [--traced-steps 3 5]
        [--skipped-steps 0 1 2] [--senders 0 1 0,1] [--client-cores 0 1] [--repeats 6] [--out results/request_delay_repeats.json]

`placer calibrate` fits `request_delay` from the request probe (`placer.calibrate.measure_request_delay`): a
small tensor's hop beside a sender that goes on computing, against its hop beside an idle sender, in interleaved
rounds. The busy hop lands anywhere from at once to milliseconds late from round to round, so the delay a
calibration finds depends on how many hops it took. Here the probe runs `--repeats` times at each count of
`--rounds` and each reading (repeats interleaved, on one testbed): a reading traces `--traced-steps` steps in a
row per measurement and reads the hops of all but the first `--skipped-steps` (`placer calibrate` reads
`placer.calibrate.REQUEST_TRACED_STEPS` and skips `REQUEST_SKIPPED_STEPS`); with nothing skipped, the JSON's hops
say how the first traced step after the untraced ones differs from those after it. `--senders` says which
worker's tensor is read: `0` the first's (on `local:2` the session's client shares its core), `1` the second's,
`0,1` both in turn, pooled, as `placer calibrate` reads them (`placer.calibrate.REQUEST_SENDERS`, the default).
`--client-cores 0 1` runs every reading with the session's client pinned to each core in turn (the testbed pins
it to the first worker's core, 0 on `local:2`): whether what shares a sender's core decides how late it serves. Each repeat's hops are averaged two ways: as `placer calibrate` does (`placer.calibration.request_delay`:
means without the highest and lowest tenth) and as medians. Reported per round count, hops a round and average:
each repeat's delay, their median, and the largest distance of a repeat from that median (the
calibration-stability aim is within 20 %).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402


def median_delay(hops) -> float:
    """The request delay as medians: the median busy hop minus the median idle hop (0 when not later)."""
    return max(statistics.median(hops["busy"]) - statistics.median(hops["idle"]), 0.0)


def senders_of(text: str) -> tuple[int, ...]:
    """"0", "1" or "0,1": the request probe's senders of one reading."""
    try:
        senders = tuple(int(part) for part in text.split(","))
    except ValueError:
        senders = ()
    if not senders or set(senders) - {0, 1} or len(set(senders)) != len(senders):
        raise argparse.ArgumentTypeError(f"senders are 0, 1 or 0,1, not {text!r}")
    return senders


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="local:2", help="a measured target with two workers (default local:2)")
    parser.add_argument("--rounds", type=int, nargs="+", default=[5, 20],
                        help="rounds of the probe per repeat, one or more counts (default 5 20)")
    parser.add_argument("--traced-steps", type=int, nargs="+", default=None,
                        help="traced steps a measurement, one or more counts (default: as placer calibrate traces)")
    parser.add_argument("--skipped-steps", type=int, nargs="+", default=None,
                        help="traced steps not read at the start of each, one or more counts; pairs that would "
                        "read nothing are left out (default: as placer calibrate skips)")
    parser.add_argument("--senders", nargs="+", default=None, type=senders_of,
                        help="the devices that send, one or more readings: 0, 1, or 0,1 pooled (default: as "
                        "placer calibrate, 0,1)")
    parser.add_argument("--client-cores", type=int, nargs="+", default=None,
                        help="cores to pin the session's client to, each reading on each in turn (default: where the "
                        "testbed pins it)")
    parser.add_argument("--repeats", type=int, default=6, help="repeats at each round count (default 6)")
    parser.add_argument("--out", default="results/request_delay_repeats.json")
    args = parser.parse_args(argv)
    from placer.calibrate import REQUEST_SENDERS, REQUEST_SKIPPED_STEPS, REQUEST_TRACED_STEPS, measure_request_delay
    from placer.calibration import request_delay

    readings = [(traced, skipped) for traced in args.traced_steps or [REQUEST_TRACED_STEPS]
                for skipped in args.skipped_steps or [REQUEST_SKIPPED_STEPS] if 0 <= skipped < traced]
    if min(args.rounds) < 2 or args.repeats < 2 or not readings:
        parser.error("give at least 2 rounds per repeat, at least 2 repeats and a reading that reads a traced step "
                     "(fewer steps skipped than traced)")
    foreign = sorted(set(args.client_cores or ()) - os.sched_getaffinity(0))
    if foreign:
        parser.error(f"this process may not run on core(s) {', '.join(map(str, foreign))}: pin the client to cores "
                     f"it may use ({', '.join(map(str, sorted(os.sched_getaffinity(0))))})")

    from placer.measure import Measurer, parse_target
    from placer.measure.worker import pin_to_cores

    delays: dict[tuple, list[float]] = {}
    settings = [(rounds, traced, skipped, sender, client) for rounds in args.rounds for traced, skipped in readings
                for sender in args.senders or [REQUEST_SENDERS] for client in args.client_cores or [None]]

    def key(rounds, traced, skipped, sender, client) -> str:
        where = "" if client is None else f"-client{client}"
        return f"{rounds}x{traced}-{skipped}-sender{','.join(map(str, sender))}{where}"

    hops_kept: dict[str, list[dict]] = {key(*setting): [] for setting in settings}
    with Measurer(parse_target(args.target)) as measurer:
        measurer.start()
        for repeat in range(args.repeats):
            for rounds, traced, skipped, sender, client in settings:
                if client is not None:
                    pin_to_cores([client], measurer.worker_pid)
                _, hops = measure_request_delay(measurer, rounds, traced_steps=traced, skipped_steps=skipped,
                                                senders=sender)
                hops_kept[key(rounds, traced, skipped, sender, client)].append(
                    {name: [h * 1e3 for h in hops[name]] for name in ("idle", "busy")} | {"sender": list(hops["sender"])})
                for average, delay in (("trimmed mean", request_delay(hops)), ("median", median_delay(hops))):
                    delays.setdefault((rounds, traced, skipped, sender, client, average), []).append(delay)
                print(f"repeat {repeat + 1}, {key(rounds, traced, skipped, sender, client)}: "
                      f"{request_delay(hops) * 1e3:.2f} ms", file=sys.stderr, flush=True)
    rows = []
    for (rounds, traced, skipped, sender, client, average), values in delays.items():
        middle = statistics.median(values)
        rows.append({"rounds": rounds, "traced_steps": traced, "skipped_steps": skipped,
                     "sender": ",".join(map(str, sender)), "client_core": "" if client is None else client,
                     "average": average,
                     "median_ms": middle * 1e3,
                     "farthest_pct": 100 * max(abs(v - middle) for v in values) / middle if middle > 0 else None,
                     "repeats_ms": " ".join(f"{v * 1e3:.2f}" for v in values)})
    command = "python experiments/probes/request_delay_repeats.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("request_delay_repeats", ["rounds", "traced_steps", "skipped_steps", "sender", "client_core", "average", "median_ms", "farthest_pct",
                                           "repeats_ms"], rows,
                 args.out, command=command.strip(), target=args.target, repeats=args.repeats, hops_ms=hops_kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())
