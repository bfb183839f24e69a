"""How often the test cloud's agents look at Neutron (each look costs it tens of ms of CPU)."""


def next_interval(interval, base, most, changed):
    """BASE again after a look that saw a change; double, up to MOST, while none does."""
    return base if changed else min(interval * 2, most)
