"""The one assembly of the agent (DESIGN.md: app/).

- ``settings``: the config's sections as typed dataclasses, their defaults in one place;
- ``environment``: the host or a simulated node, the only place that tells them apart;
- ``services``: the background services, started and closed through one interface;
- ``agent``: ``Agent.build(Options)``, the parts it makes once into a frozen ``Parts`` (sampler,
  sources, API connection, health loop), and ``start()`` / ``restore()``;
- ``commands``: ``run``, ``inspect`` and ``health --dry-run`` over an Agent; ``top``;
- ``extender``: the scheduler extender's assembly.

cli.py parses arguments and calls ``commands`` or ``extender``; nothing below app/ imports it.
"""
