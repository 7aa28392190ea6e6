"""Simulation: scenarios, their clock, and the simulated environment (PCI view, proc root).

Vendor fake backends live beside their collectors (collectors/*_fake.py) and read the
scenario from here, so the core stays vendor-free and simulation runs real collector code.
"""

from hetero_exporter.simulate.clock import ManualClock, SimulationClock
from hetero_exporter.simulate.scenario import Scenario, ScenarioError, load

__all__ = ["ManualClock", "SimulationClock", "Scenario", "ScenarioError", "load"]
