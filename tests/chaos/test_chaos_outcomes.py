"""The chaos suite's own judgement, without a broker: the routing-gap figure and
the outcome that fails a router which lives but routes nothing."""

from __future__ import annotations

from chaos_driver import ChaosConfig, ChaosResult, _longest_gap, failure_report
from chaos_outcomes import routing_never_stalled


def _result(**changes: object) -> ChaosResult:
    r = ChaosResult(config=ChaosConfig())
    for k, v in changes.items():
        setattr(r, k, v)
    return r


def test_the_longest_gap_is_measured_between_arrivals_and_to_the_end_of_the_load() -> None:
    r = _result()
    # run began at 100; faults from 110; arrivals every second but 57 s of silence
    arrivals = [110.5 + i for i in range(10)] + [176.5, 177.5]
    assert _longest_gap(arrivals, 110.0, 180.0, r, r.config, 100.0) == (57.0, 19.5)
    # nothing arrived after 177.5 and the load ran until 240: that is the gap
    assert _longest_gap(arrivals, 110.0, 240.0, r, r.config, 100.0) == (62.5, 77.5)


def test_the_broker_outage_and_the_routers_recovery_after_it_are_left_out() -> None:
    r = _result(broker_window=(125.0, 136.0), router_recovery_after_broker_s=30.0)
    arrivals = [110.5 + i for i in range(10)] + [176.5, 177.5]
    # the 57 s gap overlaps [125, 166]: left out; the rest are 1 s apart
    assert _longest_gap(arrivals, 110.0, 178.0, r, r.config, 100.0) == (1.0, 10.5)


def test_a_router_that_routes_nothing_for_longer_than_a_recovery_fails_the_run() -> None:
    limit = ChaosConfig().recovery_timeout_s
    assert routing_never_stalled(_result(longest_routing_gap=(4.8, 91.0))) is None
    assert routing_never_stalled(_result(longest_routing_gap=(limit, 91.0))) is None
    message = routing_never_stalled(_result(longest_routing_gap=(57.0, 123.0)))
    assert message is not None and "57s from run second 123" in message


def test_a_failure_report_names_the_workdir_and_carries_each_processs_log_lines() -> None:
    r = _result(workdir="/tmp/chaos-x", logs={"router": "ERROR replacing the consumer"})
    report = failure_report(r)
    assert "logs and data: /tmp/chaos-x" in report
    assert "---- router ----\nERROR replacing the consumer" in report


def test_the_figures_header_names_the_routers_workers_and_joins_once_each() -> None:
    from chaos_driver import format_figures

    one = format_figures(_result()).splitlines()[0]
    fleet = format_figures(ChaosResult(config=ChaosConfig.fleet(routers=2))).splitlines()[0]
    assert ", ," not in one and ", ," not in fleet
    assert "router exactly-once, 1 worker;" in one
    assert "router exactly-once, 2 routers, 2 workers, 4 joins" in fleet


def test_a_monitor_is_behind_only_where_an_end_is_past_a_known_position() -> None:
    from chaos_driver import behind

    assert behind({0: 10, 1: 7, 2: 5}, {0: 10, 1: 9, 2: 5}) == [1]
    # a position not known yet (nothing fetched since an assignment at the end)
    assert behind({0: -1001, 1: 3}, {0: 50, 1: 3}) == []
    # end offsets not readable (the broker down): nothing is behind
    assert behind({0: 1, 1: 2}, {}) == []


def test_the_first_arrival_after_a_time_is_the_earliest_one_after_it() -> None:
    from chaos_driver import ArrivalMonitor

    monitor = ArrivalMonitor("127.0.0.1:1", "t")
    assert monitor.first_arrival_after(5.0) is None
    monitor.arrived_at.extend([1.0, 4.0, 6.5, 9.0])
    assert monitor.first_arrival_after(5.0) == 1.5
    assert monitor.first_arrival_after(4.0) == 2.5  # strictly after
    assert monitor.first_arrival_after(9.0) is None


def test_the_figures_list_each_replacement_of_the_monitors_consumer() -> None:
    from chaos_driver import format_figures

    r = _result(monitor_replaced=["run second 120: nothing seen for 10s at positions {0: 4}"])
    text = format_figures(r)
    assert "arrival monitor replaced its stuck consumer (1):" in text
    assert "  run second 120: nothing seen for 10s" in text
