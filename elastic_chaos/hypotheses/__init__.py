"""Hypotheses about faults, each written once (``api``: the contract and ``execute``;
``catalog``: what ships), run by ``elastic-chaos run`` and by the scenarios in
``scenarios/`` on any platform."""
