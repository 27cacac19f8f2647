"""Batch systems that start task managers: argv builders and pure output parsers per scheduler.

A new batch system is one module here (a :class:`base.CommandLineBatchSystem`
subclass) plus an entry point in the group ``httk.workflow.batch_systems`` and a
template under the top-level ``adapters/``. ARCHITECTURE.md rule 7.
"""
