import pytest

from experiments.probes.transfer_bursts import burst_graph, burst_line, main, placements


def test_bad_burst_counts_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--bursts", "4"], ["--bursts", "1", "33"], ["--bursts", "0", "2"], ["--rounds", "1"],
                      ["--elements", "1"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2, arguments
    assert "at least two burst counts between 1 and 32" in capsys.readouterr().err


def test_the_tensors_are_made_in_the_bursts_asked_for_each_after_its_share_of_the_chain():
    graph = burst_graph(tensors=6, bursts=3, elements=10, chain=6)
    makers = {op.name.split("/")[0] for op in graph.ops if op.name.startswith("maker_")}
    assert makers == {f"maker_{i}" for i in range(6)}

    def chain_step_read(maker: str) -> str:
        """The chain op whose output the maker's fill reads (through its slice)."""
        seen, frontier = set(), [op.name for op in graph.ops if op.name.startswith(maker + "/")]
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            frontier += graph.op(name).producers
        steps = {name.split("/")[0] for name in seen if name.startswith("chain_") and not name.startswith("chain_start")}
        return max(steps, key=lambda step: int(step.split("_")[1]), default="chain_start")

    made_after = [chain_step_read(f"maker_{i}") for i in range(6)]
    assert made_after == ["chain_start", "chain_start", "chain_1", "chain_1", "chain_3", "chain_3"]


def test_the_probe_moves_only_the_readers_and_a_busy_receivers_chain_is_on_worker_1_in_both():
    from placer.devices import local_devices

    devices = local_devices(2)
    graph = burst_graph(tensors=4, bursts=2, elements=10, chain=2, busy_receiver=True)
    reference, probe = placements(graph, devices)
    on_1 = [{name for name, device in p.op_devices(graph).items() if device == devices[1].name}
            for p in (reference, probe)]
    assert on_1[0] and all(name.startswith("busy") for name in on_1[0])
    assert on_1[1] - on_1[0] and all(name.startswith("reader") for name in on_1[1] - on_1[0])


def test_the_burst_line_recovers_the_cost_of_one_more_burst():
    rows = [{"bursts": b, "cost": 2.0 + 0.05 * b} for b in (1, 4, 16, 32)]
    slope, intercept = burst_line(rows, "cost")
    assert slope == pytest.approx(0.05) and intercept == pytest.approx(2.0)
    with pytest.raises(ValueError, match="two different burst counts"):
        burst_line(rows[:1], "cost")
