"""The manager: the tick loop and the passes it runs."""
