"""The ``sparklink`` command."""
