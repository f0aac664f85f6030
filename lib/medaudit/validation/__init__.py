"""How far the numbers can be trusted: the power planner before a run, the coverage simulation
of every printed interval and test, and the recovery of planted effects through the notebooks.
"""
