"""scalemm.timing's replay order (the GPU timing itself runs in the perf scripts and tune on a device)."""
from scalemm.timing import round_orders


def test_round_orders_vary_the_neighbours_and_repeat_across_runs():
    names = ["bf16", "s0", "s1", "s2", "s3"]
    orders = round_orders(names, 9)
    assert len(orders) == 9 and orders[0] == names
    assert all(sorted(o) == sorted(names) for o in orders)  # every contender once per round
    assert orders == round_orders(names, 9)  # the same orders every run
    # "s0" no longer always follows bf16 (the round-robin's position bias: perf/NOTES.md)
    before = {o[o.index("s0") - 1] if o.index("s0") else None for o in orders}
    assert len(before) >= 3
    assert round_orders(["only"], 3) == [["only"]] * 3 and round_orders(names, 0) == []
