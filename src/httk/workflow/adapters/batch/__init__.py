"""Batch systems that start task managers: one module per scheduler over the seam of ``base``.

A new batch system is one module (a :class:`base.CommandLineBatchSystem` subclass:
declared data, argv builders, pure parsers) plus one entry point in the group
``httk.workflow.batch_systems``, also from another distribution; its remote
templates follow from the installed transports. ARCHITECTURE.md rule 7,
docs/integrators.md.
"""
