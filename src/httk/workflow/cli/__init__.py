"""The click command line: ``httk workflow ...`` and the ``httk-taskmanager`` alias (see main.py)."""
